"""Helpers for the audience tests: a workspace with ingestion limits out of the way, and readers of
what was stored (the API has no read route for users and events; segmentation and preview read them)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from herald.audience.models import Event, User
from herald.cli import runtime
from herald.clock import FrozenClock
from tests.audience.cli_helpers import Cli
from tests.factories import Tenant, make_tenant

OPEN_LIMITS = {"ingest": "100000/minute"}


@pytest.fixture
async def workspace(app: FastAPI) -> Tenant:
    return await make_tenant(app, rate_limits=OPEN_LIMITS)


class Ingest:
    """Posts to the ingestion routes of one workspace."""

    def __init__(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        self.client = client
        self.tenant = tenant

    async def post(self, kind: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        return await self.client.post(
            f"/v1/{kind}/{self.tenant.workspace_id}", json=body, headers=headers or self.tenant.headers()
        )

    async def customer(self, customer_id: str, attributes: dict[str, Any], **extra: Any) -> httpx.Response:
        body = {"type": "customer", "customer_id": customer_id, "attributes": attributes, **extra}
        return await self.post("customer", body)

    async def event(self, customer_id: str, *actions: dict[str, Any]) -> httpx.Response:
        return await self.post(
            "event", {"type": "event", "customer_id": customer_id, "actions": list(actions)}
        )

    async def transition(self, *elements: Any) -> httpx.Response:
        return await self.post("transition", {"type": "transition", "elements": list(elements)})


@pytest.fixture
def ingest(client: httpx.AsyncClient, workspace: Tenant) -> Ingest:
    return Ingest(client, workspace)


async def stored_user(app: FastAPI, workspace_id: str, customer_id: str) -> User | None:
    async with app.state.herald.database.reader() as session:
        return await session.get(User, (workspace_id, customer_id))


async def stored_users(app: FastAPI, workspace_id: str) -> dict[str, User]:
    async with app.state.herald.database.reader() as session:
        rows = await session.scalars(select(User).where(User.workspace_id == workspace_id))
        return {user.customer_id: user for user in rows}


async def stored_events(app: FastAPI, workspace_id: str) -> list[Event]:
    async with app.state.herald.database.reader() as session:
        query = select(Event).where(Event.workspace_id == workspace_id).order_by(Event.occurred_at, Event.id)
        return list(await session.scalars(query))


def details(response: httpx.Response) -> set[tuple[str, str]]:
    """(code, target) of every detail of an error answer."""
    return {(d["code"], d["target"]) for d in response.json()["error"]["details"]}


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> FrozenClock:
    clock = FrozenClock()
    monkeypatch.setattr(runtime, "clock", clock)
    return clock


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch, frozen: FrozenClock) -> Cli:
    monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
    return Cli(database_url)
