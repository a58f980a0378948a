"""What the lifecycle tests share: calls to L1/C5/C6/C7 as a client makes them, and seeding of
campaigns in any state through the importer (the same code `herald campaigns import` runs)."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import select

from herald.audience.models import Segment
from herald.audience.segments import STATIC
from herald.campaigns import importer
from herald.campaigns.models import Campaign
from herald.delivery.config import ConnectorInput
from herald.personalization.resources import create_custom_template
from herald.services import Services
from tests.campaigns.payloads import (
    ALL_FEATURES,
    PAYLOAD_SEGMENT_ID,
    PAYLOAD_TEMPLATE_ID,
    PAYLOAD_TEMPLATE_VERSION,
)
from tests.factories import Tenant, add_connector, make_tenant

BASE = "/v5/campaigns"
V1 = "/core-services/v1/campaigns"
OPEN_LIMITS = {
    "campaign_create": "1000/second",
    "campaign_create_success": "1000/minute",
    "campaign_ops": "1000/second",
}
PUBLISHER = "publisher@example.com"


async def workspace(app: FastAPI, *, versioning: bool = True, **features: bool) -> Tenant:
    """A workspace with the features on, limits out of the way, and the connectors and custom
    segment the payloads can be published with (the e-mail ones they name, one push connector)."""
    flags = {**dict.fromkeys(ALL_FEATURES, True), "versioning": versioning, **features}
    tenant = await make_tenant(app, features=flags, rate_limits=OPEN_LIMITS)
    await add_payload_connectors(app, tenant)
    await add_payload_resources(app, tenant)
    return tenant


async def add_payload_resources(app: FastAPI, tenant: Tenant) -> None:
    """The custom segment the payloads' audiences name and the custom template (version 3) their
    content names: publishing checks both exist."""
    services: Services = app.state.herald
    async with services.database.writer() as session:
        session.add(
            Segment(
                workspace_id=tenant.workspace_id,
                id=PAYLOAD_SEGMENT_ID,
                name="Internal testers",
                kind=STATIC,
                filters=None,
                created_at=services.clock.now(),
            )
        )
        for _ in range(PAYLOAD_TEMPLATE_VERSION):
            await create_custom_template(
                session,
                services.clock.now(),
                tenant.workspace_id,
                PAYLOAD_TEMPLATE_ID,
                "EMAIL",
                {"html_content": "<p>Order {{ event.order_id }}</p>"},
            )
        await session.commit()


async def add_payload_connectors(app: FastAPI, tenant: Tenant) -> None:
    await add_connector(app, tenant, ConnectorInput("transactional-smtp", "CUSTOM_SMTP", host="127.0.0.1"))
    await add_connector(
        app, tenant, ConnectorInput("marketing-api", "CUSTOM_API", url="https://hooks.example.com/in")
    )
    await add_connector(
        app,
        tenant,
        ConnectorInput("push-gw", "CUSTOM_API", channel="push", url="https://hooks.example.com/push"),
    )


async def create(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> str:
    body = {key: value for key, value in copy.deepcopy(body).items() if key != "request_id"}
    response = await client.post(BASE, json=body, headers=tenant.write_headers(campaigns=True))
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["id"])


async def v1_patch(
    client: httpx.AsyncClient,
    tenant: Tenant,
    campaign_id: str,
    body: dict[str, Any] | None = None,
    *,
    publish: bool = True,
    request_id: str | None = None,
) -> httpx.Response:
    sent: dict[str, Any] = {"request_id": request_id or str(uuid.uuid4()), "updated_by": PUBLISHER}
    sent |= body or {}
    if publish:
        sent["status"] = "PUBLISH"
    return await client.patch(f"{V1}/{campaign_id}", json=sent, headers=tenant.headers(campaigns=True))


async def publish(
    client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, body: dict[str, Any] | None = None
) -> None:
    response = await v1_patch(client, tenant, campaign_id, body)
    assert response.status_code == 204, response.text


async def get(client: httpx.AsyncClient, tenant: Tenant, some_id: str) -> dict[str, Any]:
    response = await client.get(f"{BASE}/{some_id}", headers=tenant.headers(campaigns=True))
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def action(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, name: str) -> httpx.Response:
    return await client.patch(
        f"{BASE}/{campaign_id}/status", json={"action": name}, headers=tenant.write_headers(campaigns=True)
    )


async def search(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{BASE}/search", json=body, headers=tenant.write_headers(campaigns=True))


async def found(client: httpx.AsyncClient, tenant: Tenant, **body: Any) -> list[dict[str, Any]]:
    response = await search(client, tenant, {"limit": 15, "page": 1, **body})
    assert response.status_code == 200, response.text
    campaigns: list[dict[str, Any]] = response.json()["data"]["campaigns"]
    return campaigns


async def meta(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{BASE}/meta", json=body, headers=tenant.write_headers(campaigns=True))


async def meta_rows(client: httpx.AsyncClient, tenant: Tenant, **body: Any) -> list[dict[str, Any]]:
    response = await meta(client, tenant, {"limit": 15, "page": 1, **body})
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["data"]["campaigns"]
    return rows


def line(**fields: Any) -> dict[str, Any]:
    """An import line: a minimal SMS campaign unless told otherwise."""
    base: dict[str, Any] = {
        "channel": "SMS",
        "campaign_delivery_type": "ONE_TIME",
        "status": "ACTIVE",
        "created_by": "importer@example.com",
    }
    return base | fields


async def seed(app: FastAPI, tenant: Tenant, *lines: dict[str, Any]) -> list[str]:
    """Import `lines` into the tenant's workspace; the row ids, in order."""
    services = app.state.herald
    parsed = importer.parse_lines(
        (json.dumps(item) for item in lines), tenant.workspace_id, services.clock.now()
    )
    assert parsed.problems == []
    async with services.database.writer() as session:
        assert await importer.existing_problems(session, tenant.workspace_id, parsed) == []
        await importer.insert_rows(session, parsed)
        await session.commit()
    return [str(row["id"]) for row in parsed.rows]


async def stored(app: FastAPI, tenant: Tenant, campaign_id: str) -> list[Campaign]:
    """Every version row of a campaign, oldest first."""
    async with app.state.herald.database.reader() as session:
        query = (
            select(Campaign)
            .where(Campaign.workspace_id == tenant.workspace_id, Campaign.campaign_id == campaign_id)
            .order_by(Campaign.version_number)
        )
        return list((await session.scalars(query)).all())
