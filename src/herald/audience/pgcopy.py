"""PostgreSQL bulk paths of the importer: binary COPY through the driver, in the session's transaction.

- Events: COPY straight into `audience_events`.
- Users: COPY into a temporary staging table, then one `INSERT ... SELECT ... ON CONFLICT DO UPDATE`
  per set of standard attributes sent (and an `UPDATE ... FROM` for `update_existing_only` rows).
  The merge is the one `store` uses (`jsonb_strip_nulls(old || patch)`); a created row whose patch
  held nulls gets them stripped by one more statement, so the stored result equals the executemany
  path's. No lookup of existing ids first: on a table filling up faster than autovacuum analyses it,
  the planner scans it for such a lookup, batch after batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.attributes import FLAG_COLUMNS, STRING_COLUMNS
from herald.audience.ingest import CustomerWrite
from herald.audience.models import Event, User
from herald.audience.store import Outcome

EVENT_COLUMNS = (
    "workspace_id",
    "id",
    "customer_id",
    "action",
    "attributes",
    "platform",
    "app_version",
    "occurred_at",
    "received_at",
)
_USER_COLUMNS = (
    "workspace_id",
    "customer_id",
    *STRING_COLUMNS,
    *FLAG_COLUMNS,
    "attributes",
    "created_at",
    "updated_at",
)
_STAGE = "herald_import_users"
_USERS = User.__tablename__
_STAGE_DDL = f"""
CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGE} (
    LIKE {_USERS} INCLUDING DEFAULTS,
    keyset text NOT NULL,
    has_nulls boolean NOT NULL,
    update_only boolean NOT NULL
) ON COMMIT DELETE ROWS
"""


async def _driver(session: AsyncSession) -> Any:
    """The asyncpg connection under the session, with the session's transaction begun."""
    connection = await session.connection()
    await connection.exec_driver_sql("SELECT 1")
    raw = await connection.get_raw_connection()
    return raw.driver_connection


async def copy_events(session: AsyncSession, records: list[tuple[Any, ...]]) -> None:
    """Rows in `EVENT_COLUMNS` order (attributes as JSON text)."""
    driver = await _driver(session)
    await driver.copy_records_to_table(Event.__tablename__, records=records, columns=EVENT_COLUMNS)


def _upsert_sql(keys: Sequence[str]) -> str:
    columns = ", ".join(_USER_COLUMNS)
    updates = [f"{key} = EXCLUDED.{key}" for key in keys]
    updates += [
        f"attributes = jsonb_strip_nulls({_USERS}.attributes || EXCLUDED.attributes)",
        "updated_at = EXCLUDED.updated_at",
    ]
    # `xmax = 0` tells a row this statement inserted from one it updated. In customer-id order, as
    # `store` writes users: two imports sharing users lock them in one order (no deadlock).
    return (
        f"INSERT INTO {_USERS} ({columns}) SELECT {columns} FROM {_STAGE} "
        "WHERE keyset = $1 AND NOT update_only ORDER BY customer_id "
        f"ON CONFLICT (workspace_id, customer_id) DO UPDATE SET {', '.join(updates)} "
        "RETURNING customer_id, xmax = 0"
    )


def _update_sql(keys: Sequence[str]) -> str:
    updates = [f"{key} = s.{key}" for key in keys]
    updates += ["attributes = jsonb_strip_nulls(u.attributes || s.attributes)", "updated_at = s.updated_at"]
    return (
        f"UPDATE {_USERS} AS u SET {', '.join(updates)} FROM {_STAGE} AS s "
        "WHERE s.keyset = $1 AND s.update_only "
        "AND u.workspace_id = s.workspace_id AND u.customer_id = s.customer_id RETURNING u.customer_id"
    )


_STRIP_SQL = (
    f"UPDATE {_USERS} AS u SET attributes = jsonb_strip_nulls(u.attributes) FROM {_STAGE} AS s "
    "WHERE s.has_nulls AND NOT s.update_only "
    "AND u.workspace_id = s.workspace_id AND u.customer_id = s.customer_id"
)


async def upsert_users(
    session: AsyncSession, workspace_id: str, writes: Sequence[CustomerWrite], now: datetime
) -> list[Outcome]:
    """Apply writes with distinct customer ids (callers split runs); the outcome of each, in order.

    Outcomes come from the statements themselves (RETURNING), not from a lookup beforehand.
    """
    if not writes:
        return []
    driver = await _driver(session)
    await driver.execute(_STAGE_DDL)
    keysets: dict[str, tuple[str, ...]] = {}
    records = []
    for write in writes:
        keys = tuple(sorted(write.columns))
        keyset = ",".join(keys)
        keysets[keyset] = keys
        records.append(
            (
                workspace_id,
                write.customer_id,
                *(write.columns.get(name) for name in STRING_COLUMNS),
                *(write.columns.get(name, False) for name in FLAG_COLUMNS),
                orjson.dumps(write.patch).decode(),  # nulls kept: they remove keys when merging
                now,
                now,
                keyset,
                None in write.patch.values(),
                write.update_existing_only,
            )
        )
    columns = (*_USER_COLUMNS, "keyset", "has_nulls", "update_only")
    await driver.copy_records_to_table(_STAGE, records=records, columns=columns)
    await driver.execute(f"ANALYZE {_STAGE}")  # temporary tables have no statistics otherwise
    outcome: dict[str, Outcome] = {}
    for keyset, keys in keysets.items():
        for customer_id, inserted in await driver.fetch(_upsert_sql(keys), keyset):
            outcome[customer_id] = "created" if inserted else "updated"
        if any(write.update_existing_only for write in writes):
            for (customer_id,) in await driver.fetch(_update_sql(keys), keyset):
                outcome[customer_id] = "updated"
    if any(record[-2] and not record[-1] for record in records):
        await driver.execute(_STRIP_SQL)
    await driver.execute(f"DELETE FROM {_STAGE}")  # the next run may share this transaction's table
    return [outcome.get(write.customer_id, "skipped") for write in writes]
