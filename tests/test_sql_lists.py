"""`one_of(column, name)`: the rows whose column is one of a list given at each run, for lists of
any length (none, one, many) and negated, on the test database's engine (an array parameter on
PostgreSQL, a JSON text on SQLite), with one statement text for every length."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, select
from sqlalchemy.dialects import postgresql, sqlite

from herald.audience.models import User
from herald.config import Settings
from herald.db import Database, create_database
from herald.direct_reads import compiled_form
from herald.sql_lists import one_of
from herald.workspaces.service import create_workspace

NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
WORKSPACE = "sql-lists"
IDS = [f"u{n}" for n in range(5)]
_AMONG = select(User.customer_id).where(User.workspace_id == WORKSPACE, one_of(User.customer_id, "ids"))
_NOT_AMONG = select(User.customer_id).where(User.workspace_id == WORKSPACE, ~one_of(User.customer_id, "ids"))

pytestmark = pytest.mark.anyio


@pytest.fixture
async def database(settings: Settings) -> AsyncIterator[Database]:
    database = create_database(settings)
    async with database.writer() as session:
        if await session.get(User, (WORKSPACE, IDS[0])) is None:
            await create_workspace(session, NOW, "sql lists", WORKSPACE)
            rows = [
                {
                    "workspace_id": WORKSPACE,
                    "customer_id": c,
                    "attributes": {},
                    "created_at": NOW,
                    "updated_at": NOW,
                }
                for c in IDS
            ]
            await session.execute(insert(User), rows)
            await session.commit()
    yield database
    await database.dispose()


@pytest.mark.parametrize("given", [[], ["u1"], ["u0", "u3", "missing"], IDS])
async def test_the_rows_among_a_list_of_any_length(database: Database, given: list[str]) -> None:
    async with database.reader() as session:
        among = set((await session.scalars(_AMONG, {"ids": given})).all())
        not_among = set((await session.scalars(_NOT_AMONG, {"ids": given})).all())
    assert among == set(IDS) & set(given)
    assert not_among == set(IDS) - set(given)


def test_postgresql_gets_one_array_parameter() -> None:
    sql = str(_AMONG.compile(dialect=postgresql.asyncpg.dialect()))  # type: ignore[no-untyped-call]
    assert "= ANY ($2::VARCHAR[])" in sql


def test_sqlite_gets_one_json_parameter() -> None:
    # One statement text whatever the list's length: compiled once, run on the driver
    # (`herald.direct_writes`, `herald.direct_reads.rows_in`), where an expanding list is refused.
    compiled = _AMONG.compile(dialect=sqlite.dialect())
    assert "IN (SELECT value FROM json_each(?))" in str(compiled)
    assert compiled_form(compiled) is not None
