"""Shared benchmark plumbing: a migrated database, a workspace with open limits, timing helpers."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

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
}


@dataclass(frozen=True)
class Credentials:
    workspace_id: str
    secret: str


async def prepare_workspace(settings: Settings, workspace_id: str) -> Credentials:
    """Migrate, then (re)create the benchmark workspace with every scope and open limits."""
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
