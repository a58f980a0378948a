"""The per-process credentials cache: a key's row is read once per `ttl`, so an administrative change
takes effect at most `ttl` later, and a wrong secret is refused whether the key is cached or not."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import httpx
from fastapi import FastAPI

from herald.services import Services
from herald.workspaces import service as workspaces_service
from herald.workspaces.credentials import Credentials, CredentialsCache, KeyView, WorkspaceView, secret_hash
from tests.factories import Tenant

OFFERS = "/v5/offers"


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _cache(app: FastAPI, ttl: float) -> FakeMonotonic:
    time = FakeMonotonic()
    services: Services = app.state.herald
    services.credentials = CredentialsCache(ttl=ttl, monotonic=time)
    return time


async def test_a_revoked_key_works_until_the_ttl_has_passed_then_never(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    time = _cache(app, ttl=1.0)
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 200
    services: Services = app.state.herald
    async with services.database.writer() as session:
        await workspaces_service.revoke_api_key(
            session, services.clock.now(), tenant.workspace_id, tenant.key_id
        )
        await session.commit()

    time.now += 0.999
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 200  # within the lag
    time.now += 0.001
    answer = await client.get(OFFERS, headers=tenant.headers())
    assert answer.status_code == 401
    time.now += 60
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 401


async def test_a_wrong_secret_is_refused_while_the_key_is_cached(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    _cache(app, ttl=60.0)
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 200
    wrong = Tenant(
        tenant.workspace_id, tenant.secret[:-1] + ("A" if tenant.secret[-1] != "A" else "B"), tenant.key_id
    )
    assert (await client.get(OFFERS, headers=wrong.headers())).status_code == 401
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 200


async def test_a_changed_rate_limit_applies_after_the_ttl(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    time = _cache(app, ttl=1.0)
    first = await client.get(OFFERS, headers=tenant.headers())
    assert first.headers["X-RateLimit-Limit"] == "150"  # offers_read's default minute window
    services: Services = app.state.herald
    async with services.database.writer() as session:
        await workspaces_service.set_rate_limit(session, tenant.workspace_id, "offers_read", "7/minute")
        await session.commit()
    assert (await client.get(OFFERS, headers=tenant.headers())).headers["X-RateLimit-Limit"] == "150"
    time.now += 1.0
    assert (await client.get(OFFERS, headers=tenant.headers())).headers["X-RateLimit-Limit"] == "7"


async def test_without_a_ttl_every_request_reads_the_key(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    _cache(app, ttl=0)
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 200
    services: Services = app.state.herald
    async with services.database.writer() as session:
        await workspaces_service.revoke_api_key(
            session, services.clock.now(), tenant.workspace_id, tenant.key_id
        )
        await session.commit()
    assert (await client.get(OFFERS, headers=tenant.headers())).status_code == 401


class GatedLoader:
    """Stands in for the database read: answers `credentials` once `open` is set, counting reads."""

    def __init__(self, credentials: Credentials | None) -> None:
        self.credentials = credentials
        self.open = asyncio.Event()
        self.calls = 0
        self.error: Exception | None = None

    async def __call__(self, workspace_id: str, key_id: str) -> Credentials | None:
        self.calls += 1
        await self.open.wait()
        if self.error is not None:
            raise self.error
        return self.credentials


SECRET = "s3cret"
PRESENTED = f"hk_key1_{SECRET}"
KNOWN = Credentials(
    WorkspaceView("WS", MappingProxyType({}), MappingProxyType({})),
    KeyView("key1", frozenset(), secret_hash(SECRET), revoked=False),
)


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)  # a turn of the event loop, no wall time


async def test_requests_that_miss_during_a_load_share_it() -> None:
    cache, loader = CredentialsCache(ttl=1.0, monotonic=FakeMonotonic()), GatedLoader(KNOWN)
    waiting = [asyncio.ensure_future(cache.verify("WS", PRESENTED, loader)) for _ in range(5)]
    await _turns()
    loader.open.set()
    assert await asyncio.gather(*waiting) == [KNOWN] * 5
    assert loader.calls == 1


async def test_a_request_arriving_a_ttl_after_the_load_began_reads_for_itself() -> None:
    time = FakeMonotonic()
    cache, loader = CredentialsCache(ttl=1.0, monotonic=time), GatedLoader(KNOWN)
    first = asyncio.ensure_future(cache.verify("WS", PRESENTED, loader))
    await _turns()
    time.now += 1.0  # a change committed now must reach the next request: the load began too early
    second = asyncio.ensure_future(cache.verify("WS", PRESENTED, loader))
    await _turns()
    loader.open.set()
    assert await asyncio.gather(first, second) == [KNOWN, KNOWN]
    assert loader.calls == 2


async def test_when_the_loading_request_is_cancelled_the_others_read_for_themselves() -> None:
    cache, loader = CredentialsCache(ttl=1.0, monotonic=FakeMonotonic()), GatedLoader(KNOWN)
    leader = asyncio.ensure_future(cache.verify("WS", PRESENTED, loader))
    await _turns()
    others = [asyncio.ensure_future(cache.verify("WS", PRESENTED, loader)) for _ in range(3)]
    await _turns()
    leader.cancel()
    await _turns()
    loader.open.set()
    assert await asyncio.gather(*others) == [KNOWN] * 3
    assert leader.cancelled()
    assert loader.calls == 2  # the cancelled read, then one shared by the other three


async def test_a_failed_load_fails_the_requests_sharing_it_and_is_not_remembered() -> None:
    cache, loader = CredentialsCache(ttl=1.0, monotonic=FakeMonotonic()), GatedLoader(KNOWN)
    loader.error = ConnectionRefusedError("database down")
    waiting = [asyncio.ensure_future(cache.verify("WS", PRESENTED, loader)) for _ in range(3)]
    await _turns()
    loader.open.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(result, ConnectionRefusedError) for result in results)
    loader.error = None
    assert await cache.verify("WS", PRESENTED, loader) == KNOWN
    assert loader.calls == 2
