"""Alembic is the only source of the schema: an empty database upgrades to head with no drift."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from herald.migrate import alembic_config, upgrade
from herald.models import Base


def _diff(connection: Any) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def test_head_matches_the_models(database_url: str) -> None:
    # `database_url` was migrated from empty to head by the session fixture.
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            diff = await connection.run_sync(_diff)
            version = await connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            current = version.scalar_one()
    finally:
        await engine.dispose()
    assert diff == []
    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    assert current == head


def test_there_is_one_head(database_url: str) -> None:
    assert len(ScriptDirectory.from_config(alembic_config(database_url)).get_heads()) == 1


def test_any_sqlite_url_upgrades_to_head(tmp_path: Path) -> None:
    """`sqlite:///…` (no driver named) is a URL Herald serves: it migrates too, through the
    asynchronous driver, instead of failing on the synchronous one it names."""
    path = tmp_path / "plain.db"
    upgrade(f"sqlite:///{path}")

    async def current() -> str:
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        try:
            async with engine.connect() as connection:
                found = await connection.exec_driver_sql("SELECT version_num FROM alembic_version")
                return str(found.scalar_one())
        finally:
            await engine.dispose()

    head = ScriptDirectory.from_config(alembic_config(f"sqlite:///{path}")).get_current_head()
    assert asyncio.run(current()) == head


def test_push_tokens_are_backfilled_from_push_id_and_platform(tmp_path: Path) -> None:
    """0011: a user's `push_id` with a `platform` attribute naming a platform becomes that platform's
    token; other users keep only their `push_id` (sent the campaign's first platform, as before)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'backfill.db'}"
    upgrade(url, "0010")
    at = "2026-01-15 12:00:00.000000"

    async def seed_and_read() -> list[Any]:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as connection:
                await connection.exec_driver_sql(
                    "INSERT INTO workspaces (id, name, features, rate_limits, created_at) "
                    f"VALUES ('W1', 'w', '{{}}', '{{}}', '{at}')"
                )
                for customer_id, push_id, attributes in (
                    ("a", "tok-a", '{"platform": "android"}'),
                    ("i", "tok-i", '{"platform": "IOS"}'),
                    ("x", "tok-x", '{"platform": "TV"}'),
                    ("b", "tok-b", "{}"),
                    ("n", None, '{"platform": "IOS"}'),
                ):
                    await connection.execute(
                        text(
                            "INSERT INTO audience_users (workspace_id, customer_id, push_id, email_opt_out, "
                            "push_opt_out, sms_opt_out, attributes, created_at, updated_at) "
                            "VALUES ('W1', :c, :p, 0, 0, 0, :a, :t, :t)"
                        ),
                        {"c": customer_id, "p": push_id, "a": attributes, "t": at},
                    )
            await asyncio.to_thread(upgrade, url)
            async with engine.connect() as connection:
                rows = await connection.exec_driver_sql(
                    "SELECT customer_id, platform, token FROM audience_push_tokens ORDER BY customer_id"
                )
                return [tuple(row) for row in rows.all()]
        finally:
            await engine.dispose()

    assert asyncio.run(seed_and_read()) == [("a", "ANDROID", "tok-a"), ("i", "IOS", "tok-i")]


def test_push_platforms_are_backfilled_from_the_tokens(tmp_path: Path) -> None:
    """0020: a user's `push_platforms` holds the bits of the platforms it has a token for."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'platforms.db'}"
    upgrade(url, "0018")
    at = "2026-01-15 12:00:00.000000"

    async def seed_and_read() -> list[Any]:
        engine = create_async_engine(url)
        try:
            async with engine.begin() as connection:
                await connection.exec_driver_sql(
                    "INSERT INTO workspaces (id, name, features, rate_limits, created_at) "
                    f"VALUES ('W1', 'w', '{{}}', '{{}}', '{at}')"
                )
                for customer_id in ("a", "ai", "w", "none"):
                    await connection.execute(
                        text(
                            "INSERT INTO audience_users (workspace_id, customer_id, push_id, email_opt_out, "
                            "push_opt_out, sms_opt_out, attributes, created_at, updated_at) "
                            "VALUES ('W1', :c, 'tok', 0, 0, 0, '{}', :t, :t)"
                        ),
                        {"c": customer_id, "t": at},
                    )
                for customer_id, platform in (
                    ("a", "ANDROID"),
                    ("ai", "ANDROID"),
                    ("ai", "IOS"),
                    ("w", "WEB"),
                ):
                    await connection.execute(
                        text(
                            "INSERT INTO audience_push_tokens (workspace_id, customer_id, platform, token, "
                            "updated_at) VALUES ('W1', :c, :p, 'tok', :t)"
                        ),
                        {"c": customer_id, "p": platform, "t": at},
                    )
            await asyncio.to_thread(upgrade, url)
            async with engine.connect() as connection:
                rows = await connection.exec_driver_sql(
                    "SELECT customer_id, push_platforms FROM audience_users ORDER BY customer_id"
                )
                return [tuple(row) for row in rows.all()]
        finally:
            await engine.dispose()

    assert asyncio.run(seed_and_read()) == [("a", 1), ("ai", 3), ("none", 0), ("w", 4)]


async def test_the_claim_function_is_costed_as_the_one_row_it_returns(database_url: str) -> None:
    """0021: declared at 1,000 rows (the default for a set-returning function), every statement that
    claims a key with its read was costed a thousand times over and JIT-compiled on each execution."""
    if not database_url.startswith("postgresql"):
        return  # the function exists only on PostgreSQL (SQLite needs no claim function)
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            rows = await connection.exec_driver_sql(
                "SELECT prorows FROM pg_proc WHERE proname = 'herald_claim_idempotency_key'"
            )
            declared = rows.scalar_one()
    finally:
        await engine.dispose()
    assert declared == 1


# The columns a message's settle writes (`delivery.outbox`): an index naming one, in its key or in
# its condition, makes PostgreSQL write every settled row anew in each of the outbox's indexes
# instead of beside its old version (migration 0032).
_SETTLE_WRITES = {"status", "failure_reason", "updated_at", "attempts"}


async def test_no_outbox_index_names_a_column_its_settle_writes(database_url: str) -> None:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                query = "SELECT indexdef FROM pg_indexes WHERE tablename = 'delivery_outbox'"
            else:
                query = (
                    "SELECT sql FROM sqlite_master WHERE type = 'index'"
                    " AND tbl_name = 'delivery_outbox' AND sql IS NOT NULL"
                )
            definitions = [row[0] for row in await connection.exec_driver_sql(query)]
    finally:
        await engine.dispose()
    assert len(definitions) >= 3  # the key's (PostgreSQL) or none (SQLite's own), and the three others
    for definition in definitions:
        assert not set(re.findall(r"\w+", definition.lower())) & _SETTLE_WRITES, definition
