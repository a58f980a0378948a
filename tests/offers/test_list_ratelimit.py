"""O1 rate limits: 150 per minute, 500 per hour, 1000 per day per API key, rolling windows.

Driven by the frozen clock only. The headers describe the window nearest exhaustion; Retry-After is
the wait after which the same request passes every window, and is checked to the second.
"""

from __future__ import annotations

import httpx

from herald.clock import FrozenClock
from tests.factories import Tenant
from tests.offers.builders import OFFERS

PARAMS = {"limit": "1", "fields": "id"}


async def _get(client: httpx.AsyncClient, tenant: Tenant) -> httpx.Response:
    return await client.get(OFFERS, params=PARAMS, headers=tenant.headers())


async def _burst(client: httpx.AsyncClient, tenant: Tenant, count: int) -> httpx.Response:
    """`count` requests at the current instant, all admitted; returns the last answer."""
    response = None
    for _ in range(count):
        response = await _get(client, tenant)
        assert response.status_code == 200, response.text
    assert response is not None
    return response


async def _hour_of_500(client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, last: int = 50) -> None:
    """150 + 150 + 150 + `last` requests, one minute apart (the minute window never fills up)."""
    for count in (150, 150, 150):
        await _burst(client, tenant, count)
        clock.advance(minutes=1)
    if last:
        await _burst(client, tenant, last)


def _limits(response: httpx.Response) -> tuple[int, int, int]:
    headers = response.headers
    return (
        int(headers["X-RateLimit-Limit"]),
        int(headers["X-RateLimit-Remaining"]),
        int(headers["X-RateLimit-Reset"]),
    )


def _assert_refused(response: httpx.Response, retry_after: int) -> None:
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "RATE_LIMITED"
    assert response.headers["Retry-After"] == str(retry_after)
    assert "X-SVC-Request-Id" in response.headers


class TestOffersListRateLimit:
    async def test_150_per_minute(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        t0 = int(clock.now().timestamp())
        first = await _get(client, tenant)
        assert _limits(first) == (150, 149, t0 + 60)
        last = await _burst(client, tenant, 149)
        assert _limits(last) == (150, 0, t0 + 60)

        refused = await _get(client, tenant)
        _assert_refused(refused, 60)
        assert _limits(refused) == (150, 0, t0 + 60)

        clock.advance(seconds=59)
        _assert_refused(await _get(client, tenant), 1)
        clock.advance(seconds=1)
        assert (await _get(client, tenant)).status_code == 200

    async def test_500_per_hour(self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock) -> None:
        t0 = int(clock.now().timestamp())
        await _hour_of_500(client, tenant, clock, last=49)
        last = await _get(client, tenant)
        assert _limits(last) == (500, 0, t0 + 3600)

        refused = await _get(client, tenant)  # at t0 + 180 s
        _assert_refused(refused, 3600 - 180)
        assert _limits(refused) == (500, 0, t0 + 3600)

        clock.advance(seconds=3600 - 180 - 1)
        _assert_refused(await _get(client, tenant), 1)
        clock.advance(seconds=1)  # the first 150 leave the hour
        assert (await _get(client, tenant)).status_code == 200

    async def test_1000_per_day(self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock) -> None:
        t0 = int(clock.now().timestamp())
        await _hour_of_500(client, tenant, clock)  # 500 in the first hour
        clock.set(clock.now().replace(hour=14, minute=0, second=0))
        await _hour_of_500(client, tenant, clock, last=49)  # 999 by 14:03
        clock.set(clock.now().replace(hour=16, minute=0, second=0))
        thousandth = await _get(client, tenant)
        assert _limits(thousandth) == (1000, 0, t0 + 86400)

        refused = await _get(client, tenant)  # at t0 + 4 h
        wait = 86400 - 4 * 3600
        _assert_refused(refused, wait)
        assert _limits(refused) == (1000, 0, t0 + 86400)

        clock.advance(seconds=wait - 1)
        _assert_refused(await _get(client, tenant), 1)
        clock.advance(seconds=1)  # a day after the first request, its 150 leave the day
        assert (await _get(client, tenant)).status_code == 200

    async def test_limits_are_per_api_key_and_workspace(
        self, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
    ) -> None:
        await _burst(client, tenant, 150)
        assert (await _get(client, tenant)).status_code == 429
        assert (await _get(client, other_tenant)).status_code == 200

    async def test_refused_requests_consume_nothing(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await _burst(client, tenant, 150)
        for _ in range(20):
            assert (await _get(client, tenant)).status_code == 429
        clock.advance(minutes=1)
        last = await _burst(client, tenant, 150)  # a full minute again: the refusals took no slot
        assert _limits(last)[1] == 0
