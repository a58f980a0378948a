"""The throttle's stores against a reference: at any instant, the sends granted in the 60 seconds
before it (that instant included, its first excluded) never exceed the rpm, and each grant is all
the room left (a store that granted less would slow a campaign below its rate)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI

from herald.delivery.engine.throttle import WINDOW, DatabaseThrottle, Grant, RedisThrottle
from herald.services import Services
from herald.wake import named_first, waiting
from tests.conftest import REDIS_URL
from tests.factories import Tenant

START = datetime(2026, 3, 2, 10, 0, 40, tzinfo=UTC)


class Reference:
    """The rule itself: a list of grants, each counted for 60 seconds."""

    def __init__(self, rpm: int) -> None:
        self.rpm = rpm
        self.grants: list[tuple[datetime, int]] = []

    def take(self, now: datetime, wanted: int) -> Grant:
        live = [(at, sends) for at, sends in self.grants if at > now - WINDOW]
        sends = max(0, min(wanted, self.rpm - sum(s for _, s in live)))
        if sends:
            self.grants.append((now, sends))
            live.append((now, sends))
        oldest = min((at for at, _ in live), default=None)
        return Grant(sends, None if oldest is None else oldest + WINDOW)


def _steps(seed: int) -> list[tuple[timedelta, int]]:
    """Clock moves (0 included: two claims at one instant) and shares asked for."""
    rng = random.Random(seed)
    moves = [0, 0, 1, 250, 999, 5_000, 17_000, 29_999, 30_000, 59_999, 60_000, 61_000, 125_000]
    return [(timedelta(milliseconds=rng.choice(moves)), rng.choice([1, 2, 3, 7, 20, 64])) for _ in range(120)]


@pytest.mark.parametrize("store_kind", ["database", "redis"])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_store_grants_as_the_sliding_window_allows(
    app: FastAPI, workspace: Tenant, store_kind: str, seed: int
) -> None:
    services: Services = app.state.herald
    rpm = 25
    campaign_id = f"throttled{seed}"
    reference = Reference(rpm)
    store: DatabaseThrottle | RedisThrottle
    if store_kind == "redis":
        if not REDIS_URL:
            pytest.skip("HERALD_TEST_REDIS_URL is not set")
        store = RedisThrottle(REDIS_URL)
        await store._client.delete(f"herald:throttle:{{{workspace.workspace_id}:{campaign_id}}}")
    else:
        store = DatabaseThrottle()
    now = START
    granted: list[tuple[datetime, int]] = []
    try:
        for move, wanted in _steps(seed):
            now += move
            async with services.database.writer() as session:
                grant = await store.grant(session, workspace.workspace_id, campaign_id, now, wanted, rpm)
                await session.commit()
            assert grant == reference.take(now, wanted), (now, wanted)
            granted.append((now, grant.sends))
            assert sum(s for at, s in granted if at > now - WINDOW) <= rpm
    finally:
        if isinstance(store, RedisThrottle):
            await store.aclose()
    assert sum(s for _, s in granted) > rpm  # the sequence reached past the first window


async def test_a_refused_share_wakes_the_workers_when_the_window_frees_room(
    app: FastAPI, workspace: Tenant
) -> None:
    services: Services = app.state.herald
    store = DatabaseThrottle()
    woken = asyncio.Event()
    async with waiting(woken):
        async with services.database.writer() as session:
            assert await store.take(session, workspace.workspace_id, "woken", START, 25, 25) == 25
            # 0.1 s before the first grant leaves the window: nothing now, a wake-up then.
            later = START + WINDOW - timedelta(milliseconds=100)
            assert await store.take(session, workspace.workspace_id, "woken", later, 1, 25) == 0
            await session.commit()
        await asyncio.wait_for(woken.wait(), timeout=10)
    assert named_first(["other", workspace.workspace_id]) == [workspace.workspace_id, "other"]
