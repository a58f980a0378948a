"""Bursts of requests larger than the database pool, each needing the database for its key (no
credentials cache): every request is answered, none waits on the others for a connection.

A handler that read on a session of its own while the request's session (which authenticated the
caller) held a connection took two connections from the pool (PostgreSQL): as many such requests
at once as the pool has connections waited on each other until the pool's timeout (30 s), then
answered 503, and so did every other request of the process meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx

from herald.clock import FrozenClock
from herald.config import Settings
from herald.http.ratelimit import RateLimitStore
from herald.main import create_app
from tests.delivery.builders import meta as send_meta
from tests.factories import make_tenant
from tests.personalization.helpers import push_body

BURST = 6
MINIMAL_PUSH = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "ana@example.com"}


async def test_a_burst_on_every_route_is_answered_without_waiting_for_the_pool(
    settings: Settings, clock: FrozenClock, limiter: RateLimitStore
) -> None:
    app = create_app(dataclasses.replace(settings, db_pool_size=2), clock=clock, limiter=limiter)
    limits = dict.fromkeys(
        (
            "campaign_ops",
            "offers_read",
            "offers_write",
            "campaign_create",
            "campaign_create_success",
            "preview",
            "ingest",
        ),
        "1000/second",
    )
    try:
        tenant = await make_tenant(app, rate_limits=limits)
        headers = tenant.headers(campaigns=True)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            created = await client.post(
                "/v5/campaigns", json=MINIMAL_PUSH, headers=tenant.write_headers(campaigns=True)
            )
            assert created.status_code == 201, created.text
            campaign_id = created.json()["data"]["id"]
            requests: list[tuple[str, str, dict[str, Any] | None]] = [
                ("GET", "/v5/offers", None),
                ("GET", "/v5/offers/templates", None),
                ("GET", f"/v5/campaigns/{campaign_id}", None),
                ("GET", f"/v5/campaigns/{campaign_id}/stats", None),
                ("POST", "/v5/campaigns/search", {"limit": 15, "page": 1}),
                ("POST", "/v5/campaigns/meta", {"limit": 15, "page": 1}),
                ("POST", f"/v5/campaigns/{campaign_id}/validate", {}),
            ]
            # Writes, each with a key of its own: answered, whether or not the body is a good one.
            writes: list[tuple[str, str, dict[str, Any] | None]] = [
                ("POST", "/v5/campaigns", MINIMAL_PUSH),
                ("PATCH", f"/v5/campaigns/{campaign_id}", {"tags": ["t"]}),
                ("PATCH", f"/core-services/v1/campaigns/{campaign_id}", {"tags": ["t"]}),
                ("PATCH", f"/v5/campaigns/{campaign_id}/status", {"action": "STOP"}),
                ("POST", "/v5/offers", {"name": "x"}),
                (
                    "POST",
                    "/v5/personalization/preview",
                    push_body({"android": {"title": "Hi", "message": "m"}}),
                ),
                (
                    "POST",
                    "/v5/campaigns/test",
                    {
                        "draft_id": campaign_id,
                        "test_campaign_meta": send_meta("USER_ATTRIBUTE_UNIQUE_ID", "u1"),
                    },
                ),
                (
                    "POST",
                    f"/v1/event/{tenant.workspace_id}",
                    {"type": "event", "customer_id": "c", "actions": []},
                ),
                ("POST", f"/v1/business-event/{tenant.workspace_id}", {"name": "n"}),
            ]
            for method, path, body in requests + writes:

                async def one(method: str = method, path: str = path, body: Any = body) -> httpx.Response:
                    # A POST or PATCH with a key of its own: the idempotency claim is one more use of the database.
                    sent = tenant.write_headers(campaigns=True) if method != "GET" else headers
                    return await client.request(method, path, json=body, headers=sent)

                answers = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(BURST))), 20)
                statuses = {answer.status_code for answer in answers}
                if (method, path, body) in requests:
                    assert statuses == {200}, (path, answers[0].text)
                else:
                    assert max(statuses) < 500, (path, answers[0].text)
    finally:
        await app.state.herald.aclose()
