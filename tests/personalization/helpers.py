"""Builders for personalization tests: users (inserted directly), workspace resources, preview bodies."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from fastapi import FastAPI

from herald.audience.models import User
from herald.personalization import resources
from herald.services import Services
from tests.factories import Tenant

PREVIEW = "/v5/personalization/preview"
OPEN_LIMITS = {"preview": "100000/minute", "campaign_ops": "1000/second", "campaign_create": "1000/second"}
STANDARD = ("email", "mobile", "first_name", "last_name", "gaid", "push_id", "timezone")


async def add_user(app: FastAPI, tenant: Tenant, customer_id: str, **values: Any) -> None:
    """A user with standard attributes as columns and the rest as custom attributes."""
    services: Services = app.state.herald
    now = services.clock.now()
    standard = {key: values.pop(key) for key in STANDARD if key in values}
    async with services.database.writer() as session:
        session.add(
            User(
                workspace_id=tenant.workspace_id,
                customer_id=customer_id,
                attributes=values,
                created_at=now,
                updated_at=now,
                **standard,
            )
        )
        await session.commit()


async def add_resources(app: FastAPI, tenant: Tenant, **kinds: dict[str, Any]) -> None:
    """Workspace resources through the service the CLI uses.

    `blocks={name: body or (kind, body)}`, `product_sets={name: items}`,
    `apis={name: {url, allow_private?, timeout_seconds?, headers?}}`, `templates={id: (channel, body)}`.
    """
    services: Services = app.state.herald
    now = services.clock.now()
    workspace = tenant.workspace_id
    async with services.database.writer() as session:
        for name, block in kinds.get("blocks", {}).items():
            kind, body = block if isinstance(block, tuple) else ("text", block)
            await resources.create_content_block(session, now, workspace, name, body, kind)
        for name, items in kinds.get("product_sets", {}).items():
            await resources.create_product_set(session, now, workspace, name, items)
        for name, api in kinds.get("apis", {}).items():
            await resources.create_content_api(session, now, workspace, name, **api)
        for template_id, (channel, body) in kinds.get("templates", {}).items():
            await resources.create_custom_template(session, now, workspace, template_id, channel, body)
        await session.commit()


def by_id(value: str, kind: str = "USER_ATTRIBUTE_UNIQUE_ID") -> dict[str, str]:
    return {"type": kind, "value": value}


def push_body(platforms: dict[str, dict[str, Any]], user: str = "u1", **extra: Any) -> dict[str, Any]:
    """A PUSH preview of flat content: `{"android": {"title": ..., "message": ...}, ...}`."""
    content = {
        name: {"template_type": "BASIC", "basic_details": details} for name, details in platforms.items()
    }
    return {
        "request_id": str(uuid.uuid4()),
        "channel": "PUSH",
        "user_identification": by_id(user),
        "campaign_content": {"content": {"push": content}},
        **extra,
    }


def email_body(email: dict[str, Any], user: str = "u1", **extra: Any) -> dict[str, Any]:
    return {
        "request_id": str(uuid.uuid4()),
        "channel": "EMAIL",
        "user_identification": by_id(user),
        "campaign_content": {"content": {"email": email}},
        **extra,
    }


def sms_body(message: str, user: str = "u1", **extra: Any) -> dict[str, Any]:
    return {
        "request_id": str(uuid.uuid4()),
        "channel": "SMS",
        "user_identification": by_id(user),
        "campaign_content": {"content": {"sms": {"message": message}}},
        **extra,
    }


def title_of(response: httpx.Response, platform: str = "android") -> str:
    data = response.json()["data"]["personalized_content"]["content"]["push"][platform]["basic_details"]
    return str(data["title"])


async def preview(client: httpx.AsyncClient, tenant: Tenant, body: Any) -> httpx.Response:
    return await client.post(PREVIEW, json=body, headers=tenant.headers(campaigns=True))


async def render_title(client: httpx.AsyncClient, tenant: Tenant, title: str, **extra: Any) -> httpx.Response:
    """Preview an Android title for user u1."""
    return await preview(client, tenant, push_body({"android": {"title": title, "message": "m"}}, **extra))


def detail_codes(response: httpx.Response) -> set[tuple[str, str]]:
    return {(detail["code"], detail["target"]) for detail in response.json()["error"]["details"]}
