"""C5 Update campaign status through the HTTP API: the whole matrix, PAUSE/RESUME memory,
idempotency, tenancy and concurrency."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import httpx
import pytest
from fastapi import FastAPI

from herald.campaigns.lifecycle import Action
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.workspaces.scopes import Scope
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import PAYLOADS
from tests.campaigns.test_lifecycle_rules import ALLOWED
from tests.factories import Tenant, add_key

EVERY_CASE = [
    pytest.param(action, kind, state, id=f"{action}-{kind}-{state}")
    for action, kind, state in itertools.product(Action, DeliveryType, CampaignStatus)
]


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


@pytest.mark.parametrize(("action", "kind", "state"), EVERY_CASE)
async def test_matrix(
    app: FastAPI,
    client: httpx.AsyncClient,
    ws: Tenant,
    action: Action,
    kind: DeliveryType,
    state: CampaignStatus,
) -> None:
    """Every action, delivery type and state: allowed ones move the campaign, all others are 422."""
    [campaign_id] = await h.seed(
        app, ws, h.line(channel="PUSH", campaign_delivery_type=kind.value, status=state.value)
    )
    response = await h.action(client, ws, campaign_id, action.value)
    expected = ALLOWED.get((action, kind, state))
    after = (await h.get(client, ws, campaign_id))["status"]
    if expected is None:
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "UNPROCESSABLE_ENTITY"
        assert error["target"] == "action"
        for name in (action.value, kind.value, state.value):
            assert name in error["message"]
        assert after == state.value
    else:
        assert response.status_code == 200, response.text
        assert response.json() == {
            "response_id": response.json()["response_id"],
            "type": "campaign",
            "data": {"id": campaign_id, "action": action.value},
        }
        assert after == expected.value


@pytest.mark.parametrize(
    ("kind", "state", "action", "expected"),
    [
        ("ONE_TIME", "SCHEDULED", "STOP", "STOPPED"),
        ("PERIODIC", "ACTIVE", "PAUSE", "PAUSED"),
        ("EVENT_TRIGGERED", "PAUSED", "RESUME", "ACTIVE"),
        ("PERIODIC", "ACTIVE", "STOP", None),
        ("EVENT_TRIGGERED", "ACTIVE", "STOP", None),
    ],
)
async def test_email_campaigns_follow_the_same_matrix(
    app: FastAPI,
    client: httpx.AsyncClient,
    ws: Tenant,
    kind: str,
    state: str,
    action: str,
    expected: str | None,
) -> None:
    [campaign_id] = await h.seed(app, ws, h.line(channel="EMAIL", campaign_delivery_type=kind, status=state))
    response = await h.action(client, ws, campaign_id, action)
    assert response.status_code == (200 if expected else 422)
    assert (await h.get(client, ws, campaign_id))["status"] == (expected or state)


@pytest.mark.parametrize("paused_from", ["ACTIVE", "SCHEDULED"])
async def test_resume_returns_to_the_state_paused_from(
    app: FastAPI, client: httpx.AsyncClient, ws: Tenant, paused_from: str
) -> None:
    [campaign_id] = await h.seed(
        app, ws, h.line(channel="PUSH", campaign_delivery_type="PERIODIC", status=paused_from)
    )
    assert (await h.action(client, ws, campaign_id, "PAUSE")).status_code == 200
    assert (await h.get(client, ws, campaign_id))["status"] == "PAUSED"
    assert (await h.action(client, ws, campaign_id, "RESUME")).status_code == 200
    assert (await h.get(client, ws, campaign_id))["status"] == paused_from


async def test_a_published_campaign_can_be_stopped(client: httpx.AsyncClient, ws: Tenant) -> None:
    campaign_id = await h.create(client, ws, PAYLOADS["email_one_time_promotional"])
    draft = await h.action(client, ws, campaign_id, "STOP")
    assert draft.status_code == 422
    assert "DRAFT" in draft.json()["error"]["message"]
    await h.publish(client, ws, campaign_id)
    assert (await h.action(client, ws, campaign_id, "STOP")).status_code == 200
    assert (await h.get(client, ws, campaign_id))["status"] == "STOPPED"


class TestRequest:
    async def test_body_is_validated(self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant) -> None:
        [campaign_id] = await h.seed(app, ws, h.line(channel="PUSH"))
        url = f"{h.BASE}/{campaign_id}/status"
        for body, target, code in (
            ({}, "action", "REQUIRED_FIELD_MISSING"),
            ({"action": "stop"}, "action", "INVALID_ENUM_VALUE"),
            ({"action": "PUBLISH"}, "action", "INVALID_ENUM_VALUE"),
            ({"action": "STOP", "extra": 1}, "extra", "UNKNOWN_FIELD"),
        ):
            response = await client.patch(url, json=body, headers=ws.write_headers(campaigns=True))
            assert response.status_code == 400
            assert (
                response.json()["error"]["details"][0]["code"],
                response.json()["error"]["details"][0]["target"],
            ) == (code, target)
        assert (await h.get(client, ws, campaign_id))["status"] == "ACTIVE"

    async def test_idempotency_key_is_required_and_replays(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        [campaign_id] = await h.seed(app, ws, h.line(channel="PUSH", campaign_delivery_type="PERIODIC"))
        url = f"{h.BASE}/{campaign_id}/status"
        missing = await client.patch(url, json={"action": "PAUSE"}, headers=ws.headers(campaigns=True))
        assert missing.status_code == 400
        assert missing.json()["error"]["details"][0]["code"] == "MISSING_IDEMPOTENCY_KEY"
        headers = ws.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        first = await client.patch(url, json={"action": "PAUSE"}, headers=headers)
        again = await client.patch(url, json={"action": "PAUSE"}, headers=headers)
        assert (first.status_code, again.status_code) == (200, 200)
        assert again.headers["Idempotent-Replayed"] == "true"
        fresh = await h.action(client, ws, campaign_id, "PAUSE")  # a new request: already paused
        assert fresh.status_code == 422

    async def test_needs_create_manage_scope(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        [campaign_id] = await h.seed(app, ws, h.line(channel="PUSH"))
        viewer = await add_key(app, ws, [Scope.CAMPAIGNS_VIEW])
        assert (await h.action(client, viewer, campaign_id, "STOP")).status_code == 403

    async def test_another_workspace_gets_404(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        [campaign_id] = await h.seed(app, ws, h.line(channel="PUSH"))
        stranger = await h.workspace(app)
        for tenant, some_id in ((stranger, campaign_id), (ws, "0" * 24), (ws, "x")):
            response = await h.action(client, tenant, some_id, "STOP")
            assert response.status_code == 404
        assert (await h.get(client, ws, campaign_id))["status"] == "ACTIVE"


class TestConcurrency:
    async def test_concurrent_stop_and_resume_leave_one_consistent_state(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        one_time, periodic = await h.seed(
            app,
            ws,
            h.line(channel="PUSH", status="PAUSED", paused_from="ACTIVE"),
            h.line(
                channel="PUSH", campaign_delivery_type="PERIODIC", status="PAUSED", paused_from="SCHEDULED"
            ),
        )
        for campaign_id, winner, final in ((one_time, "STOP", "STOPPED"), (periodic, "RESUME", "SCHEDULED")):
            stop, resume = await asyncio.gather(
                h.action(client, ws, campaign_id, "STOP"), h.action(client, ws, campaign_id, "RESUME")
            )
            codes = {"STOP": stop.status_code, "RESUME": resume.status_code}
            assert codes[winner] == 200
            assert sorted(codes.values()) == [200, 422]
            assert (await h.get(client, ws, campaign_id))["status"] == final

    async def test_racing_pauses_and_resumes_alternate(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        """Each success flips ACTIVE <-> PAUSED from the state it saw, so the final state follows
        from the number of successes of each kind."""
        [campaign_id] = await h.seed(
            app, ws, h.line(channel="PUSH", campaign_delivery_type="EVENT_TRIGGERED")
        )
        names = ["PAUSE", "RESUME"] * 8
        responses = await asyncio.gather(*(h.action(client, ws, campaign_id, name) for name in names))
        assert {r.status_code for r in responses} <= {200, 422}
        pauses = sum(
            1 for name, r in zip(names, responses, strict=True) if name == "PAUSE" and r.status_code == 200
        )
        resumes = sum(
            1 for name, r in zip(names, responses, strict=True) if name == "RESUME" and r.status_code == 200
        )
        assert pauses - resumes in (0, 1)
        rows = await h.stored(app, ws, campaign_id)
        assert rows[0].status == ("PAUSED" if pauses > resumes else "ACTIVE")
        assert rows[0].paused_from == ("ACTIVE" if pauses > resumes else None)
        assert rows[0].revision == 1 + pauses + resumes
