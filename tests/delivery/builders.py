"""Bodies and connectors for C8 tests, and readers of what was recorded."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from fastapi import FastAPI

from herald.delivery import outbox
from herald.delivery.config import ConnectorInput
from herald.delivery.models import OutboxEntry
from herald.services import Services
from tests.delivery.servers import SMTP_PASSWORD, SMTP_USER, HttpReceiver, SmtpServer
from tests.factories import Tenant, add_connector

TEST_PATH = "/v5/campaigns/test"
CAMPAIGNS = "/v5/campaigns"
HOOK_SECRET = "hook-secret-never-shown-0123456789"

EMAIL_CONTENT = {
    "subject": "Spring sale",
    "sender_name": "Shop",
    "from_address": "news@shop.example",
    "html_content": "<html><body><p>Hello from the shop</p></body></html>",
}
PUSH_ANDROID = {"template_type": "BASIC", "basic_details": {"title": "Hi Android", "message": "Sale now"}}
PUSH_IOS = {"template_type": "BASIC", "basic_details": {"title": "Hi iOS", "message": "Sale now"}}


def meta(identifier: str, *values: str, **narrowing: Any) -> dict[str, Any]:
    return {"identifier": identifier, "identifier_values": list(values), **narrowing}


def inline_email(identifier: str, *values: str, connector: str = "mail", **extra: Any) -> dict[str, Any]:
    return {
        "test_campaign_meta": meta(identifier, *values),
        "channel": "EMAIL",
        "campaign_content": {"content": {"email": copy.deepcopy(EMAIL_CONTENT)}},
        "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": connector},
        **extra,
    }


def inline_push(identifier: str, *values: str, **extra: Any) -> dict[str, Any]:
    content = {"push": {"android": copy.deepcopy(PUSH_ANDROID), "ios": copy.deepcopy(PUSH_IOS)}}
    return {
        "test_campaign_meta": meta(identifier, *values),
        "channel": "PUSH",
        "campaign_content": {"content": content},
        **extra,
    }


async def send_test(client: httpx.AsyncClient, tenant: Tenant, body: Any) -> httpx.Response:
    return await client.post(TEST_PATH, json=body, headers=tenant.write_headers(campaigns=True))


def results(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["type"] == "campaign"
    assert body["data"]["message"] == "Test campaign processed"
    data: dict[str, Any] = body["data"]["data"]
    return data


def detail_targets(response: httpx.Response) -> set[tuple[str, str]]:
    return {(d["code"], d["target"]) for d in response.json()["error"]["details"]}


async def smtp_connector(
    app: FastAPI,
    tenant: Tenant,
    server: SmtpServer | None,
    *,
    name: str = "mail",
    port: int | None = None,
    **extra: Any,
) -> None:
    """A CUSTOM_SMTP connector (with a password, so it has a sealed secret) to `server`."""
    given = ConnectorInput(
        name,
        "CUSTOM_SMTP",
        host="127.0.0.1",
        port=port if port is not None else (server.port if server else 25),
        security="none",
        username=SMTP_USER,
        password=SMTP_PASSWORD,
        timeout=5,
        **extra,
    )
    await add_connector(app, tenant, given)


async def push_connector(
    app: FastAPI, tenant: Tenant, receiver: HttpReceiver, *, name: str = "push-gw", time_limit: int = 5
) -> None:
    given = ConnectorInput(
        name, "CUSTOM_API", channel="push", url=receiver.url, secret=HOOK_SECRET, timeout=time_limit
    )
    await add_connector(app, tenant, given)


async def outbox_rows(app: FastAPI, tenant: Tenant) -> list[OutboxEntry]:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        return list(reversed(await outbox.list_entries(session, tenant.workspace_id, 1000)))


async def create_campaign(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> str:
    response = await client.post(CAMPAIGNS, json=body, headers=tenant.write_headers(campaigns=True))
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["id"])
