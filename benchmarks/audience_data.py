"""A synthetic audience for benchmarks: N users and 10 x N events in one workspace, loaded in bulk.

Deterministic (seeded), so every run and engine sees the same data. PostgreSQL is loaded with
COPY (asyncpg `copy_records_to_table`); SQLite with Core `executemany` in large transactions.
A workspace that already holds exactly this data is reused.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.common import sqlite_value, vacuum_analyze
from herald.audience.models import Event, Segment, SegmentMember, User
from herald.workspaces.models import Workspace

NOW = datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)
EVENTS_PER_USER = 10
BATCH = 20_000
CITIES = ["Pune", "Mumbai", "Delhi", "Bengaluru", "Chennai", "Kolkata", "pune", "Hyderabad"]
PLANS = ["free", "plus", "pro"]
TAGS = ["vip", "early", "churn-risk", "newsletter", "beta"]
ACTIONS = [
    ("App Opened", 40),
    ("Viewed Product", 30),
    ("Added To Cart", 15),
    ("Purchased", 5),
    ("Searched", 10),
]
CATEGORIES = ["shoes", "books", "phones", "toys"]
BETA_SEGMENT = "benchbeta000000000000000"  # a static segment of 1% of the users


def workspace_id_for(users: int) -> str:
    return f"bench_reach_{users}"


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _users(count: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    for index in range(count):
        has_email = rng.random() < 0.9
        yield {
            "customer_id": f"c{index:08d}",
            "email": f"user{index}@example.com" if has_email else None,
            "mobile": f"+91{index:010d}" if rng.random() < 0.5 else None,
            "first_name": f"Name{index % 5000}",
            "last_name": None,
            "gaid": None,
            "push_id": f"push-{index}" if rng.random() < 0.6 else None,
            "timezone": None,
            "email_opt_out": rng.random() < 0.08,
            "push_opt_out": rng.random() < 0.1,
            "sms_opt_out": rng.random() < 0.05,
            "attributes": {
                "city": rng.choice(CITIES),
                "ltv": round(rng.random() * 1000, 2),
                "vip": rng.random() < 0.1,
                "plan": rng.choice(PLANS),
                "last_seen": _stamp(NOW - timedelta(seconds=rng.randrange(90 * 86400))),
                "tags": rng.sample(TAGS, rng.randint(1, 3)),
            },
        }


def _events(users: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    names = [name for name, _ in ACTIONS]
    weights = [weight for _, weight in ACTIONS]
    for index in range(users * EVENTS_PER_USER):
        action = rng.choices(names, weights)[0]
        attributes: dict[str, Any] = {"platform": "ANDROID" if index % 3 else "IOS"}
        if action in ("Viewed Product", "Added To Cart", "Purchased"):
            attributes |= {"price": round(rng.random() * 400, 2), "category": rng.choice(CATEGORIES)}
        yield {
            "id": f"{index:024x}",
            "customer_id": f"c{rng.randrange(users):08d}",
            "action": action,
            "attributes": attributes,
            "platform": None,
            "app_version": None,
            "occurred_at": NOW - timedelta(seconds=rng.randrange(180 * 86400)),
            "received_at": NOW,
        }


def _batches(rows: Iterator[dict[str, Any]], size: int = BATCH) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


async def _present(engine: AsyncEngine, workspace_id: str, users: int) -> bool:
    async with engine.connect() as connection:
        found_users = await connection.scalar(
            select(func.count()).select_from(User).where(User.workspace_id == workspace_id)
        )
        found_events = await connection.scalar(
            select(func.count()).select_from(Event).where(Event.workspace_id == workspace_id)
        )
    return found_users == users and found_events == users * EVENTS_PER_USER


async def _clear(engine: AsyncEngine, workspace_id: str) -> None:
    async with engine.begin() as connection:
        for table in (SegmentMember, Segment, Event, User):
            await connection.execute(delete(table).where(table.workspace_id == workspace_id))
        await connection.execute(delete(Workspace).where(Workspace.id == workspace_id))


async def _copy(engine: AsyncEngine, table: str, rows: Iterator[dict[str, Any]], progress: str) -> None:
    """PostgreSQL COPY, batch by batch (JSON columns are sent as text)."""
    loaded = 0
    async with engine.begin() as connection:
        raw = await connection.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        for batch in _batches(rows, 100_000):
            columns = list(batch[0])
            records = [
                tuple(json.dumps(value) if isinstance(value, dict) else value for value in row.values())
                for row in batch
            ]
            await driver.copy_records_to_table(table, records=records, columns=columns)
            loaded += len(batch)
            print(f"\r  {progress}: {loaded:,}", end="", flush=True)
    print()


async def _insert(engine: AsyncEngine, table: str, rows: Iterator[dict[str, Any]], progress: str) -> None:
    """SQLite: the driver's executemany with values already in their stored form, in one transaction
    (SQLAlchemy's per-row parameter processing would cost more than the inserts themselves)."""
    loaded = 0
    async with engine.begin() as connection:
        await connection.exec_driver_sql("PRAGMA cache_size=-262144")
        raw = await connection.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        for batch in _batches(rows):
            columns = list(batch[0])
            statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            driver.executemany(  # sqlite3, on the loop's thread (herald.sqlite_inline)
                statement, [tuple(sqlite_value(v) for v in row.values()) for row in batch]
            )
            loaded += len(batch)
            print(f"\r  {progress}: {loaded:,}", end="", flush=True)
    print()


async def ensure_audience(engine: AsyncEngine, users: int) -> str:
    """The benchmark workspace for `users` users, built unless it is already complete."""
    workspace_id = workspace_id_for(users)
    if await _present(engine, workspace_id, users):
        print(f"reusing workspace {workspace_id}")
        return workspace_id
    started = time.perf_counter()
    await _clear(engine, workspace_id)
    async with engine.begin() as connection:
        await connection.execute(
            insert(Workspace).values(
                id=workspace_id, name="benchmark", features={}, rate_limits={}, created_at=NOW
            )
        )
        await connection.execute(
            insert(Segment).values(
                workspace_id=workspace_id, id=BETA_SEGMENT, name="Beta testers", kind="static", created_at=NOW
            )
        )
    rng = random.Random(20260115)
    postgres = engine.dialect.name == "postgresql"
    common = {"workspace_id": workspace_id}
    user_rows = ({**common, **row, "created_at": NOW, "updated_at": NOW} for row in _users(users, rng))
    event_rows = ({**common, **row} for row in _events(users, rng))
    member_rows = (
        {**common, "segment_id": BETA_SEGMENT, "customer_id": f"c{index:08d}"}
        for index in range(0, users, 100)
    )
    if postgres:
        await _copy(engine, "audience_users", user_rows, "users")
        await _copy(engine, "audience_events", event_rows, "events")
        await _copy(engine, "audience_segment_members", member_rows, "segment members")
        await vacuum_analyze(engine, "audience_users, audience_events, audience_segment_members")
    else:
        await _insert(engine, "audience_users", user_rows, "users")
        await _insert(engine, "audience_events", event_rows, "events")
        await _insert(engine, "audience_segment_members", member_rows, "segment members")
        async with engine.begin() as connection:
            await connection.exec_driver_sql("ANALYZE")
    print(f"built workspace {workspace_id} in {time.perf_counter() - started:.0f} s")
    return workspace_id
