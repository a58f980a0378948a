"""Shared benchmark plumbing: a migrated database, a workspace with open limits, timing helpers,
and the one-line summary (`BENCH {json}`) each benchmark ends with for `benchmarks/run.py`."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.clock import SystemClock
from herald.config import Settings
from herald.db import create_database
from herald.migrate import upgrade
from herald.workspaces import service as workspaces_service
from herald.workspaces.models import Workspace
from herald.workspaces.scopes import Scope

OPEN_LIMITS = {
    "offers_read": "1000000/minute",
    "offers_write": "1000000/minute",
    "campaign_create": "1000000/second",
    "campaign_create_success": "1000000/minute",
    "campaign_ops": "1000000/second",
    "preview": "1000000/minute",
    "ingest": "1000000/minute",
}


def argument_parser(description: str | None, database_file: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as help, and `--database-url` (default:
    HERALD_BENCH_DATABASE_URL, else `database_file` in the temporary directory, on SQLite)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_url = f"sqlite+aiosqlite:///{Path(tempfile.gettempdir()) / database_file}"
    parser.add_argument("--database-url", default=os.environ.get("HERALD_BENCH_DATABASE_URL", default_url))
    return parser


async def recreate_postgres(url: str) -> None:
    """Drop the PostgreSQL database of `url` and create it empty."""
    import asyncpg  # only the PostgreSQL side needs it

    database = make_url(url)
    name = database.database
    admin_url = database.set(drivername="postgresql", database="postgres")
    admin = await asyncpg.connect(admin_url.render_as_string(hide_password=False))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def start_afresh(database_url: str, sibling: str) -> str:
    """The URL of an empty database for a benchmark to run on: on SQLite the file of `database_url`
    removed; on PostgreSQL its sibling `<name>_<sibling>` dropped and created again, so the data
    other benchmarks keep in the one named (a million offers, reachability's users and events)
    stays. A delivery benchmark's worker takes on whatever is due in its database: work left by an
    earlier run (a periodic campaign, an execution stopped midway) was sent first, and a run's
    figures counted it (publish to first message: 74 to 132 s)."""
    if database_url.startswith("sqlite"):
        _remove_sqlite_files(database_url.split("///", 1)[1])
        return database_url
    url = make_url(database_url)
    fresh = url.set(database=f"{url.database}_{sibling}").render_as_string(hide_password=False)
    await recreate_postgres(fresh)
    return fresh


def _remove_sqlite_files(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@dataclass(frozen=True)
class Credentials:
    workspace_id: str
    secret: str

    def headers(self, settings: Settings, *, campaigns: bool = False) -> dict[str, str]:
        """Basic credentials, and on campaign surfaces the app-key header naming the workspace."""
        token = base64.b64encode(f"{self.workspace_id}:{self.secret}".encode()).decode()
        headers = {"Authorization": f"Basic {token}"}
        if campaigns:
            headers[settings.app_key_header] = self.workspace_id
        return headers


async def prepare_workspace(
    settings: Settings, workspace_id: str, features: dict[str, bool] | None = None
) -> Credentials:
    """Migrate, then (re)create the benchmark workspace with every scope, open limits and `features`."""
    await asyncio.to_thread(upgrade, settings.database_url)
    database = create_database(settings)
    now = SystemClock().now()
    try:
        async with database.writer() as session:
            existing = await session.get(Workspace, workspace_id)
            if existing is None:
                await workspaces_service.create_workspace(session, now, "benchmark", workspace_id)
            for bucket, spec in OPEN_LIMITS.items():
                await workspaces_service.set_rate_limit(session, workspace_id, bucket, spec)
            for flag, on in (features or {}).items():
                await workspaces_service.set_feature(session, workspace_id, flag, on)
            issued = await workspaces_service.create_api_key(session, now, workspace_id, list(Scope), "bench")
            await session.commit()
    finally:
        await database.dispose()
    return Credentials(workspace_id, issued.secret)


@dataclass(frozen=True)
class Timing:
    samples: list[float]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.samples) * 1000

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


async def time_calls(call: Callable[[], Awaitable[object]], count: int, warmup: int = 5) -> Timing:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return Timing(samples)


async def throughput(call: Callable[[], Awaitable[object]], seconds: float, concurrency: int) -> float:
    """Completed calls per second with `concurrency` callers in one event loop."""
    deadline = time.perf_counter() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


def table(title: str, rows: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * len(title)]
    lines += [f"{name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)


async def timed_turns(
    sides: Sequence[Callable[[], Awaitable[object]]],
    requests: int,
    concurrency: int,
    turn: int = 20,
    warmup: int = 10,
) -> list[Timing]:
    """Latency of `requests` calls of each side, with `concurrency` callers, the sides taking turns
    of `turn` calls (the first side alternating), so a busy machine slows every side alike."""
    for call in sides:
        for _ in range(warmup):
            await call()
    samples: list[list[float]] = [[] for _ in sides]
    order = list(range(len(sides)))
    for done in range(0, requests, turn):
        count = min(turn, requests - done)
        for index in order:
            samples[index] += await _concurrent_latencies(sides[index], count, concurrency)
        order.reverse()
    return [Timing(side) for side in samples]


async def _concurrent_latencies(
    call: Callable[[], Awaitable[object]], count: int, concurrency: int
) -> list[float]:
    remaining = count
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


@dataclass(frozen=True)
class Figure:
    """One figure of a benchmark's summary, with its target when it has one."""

    name: str
    value: float
    unit: str = ""
    at_most: float | None = None
    at_least: float | None = None

    @property
    def target(self) -> str | None:
        if self.at_most is not None:
            return f"<= {self.at_most:g}"
        if self.at_least is not None:
            return f">= {self.at_least:g}"
        return None

    @property
    def passed(self) -> bool | None:
        if self.at_most is not None:
            return self.value <= self.at_most
        if self.at_least is not None:
            return self.value >= self.at_least
        return None


SUMMARY_PREFIX = "BENCH "


def summary(benchmark: str, engine: str, figures: Sequence[Figure]) -> None:
    """Print the machine-readable summary line that `benchmarks/run.py` collects into its table."""
    line = {
        "benchmark": benchmark,
        "engine": engine,
        "figures": [
            {
                "name": figure.name,
                "value": figure.value,
                "unit": figure.unit,
                "target": figure.target,
                "pass": figure.passed,
            }
            for figure in figures
        ],
    }
    print(SUMMARY_PREFIX + json.dumps(line), flush=True)


def sqlite_value(value: Any) -> Any:
    """A value as SQLAlchemy stores it on SQLite (JSON text; naive UTC `YYYY-MM-DD HH:MM:SS.ffffff`)."""
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


async def vacuum_analyze(engine: AsyncEngine, tables: str) -> None:
    """On PostgreSQL, `tables` as autovacuum would leave them after a bulk load (this machine's server
    runs without it): planner statistics and a visibility map. Nothing on SQLite."""
    if engine.dialect.name != "postgresql":
        return
    async with engine.connect() as connection:
        autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
        await autocommit.exec_driver_sql(f"VACUUM ANALYZE {tables}")
