"""Workspace B against workspace A's objects, for every route of the API.

The probe table is checked against the OpenAPI route table: a route without a probe fails the suite,
so a new route cannot be forgotten. Every probe uses B's credentials with A's ids, cursors, keys or
names, and must get 404 (or 401 where the workspace is in the path, or an answer without A's data).
Afterwards A's rows must be exactly as they were.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest
from fastapi import FastAPI

from herald.offers.models import Offer
from tests.delivery.builders import meta as send_meta
from tests.factories import Tenant, make_tenant
from tests.offers.builders import flat_body
from tests.personalization.helpers import add_user, push_body
from tests.snapshots import workspace_rows

OPEN = {
    "campaign_create": "1000/second",
    "campaign_create_success": "1000/minute",
    "campaign_ops": "1000/second",
}
FEATURES = {"campaign_audience_limit": True, "queuing": True, "versioning": True, "campaign_meta": True}
CAMPAIGN = {
    "channel": "PUSH",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "a@example.com",
    "request_id": "r-a",
}


@dataclass
class World:
    a: Tenant
    b: Tenant
    campaign_id: str
    offer_id: str
    idempotency_key: str
    customer_id: str
    now: datetime


Probe = Callable[[httpx.AsyncClient, World], Awaitable[None]]


def _ids(response: httpx.Response) -> str:
    return response.text


async def _not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, response.text


async def probe_list_offers(client: httpx.AsyncClient, world: World) -> None:
    everything = await client.get("/v5/offers?limit=100", headers=world.b.headers())
    assert everything.status_code == 200
    assert world.offer_id not in everything.text
    by_id = await client.get(f"/v5/offers?id=offer_{world.offer_id}", headers=world.b.headers())
    assert by_id.json()["pagination"]["total_count"] == 0
    cursor = base64.urlsafe_b64encode(f"offers:{'f' * 24}".encode()).decode()
    walked = await client.get(f"/v5/offers?cursor={cursor}", headers=world.b.headers())
    assert world.offer_id not in walked.text


async def probe_offer_templates(client: httpx.AsyncClient, world: World) -> None:
    response = await client.get("/v5/offers/templates", headers=world.b.headers())
    assert response.status_code == 200
    assert "a-template" not in response.text


async def probe_update_offer(client: httpx.AsyncClient, world: World) -> None:
    response = await client.patch(
        f"/v5/offers/offer_{world.offer_id}",
        json={"updated_by": "b@example.com"},
        headers=world.b.write_headers(),
    )
    await _not_found(response)


async def probe_archive_offer(client: httpx.AsyncClient, world: World) -> None:
    await _not_found(
        await client.post(f"/v5/offers/offer_{world.offer_id}/archive", headers=world.b.write_headers())
    )


async def probe_create_offer(client: httpx.AsyncClient, world: World) -> None:
    # A's offer name means nothing in B: no DUPLICATE_OFFER_NAME.
    body = flat_body(world.now, name="Shared_Name")
    response = await client.post("/v5/offers", json=body, headers=world.b.write_headers())
    assert response.status_code == 201, response.text


async def probe_create_campaign(client: httpx.AsyncClient, world: World) -> None:
    response = await client.post(
        "/v5/campaigns",
        json=CAMPAIGN,
        headers=world.b.headers(campaigns=True, idempotency_key=world.idempotency_key),
    )
    assert response.status_code == 201, response.text  # A's request_id and key are A's alone
    assert "Idempotent-Replayed" not in response.headers
    assert response.json()["data"]["id"] != world.campaign_id


async def probe_get_campaign(client: httpx.AsyncClient, world: World) -> None:
    await _not_found(
        await client.get(f"/v5/campaigns/{world.campaign_id}", headers=world.b.headers(campaigns=True))
    )


async def probe_campaign_stats(client: httpx.AsyncClient, world: World) -> None:
    url = f"/v5/campaigns/{world.campaign_id}/stats"
    await _not_found(await client.get(url, headers=world.b.headers(campaigns=True)))


async def probe_update_campaign(client: httpx.AsyncClient, world: World) -> None:
    body = {"utm_params": {"utm_source": "b", "utm_medium": "b"}}
    headers = world.b.write_headers(campaigns=True)
    await _not_found(await client.patch(f"/v5/campaigns/{world.campaign_id}", json=body, headers=headers))


async def probe_validate_campaign(client: httpx.AsyncClient, world: World) -> None:
    url = f"/v5/campaigns/{world.campaign_id}/validate"
    await _not_found(await client.post(url, headers=world.b.headers(campaigns=True)))


async def probe_status(client: httpx.AsyncClient, world: World) -> None:
    url = f"/v5/campaigns/{world.campaign_id}/status"
    await _not_found(
        await client.patch(url, json={"action": "STOP"}, headers=world.b.write_headers(campaigns=True))
    )


async def probe_v1_update(client: httpx.AsyncClient, world: World) -> None:
    body = {"request_id": str(uuid.uuid4()), "updated_by": "b@example.com", "status": "PUBLISH"}
    url = f"/core-services/v1/campaigns/{world.campaign_id}"
    await _not_found(await client.patch(url, json=body, headers=world.b.headers(campaigns=True)))


async def probe_search(client: httpx.AsyncClient, world: World) -> None:
    body = {"limit": 15, "page": 1, "campaign_fields": {"ids": [world.campaign_id], "status": ["DRAFT"]}}
    response = await client.post(
        "/v5/campaigns/search", json=body, headers=world.b.write_headers(campaigns=True)
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["campaigns"] == []


async def probe_meta(client: httpx.AsyncClient, world: World) -> None:
    body = {"limit": 15, "page": 1, "campaign_fields": {"id": world.campaign_id, "status": ["DRAFT"]}}
    response = await client.post(
        "/v5/campaigns/meta", json=body, headers=world.b.write_headers(campaigns=True)
    )
    assert response.status_code == 200, response.text
    assert world.campaign_id not in response.text


async def probe_test_send(client: httpx.AsyncClient, world: World) -> None:
    body = {"draft_id": world.campaign_id, "test_campaign_meta": send_meta("USER_ATTRIBUTE_UNIQUE_ID", "u1")}
    response = await client.post(
        "/v5/campaigns/test", json=body, headers=world.b.write_headers(campaigns=True)
    )
    await _not_found(response)


async def probe_preview(client: httpx.AsyncClient, world: World) -> None:
    body = push_body({"android": {"title": "{{ user.first_name }}", "message": "m"}}, user=world.customer_id)
    response = await client.post(
        "/v5/personalization/preview", json=body, headers=world.b.headers(campaigns=True)
    )
    await _not_found(response)
    assert "Ana" not in response.text


async def probe_ingest(client: httpx.AsyncClient, world: World) -> None:
    customer = {"type": "customer", "customer_id": world.customer_id, "attributes": {"first_name": "Eve"}}
    event = {
        "type": "event",
        "customer_id": world.customer_id,
        "actions": [{"action": "x", "attributes": {}}],
    }
    transition = {"type": "transition", "elements": [customer]}
    for path, body in (("customer", customer), ("event", event), ("transition", transition)):
        response = await client.post(
            f"/v1/{path}/{world.a.workspace_id}", json=body, headers=world.b.headers()
        )
        assert response.status_code == 401, response.text


async def probe_business_event(client: httpx.AsyncClient, world: World) -> None:
    # B's credentials on A's path: refused like ingestion, so no campaign of A starts a run.
    response = await client.post(
        f"/v1/business-event/{world.a.workspace_id}",
        json={"name": "price_drop", "attributes": {"product": "Boots"}},
        headers=world.b.headers(),
    )
    assert response.status_code == 401, response.text


PROBES: dict[tuple[str, str], Probe] = {
    ("GET", "/v5/offers"): probe_list_offers,
    ("POST", "/v5/offers"): probe_create_offer,
    ("GET", "/v5/offers/templates"): probe_offer_templates,
    ("PATCH", "/v5/offers/{offer_id}"): probe_update_offer,
    ("POST", "/v5/offers/{offer_id}/archive"): probe_archive_offer,
    ("POST", "/v5/campaigns"): probe_create_campaign,
    ("GET", "/v5/campaigns/{campaign_id}"): probe_get_campaign,
    ("PATCH", "/v5/campaigns/{campaign_id}"): probe_update_campaign,
    ("POST", "/v5/campaigns/{campaign_id}/validate"): probe_validate_campaign,
    ("PATCH", "/v5/campaigns/{campaign_id}/status"): probe_status,
    ("GET", "/v5/campaigns/{campaign_id}/stats"): probe_campaign_stats,
    ("PATCH", "/core-services/v1/campaigns/{campaign_id}"): probe_v1_update,
    ("POST", "/v5/campaigns/search"): probe_search,
    ("POST", "/v5/campaigns/meta"): probe_meta,
    ("POST", "/v5/campaigns/test"): probe_test_send,
    ("POST", "/v5/personalization/preview"): probe_preview,
    ("POST", "/v1/customer/{workspace_id}"): probe_ingest,
    ("POST", "/v1/event/{workspace_id}"): probe_ingest,
    ("POST", "/v1/transition/{workspace_id}"): probe_ingest,
    ("POST", "/v1/business-event/{workspace_id}"): probe_business_event,
}


def _routes(app: FastAPI) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in app.openapi()["paths"].items()
        for method in item
        if path.startswith(("/v5", "/v1", "/core-services"))
    }


async def test_every_route_has_a_cross_workspace_probe(app: FastAPI) -> None:
    missing = sorted(_routes(app) - PROBES.keys())
    assert not missing, f"add a cross-workspace probe to tests/test_cross_workspace.py for: {missing}"


@pytest.fixture
async def world(app: FastAPI, client: httpx.AsyncClient) -> World:
    a = await make_tenant(app, features=FEATURES, rate_limits=OPEN)
    b = await make_tenant(app, features=FEATURES, rate_limits=OPEN)
    key = str(uuid.uuid4())
    created = await client.post(
        "/v5/campaigns", json=CAMPAIGN, headers=a.headers(campaigns=True, idempotency_key=key)
    )
    assert created.status_code == 201
    await add_user(app, a, "ana-1", first_name="Ana")
    services = app.state.herald
    now = services.clock.now()
    from herald.ids import object_id
    from herald.workspaces import service as workspaces_service

    offer_id = object_id(now)
    async with services.database.writer() as session:
        await workspaces_service.create_template(session, now, a.workspace_id, "a-template", "A", ["json"])
        session.add(
            Offer(
                workspace_id=a.workspace_id,
                id=offer_id,
                name="Shared_Name",
                stored_status="published",
                tags=[],
                document={},
                created_at=now,
                created_by="a@example.com",
                updated_at=now,
            )
        )
        await session.commit()
    return World(a, b, created.json()["data"]["id"], offer_id, key, "ana-1", now)


async def test_workspace_b_never_sees_or_changes_workspace_a(
    app: FastAPI, client: httpx.AsyncClient, world: World
) -> None:
    before = await workspace_rows(app, world.a.workspace_id)
    for route in sorted(_routes(app)):
        await PROBES[route](client, world)
    assert await workspace_rows(app, world.a.workspace_id) == before
