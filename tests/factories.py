"""Typed builders for test data, made through the same service functions the CLI uses."""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
from fastapi import FastAPI

from herald.delivery import connectors as delivery_connectors
from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import AddedConnector
from herald.services import Services
from herald.workspaces import service as workspaces_service
from herald.workspaces.scopes import Scope


@dataclass(frozen=True)
class Tenant:
    workspace_id: str
    secret: str
    key_id: str

    def headers(self, *, campaigns: bool = False, idempotency_key: str | None = None) -> dict[str, str]:
        """Basic credentials (+ the app key on campaign surfaces, + an Idempotency-Key if given)."""
        token = base64.b64encode(f"{self.workspace_id}:{self.secret}".encode()).decode()
        headers = {"Authorization": f"Basic {token}"}
        if campaigns:
            headers["SVC-APPKEY"] = self.workspace_id
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return headers

    def write_headers(self, *, campaigns: bool = False) -> dict[str, str]:
        """Headers for a write, with a fresh Idempotency-Key."""
        return self.headers(campaigns=campaigns, idempotency_key=str(uuid.uuid4()))


async def make_tenant(
    app: FastAPI,
    scopes: Iterable[Scope] = tuple(Scope),
    features: dict[str, bool] | None = None,
    rate_limits: dict[str, str] | None = None,
) -> Tenant:
    services: Services = app.state.herald
    now = services.clock.now()
    async with services.database.writer() as session:
        workspace = await workspaces_service.create_workspace(
            session, now, "test", f"W{secrets.token_hex(6).upper()}", features
        )
        for bucket, spec in (rate_limits or {}).items():
            await workspaces_service.set_rate_limit(session, workspace.id, bucket, spec)
        issued = await workspaces_service.create_api_key(session, now, workspace.id, list(scopes))
        await session.commit()
    return Tenant(workspace_id=workspace.id, secret=issued.secret, key_id=issued.key.id)


async def add_connector(app: FastAPI, tenant: Tenant, given: ConnectorInput) -> AddedConnector:
    """A delivery connector of the workspace, added the way `herald connectors add` does."""
    services: Services = app.state.herald
    async with services.database.writer() as session:
        added = await delivery_connectors.add_connector(
            session, services.clock.now(), tenant.workspace_id, given, services.settings.secret_key
        )
        await session.commit()
    return added


async def add_key(app: FastAPI, tenant: Tenant, scopes: Iterable[Scope]) -> Tenant:
    """Another key of the same workspace, with other scopes."""
    services: Services = app.state.herald
    async with services.database.writer() as session:
        issued = await workspaces_service.create_api_key(
            session, services.clock.now(), tenant.workspace_id, list(scopes)
        )
        await session.commit()
    return Tenant(workspace_id=tenant.workspace_id, secret=issued.secret, key_id=issued.key.id)


def is_replay_of(replay: httpx.Response, original: httpx.Response) -> bool:
    """Whether `replay` carries `original`'s stored answer (contract §7), its `response_id` its own
    (§3: `resp_` and the request id of the answer it is in)."""
    expected = original.json()
    expected["response_id"] = f"resp_{replay.headers['X-SVC-Request-Id']}"
    return bool(replay.json() == expected)
