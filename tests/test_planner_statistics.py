"""The worker keeps the planner statistics of the tables the delivery engine fills fast fresh
(`herald.planner_statistics`): on PostgreSQL a table changed past the bound is analyzed (vacuumed
too when autovacuum is off), one below it is left alone; SQLite has nothing to do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import planner_statistics
from herald.audience.models import Event, User
from herald.config import Settings
from herald.db import Database, create_database
from herald.delivery.engine.models import BestTime
from herald.workspaces.service import create_workspace
from tests.conftest import PG_URL

NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
WORKSPACE = "planner-stats"

pytestmark = [pytest.mark.anyio, pytest.mark.own_database]


@pytest.fixture
async def database(settings: Settings) -> AsyncIterator[Database]:
    database = create_database(settings)
    async with database.writer() as session:
        await create_workspace(session, NOW, "planner statistics", WORKSPACE)
        await session.commit()
    yield database
    await database.dispose()


async def _add_events(database: Database, count: int, first: int = 0) -> None:
    """`count` events, then the server's counters of them published to other sessions."""
    rows = [
        {
            "workspace_id": WORKSPACE,
            "id": f"e{n}",
            "customer_id": f"u{n % 50}",
            "action": "bought",
            "attributes": {},
            "occurred_at": NOW,
            "received_at": NOW,
        }
        for n in range(first, first + count)
    ]
    async with database.engine.connect() as connection:
        await connection.execute(insert(Event), rows)
        await connection.commit()
        if connection.dialect.name == "postgresql":
            await _publish_counters(connection)


async def _publish_counters(connection: AsyncConnection) -> None:
    """The counters of this session's changes, seen by other sessions: a backend publishes them
    when idle, at most once a second unless told."""
    await connection.execute(text("SELECT pg_stat_force_next_flush()"))
    await connection.commit()
    await connection.execute(text("SELECT 1"))  # after the idle moment that published them
    await connection.commit()


async def _analyzed(database: Database) -> bool:
    async with database.engine.connect() as connection:
        query = "SELECT coalesce(last_analyze, last_vacuum) IS NOT NULL FROM pg_stat_user_tables"
        return bool(await connection.scalar(text(f"{query} WHERE relname = 'audience_events'")))


