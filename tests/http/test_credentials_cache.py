"""The per-process credentials cache: a key's row is read once per `ttl`, so an administrative change
takes effect at most `ttl` later, and a wrong secret is refused whether the key is cached or not."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from herald.services import Services
from herald.workspaces import service as workspaces_service
from herald.workspaces.credentials import CredentialsCache
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
