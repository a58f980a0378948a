"""`direct_writes`: write transactions on the driver (SQLite) or the engine (PostgreSQL, when
HERALD_TEST_DATABASE_URL is set), with the same rows, errors and write gate as the engine's; chains
of writes as one statement (PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError

from herald.config import Settings
from herald.db import Database, create_database
from herald.delivery.models import OutboxEntry
from herald.delivery.outbox import _INSERT, _SETTLE, _TABLE
from herald.direct_writes import WriteChain, execute_in
from herald.ids import object_id
from herald.joined_writes import execute_with
from herald.workspaces.service import create_workspace

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.fixture
async def database(settings: Settings) -> AsyncIterator[Database]:
    database = create_database(settings)
    global WORKSPACE  # each test's own workspace: the database is the run's
    WORKSPACE = f"DW{object_id(NOW)}"
    async with database.writer() as session:
        await create_workspace(session, NOW, "direct writes", WORKSPACE)
        await session.commit()
    yield database
    await database.dispose()


WORKSPACE = ""


def _row(delivery_id: str, **changed: Any) -> dict[str, Any]:
    return {
        "workspace_id": WORKSPACE,
        "id": delivery_id,
        "status": "PENDING",
        "failure_reason": None,
        "is_test": True,
        "channel": "PUSH",
        "platform": "ANDROID",
        "locale": "default",
        "variation": "variation_1",
        "connector_id": None,
        "connector_name": None,
        "recipient": "token",
        "customer_id": "u1",
        "campaign_id": None,
        "request_id": None,
        "summary": {"title": "Hi"},
        "attempts": 1,
        "created_at": NOW,
        "updated_at": NOW,
        **changed,
    }


async def _rows(database: Database) -> list[Any]:
    async with database.reader() as session:
        query = select(OutboxEntry.id, OutboxEntry.status, OutboxEntry.summary, OutboxEntry.created_at)
        query = query.where(OutboxEntry.workspace_id == WORKSPACE).order_by(OutboxEntry.id)
        return list((await session.execute(query)).all())


async def test_a_transaction_writes_what_the_engine_would(database: Database) -> None:
    first, second = object_id(NOW), object_id(NOW)
    async with database.writes.transaction() as connection:
        assert await execute_with(connection, _INSERT, _TABLE, _row(first), None) == 1
        assert await execute_in(connection, insert(_TABLE), _row(second)) == 1
    settled = {"status": "SENT", "updated_at": NOW, "row_workspace_id": WORKSPACE, "row_id": first}
    async with database.writes.transaction() as connection:
        assert await execute_with(connection, _SETTLE, _TABLE, settled, None) == 1
        assert await execute_with(connection, _SETTLE, _TABLE, {**settled, "row_id": "none"}, None) == 0
    assert await _rows(database) == [
        (first, "SENT", {"title": "Hi"}, NOW),
        (second, "PENDING", {"title": "Hi"}, NOW),
    ]


async def test_an_error_in_the_block_leaves_nothing_written(database: Database) -> None:
    async def fails_after_a_write() -> None:
        async with database.writes.transaction() as connection:
            await execute_with(connection, _INSERT, _TABLE, _row(object_id(NOW)), None)
            raise RuntimeError("the caller fails after its first write")

    with pytest.raises(RuntimeError):
        await fails_after_a_write()
    assert await _rows(database) == []


async def test_a_duplicate_key_is_an_integrity_error_and_rolls_back(database: Database) -> None:
    taken = object_id(NOW)
    async with database.writes.transaction() as connection:
        await execute_with(connection, _INSERT, _TABLE, _row(taken), None)

    async def writes_a_row_then_the_taken_key() -> None:
        async with database.writes.transaction() as connection:
            await execute_with(connection, _INSERT, _TABLE, _row(object_id(NOW)), None)
            await execute_with(connection, _INSERT, _TABLE, _row(taken), None)

    with pytest.raises(IntegrityError):
        await writes_a_row_then_the_taken_key()
    assert [row[0] for row in await _rows(database)] == [taken]


async def test_writers_take_turns_with_the_engines_writers(database: Database) -> None:
    """A direct transaction begins only once a session of the engine that is writing has committed
    (SQLite: the process's write gate; PostgreSQL: each its own transaction, both rows kept)."""
    order: list[str] = []

    async def direct_write() -> None:
        async with database.writes.transaction() as connection:
            order.append("direct began")
            await execute_in(connection, insert(_TABLE), _row(object_id(NOW)))

    async with database.writer() as session:
        await session.execute(insert(_TABLE).values(_row(object_id(NOW))))
        waiting = asyncio.create_task(direct_write())
        for _ in range(20):
            await asyncio.sleep(0)
        if database.engine.dialect.name == "sqlite":
            assert order == []  # queued on the gate while the session holds it
        await session.commit()
        order.append("session committed")
    await waiting
    if database.engine.dialect.name == "sqlite":
        assert order == ["session committed", "direct began"]
    assert len(await _rows(database)) == 2


async def test_a_transaction_cancelled_midway_leaves_nothing_and_the_next_one_writes(
    database: Database,
) -> None:
    inside = asyncio.Event()

    async def cancelled_after_a_write() -> None:
        async with database.writes.transaction() as connection:
            await execute_with(connection, _INSERT, _TABLE, _row(object_id(NOW)), None)
            inside.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(cancelled_after_a_write())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    kept = object_id(NOW)
    async with database.writes.transaction() as connection:
        await execute_with(connection, _INSERT, _TABLE, _row(kept), None)
    assert [row[0] for row in await _rows(database)] == [kept]


async def test_a_chain_of_writes_is_one_statement_written_whole_or_not_at_all(database: Database) -> None:
    """`WriteChain` (PostgreSQL): what a transaction of several writes would write, as one
    statement; a statement of it that fails leaves nothing of the others."""
    first, second = object_id(NOW), object_id(NOW)
    async with database.writes.transaction() as connection:
        for delivery_id in (first, second):
            await execute_with(connection, _INSERT, _TABLE, _row(delivery_id), None)
    chain = WriteChain(postgresql.asyncpg.dialect())  # type: ignore[no-untyped-call]
    key = {"row_workspace_id": WORKSPACE, "updated_at": NOW}
    assert await execute_in(chain, _SETTLE, {**key, "row_id": first, "status": "SENT"}) == 0
    await execute_in(chain, _SETTLE, {**key, "row_id": second, "status": "FAILED"})
    sql, arguments = chain.statement()
    # Each part's parameters renumbered after the ones before it.
    assert sql.startswith("WITH w0 AS (UPDATE delivery_outbox SET ")
    assert "$8" in sql  # four parameters each: SET status, updated_at; WHERE workspace, id
    assert "$9" not in sql
    assert len(arguments) == 8
    if database.engine.dialect.name != "postgresql":
        return
    broken = WriteChain(database.engine.dialect)
    await execute_in(broken, _SETTLE, {**key, "row_id": first, "status": "SENT"})
    await execute_in(broken, _INSERT, _row(second))  # the key is taken: the whole statement fails
    with pytest.raises(IntegrityError):
        await database.direct.execute(*broken.statement())
    assert [row[1] for row in await _rows(database)] == ["PENDING", "PENDING"]
    await database.direct.execute(sql, arguments)
    assert {row[0]: row[1] for row in await _rows(database)} == {first: "SENT", second: "FAILED"}


def test_a_chain_refuses_what_it_cannot_renumber_or_run() -> None:
    chain = WriteChain(postgresql.asyncpg.dialect())  # type: ignore[no-untyped-call]
    with pytest.raises(TypeError):  # a `$` that is not a parameter's
        chain.add(text("UPDATE delivery_outbox SET recipient = '$1'"), {})
    with pytest.raises(TypeError):
        chain.add(text("UPDATE delivery_outbox SET recipient = 'US$'"), {})
    with pytest.raises(TypeError):  # SQLAlchemy completes it (reads rows back)
        chain.add(insert(_TABLE).returning(_TABLE.c.id), _row("x"))
