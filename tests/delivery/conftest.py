"""Fixtures for delivery tests: real SMTP and HTTP servers on 127.0.0.1, users and segments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from herald.audience import service as audience_service
from herald.audience.models import Segment, SegmentMember
from herald.ids import object_id
from herald.services import Services
from tests.delivery.servers import (
    SMTP_PASSWORD,
    SMTP_USER,
    Certificate,
    HttpReceiver,
    SmtpServer,
    free_port,
    self_signed_certificate,
    start_http_receiver,
    start_smtp,
)
from tests.factories import Tenant, make_tenant

# Limits no test of the engine reaches. A test polls the API while the worker works, and its
# clock is frozen: every poll counts in one window (1,000 a second was reached by a poll of stats
# on a loaded machine, and answered 429).
OPEN_LIMITS = {
    "campaign_create": "1000/second",
    "campaign_create_success": "1000/minute",
    "campaign_ops": "1000000/second",
}


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    server = start_smtp(credentials=(SMTP_USER, SMTP_PASSWORD))
    yield server
    server.controller.stop()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    return self_signed_certificate(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="session")
def _http_receiver() -> Iterator[HttpReceiver]:
    receiver = start_http_receiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def webhook(_http_receiver: HttpReceiver) -> HttpReceiver:
    """The local HTTP receiver, emptied and answering 204 (one server for the run: stopping one
    waits for its poll interval)."""
    _http_receiver.reset()
    return _http_receiver


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused at once)."""
    return free_port()


@pytest.fixture
async def workspace(app: FastAPI) -> Tenant:
    return await make_tenant(app, rate_limits=OPEN_LIMITS)


async def add_users(app: FastAPI, workspace_id: str, *users: dict[str, Any]) -> None:
    """Users written the way the ingestion API writes them (`customer_id` plus attributes)."""
    services: Services = app.state.herald
    now = services.clock.now()
    async with services.database.writer() as session:
        for user in users:
            attributes = {key: value for key, value in user.items() if key != "customer_id"}
            raw = {"type": "customer", "customer_id": user["customer_id"], "attributes": attributes}
            await audience_service.ingest_customer(session, workspace_id, raw, now)
        await session.commit()


async def add_segment(
    app: FastAPI, workspace_id: str, name: str, members: list[str], kind: str = "static"
) -> str:
    services: Services = app.state.herald
    now = services.clock.now()
    segment_id = object_id(now)
    async with services.database.writer() as session:
        filters = {"filter_operator": "and", "filters": []} if kind == "filter" else None
        session.add(
            Segment(
                workspace_id=workspace_id,
                id=segment_id,
                name=name,
                kind=kind,
                filters=filters,
                created_at=now,
            )
        )
        await session.flush()
        session.add_all(
            SegmentMember(workspace_id=workspace_id, segment_id=segment_id, customer_id=customer_id)
            for customer_id in members
        )
        await session.commit()
    return segment_id
