"""PostgreSQL bulk paths of the importer: binary COPY through the driver, in the session's transaction.

- Events: COPY straight into `audience_events`.
- Users: COPY into a temporary staging table, then one `INSERT ... SELECT ... ON CONFLICT DO UPDATE`
  per set of standard attributes sent. The merge is the one `store` uses
  (`jsonb_strip_nulls(old || patch)`); a created row whose patch held nulls gets them stripped by one
  more statement, so the stored result equals the executemany path's.
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
_STAGE_DDL = f"""
CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGE} (
    LIKE {User.__tablename__} INCLUDING DEFAULTS,
    keyset text NOT NULL,
    has_nulls boolean NOT NULL
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
        f"attributes = jsonb_strip_nulls({User.__tablename__}.attributes || EXCLUDED.attributes)",
        "updated_at = EXCLUDED.updated_at",
    ]
    return (
        f"INSERT INTO {User.__tablename__} ({columns}) SELECT {columns} FROM {_STAGE} WHERE keyset = $1 "
        f"ON CONFLICT (workspace_id, customer_id) DO UPDATE SET {', '.join(updates)}"
    )


_STRIP_SQL = (
    f"UPDATE {User.__tablename__} AS u SET attributes = jsonb_strip_nulls(u.attributes) FROM {_STAGE} AS s "
    "WHERE s.has_nulls AND u.workspace_id = s.workspace_id AND u.customer_id = s.customer_id"
)


async def upsert_users(
    session: AsyncSession, workspace_id: str, writes: Sequence[CustomerWrite], now: datetime
) -> None:
    """Insert or merge writes with distinct customer ids (callers split runs and leave out skips)."""
    if not writes:
        return
    driver = await _driver(session)
    await driver.execute(_STAGE_DDL)
    keysets: dict[str, tuple[str, ...]] = {}
    records = []
    for write in writes:
        keys = tuple(sorted(write.columns))
        keyset = ",".join(keys)
        keysets[keyset] = keys
        flags = [write.columns.get(name, False) for name in FLAG_COLUMNS]
        records.append(
            (
                workspace_id,
                write.customer_id,
                *(write.columns.get(name) for name in STRING_COLUMNS),
                *flags,
                orjson.dumps(write.patch).decode(),  # nulls kept: they remove keys when merging
                now,
                now,
                keyset,
                None in write.patch.values(),
            )
        )
    await driver.copy_records_to_table(
        _STAGE, records=records, columns=(*_USER_COLUMNS, "keyset", "has_nulls")
    )
    for keyset, keys in keysets.items():
        await driver.execute(_upsert_sql(keys), keyset)
    if any(record[-1] for record in records):
        await driver.execute(_STRIP_SQL)
    await driver.execute(f"DELETE FROM {_STAGE}")  # the next batch may share this transaction's table