@pytest.mark.skipif(PG_URL is None, reason="PostgreSQL's planner statistics")
async def test_a_table_changed_past_the_bound_is_analyzed_and_one_below_it_is_not(database: Database) -> None:
    await _add_events(database, planner_statistics.MIN_CHANGES // 2)
    assert not any(
        "audience_events" in done for done in await planner_statistics.refresh(database, force=True)
    )
    assert not await _analyzed(database)

    await _add_events(database, planner_statistics.MIN_CHANGES, first=planner_statistics.MIN_CHANGES)
    assert "ANALYZE audience_events" in await planner_statistics.refresh(database, force=True)
    assert await _analyzed(database)
    # Analyzed: no longer stale.
    assert not any(
        "audience_events" in done for done in await planner_statistics.refresh(database, force=True)
    )

    # Deleted rows are dead rows: vacuumed too when autovacuum is off (left to it when on).
    async with database.engine.connect() as connection:
        autovacuum = await connection.scalar(text("SELECT current_setting('autovacuum') = 'on'"))
        await connection.execute(
            text("DELETE FROM audience_events WHERE workspace_id = :w"), {"w": WORKSPACE}
        )
        await connection.commit()
        await _publish_counters(connection)
    done = await planner_statistics.refresh(database, force=True)
    assert ("ANALYZE audience_events" if autovacuum else "VACUUM (ANALYZE) audience_events") in done


@pytest.mark.skipif(PG_URL is None, reason="PostgreSQL's planner statistics")
async def test_a_table_analyzed_lately_waits_unless_it_doubled(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked every second, a table past the bound is analyzed again only `REPEAT` seconds after
    # its last analysis, unless it grew to more than twice the rows its statistics count.
    monkeypatch.setattr(planner_statistics, "REPEAT", 3600.0)  # "lately", whatever this machine's speed
    await _add_events(database, planner_statistics.MIN_CHANGES * 4)
    assert "audience_events" in " ".join(await planner_statistics.refresh(database, force=True))
    await _add_events(database, planner_statistics.MIN_CHANGES * 2, first=100_000)  # 4,000 → 6,000
    monkeypatch.setattr(planner_statistics, "_last_check", float("-inf"))
    assert not any("audience_events" in done for done in await planner_statistics.refresh(database))
    await _add_events(database, planner_statistics.MIN_CHANGES * 3, first=200_000)  # → 9,000
    monkeypatch.setattr(planner_statistics, "_last_check", float("-inf"))
    assert "audience_events" in " ".join(await planner_statistics.refresh(database))


@pytest.mark.skipif(PG_URL is None, reason="PostgreSQL's planner statistics")
async def test_users_imported_since_the_last_analysis_are_analyzed_beside_the_caller(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The users' tables are kept analysed too (a claim reads its users by key), and a dispatch asks
    # for it without waiting: the call returns before the commands run, in a task of their own.
    users = [
        {
            "workspace_id": WORKSPACE,
            "customer_id": f"c{n}",
            "email_opt_out": False,
            "push_opt_out": False,
            "sms_opt_out": False,
            "attributes": {},
            "created_at": NOW,
            "updated_at": NOW,
        }
        for n in range(planner_statistics.MIN_CHANGES * 2)
    ]
    async with database.engine.connect() as connection:
        await connection.execute(insert(User), users)
        await connection.commit()
        await _publish_counters(connection)
    monkeypatch.setattr(planner_statistics, "_last_check", float("-inf"))
    monkeypatch.setattr(planner_statistics, "INTERVAL", 3600.0)  # the second call falls within it
    planner_statistics.refresh_in_background(database)
    task = planner_statistics._running
    assert task is not None
    assert not task.done()  # the caller went on before the commands ran
    assert "ANALYZE audience_users" in await task
    planner_statistics.refresh_in_background(database)  # within the interval: nothing to run
    assert await planner_statistics._running == []


@pytest.mark.skipif(PG_URL is None, reason="PostgreSQL's planner statistics")
async def test_best_times_written_by_claims_are_analyzed(database: Database) -> None:
    # SEND_IN_BTS claims write them 1,000 users at a time and read them back by key: never
    # analysed, that read scanned every best time of the workspace.
    rows = [
        {"workspace_id": WORKSPACE, "customer_id": f"c{n}", "hour": 9, "timezone": "UTC", "computed_at": NOW}
        for n in range(planner_statistics.MIN_CHANGES * 2)
    ]
    async with database.engine.connect() as connection:
        await connection.execute(insert(BestTime), rows)
        await connection.commit()
        await _publish_counters(connection)
    assert "delivery_best_times" in " ".join(await planner_statistics.refresh(database, force=True))


async def test_a_check_within_the_interval_does_nothing(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planner_statistics, "INTERVAL", 3600.0)  # whatever this machine's speed
    await planner_statistics.refresh(database, force=True)
    await _add_events(database, planner_statistics.MIN_CHANGES * 2, first=10_000)
    assert await planner_statistics.refresh(database) == []


@pytest.mark.skipif(PG_URL is not None, reason="SQLite")
async def test_sqlite_has_nothing_to_refresh(database: Database) -> None:
    await _add_events(database, planner_statistics.MIN_CHANGES * 2)
    assert await planner_statistics.refresh(database, force=True) == []


@pytest.mark.skipif(PG_URL is None, reason="PostgreSQL's planner statistics")
async def test_a_failure_is_logged_and_never_raised(
    database: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The upkeep runs inside the worker's tick and between a dispatch's batches: it must not stop them.
    monkeypatch.setattr(planner_statistics, "_STALE", text("SELECT no_such_column FROM pg_stat_user_tables"))
    assert await planner_statistics.refresh(database, force=True) == []
    assert "planner statistics not refreshed" in caplog.text
    # The advisory lock was given back: the next check runs.
    monkeypatch.undo()
    await _add_events(database, planner_statistics.MIN_CHANGES * 2, first=20_000)
    assert "ANALYZE audience_events" in await planner_statistics.refresh(database, force=True)


async def test_work_in_the_background_ends_before_the_pools_close(settings: Settings) -> None:
    # A refresh running when the process shut down held its connection through `dispose`: the
    # pool let it go unclosed, for the collector to find in some later test (asyncpg's warning).
    database = create_database(settings)
    holding = asyncio.Event()
    pools = []

    async def hold() -> None:
        async with database.reader() as session:
            await session.execute(text("SELECT 1"))
            pools.append(session.get_bind().pool)
            holding.set()
            await asyncio.Event().wait()  # until cancelled

    task = database.run_in_background(hold())
    await holding.wait()
    [pool] = pools
    assert pool.checkedout() == 1  # type: ignore[attr-defined]
    await database.dispose()
    assert task.cancelled()
    assert pool.checkedout() == 0  # type: ignore[attr-defined]
    assert not database.background
