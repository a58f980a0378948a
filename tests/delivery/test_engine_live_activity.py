"""Live activities end to end: a BROADCAST_LIVE_ACTIVITY campaign published through the API, worker
ticks on the frozen clock, the one broadcast counted at a real HTTP receiver and read in the stats."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from fastapi import FastAPI

from herald.clock import FrozenClock
from herald.config import Settings
from herald.delivery.engine.broadcast import broadcast_id
from tests.delivery.builders import outbox_rows, push_connector
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_controls import herald, push_users
from tests.delivery.test_engine_send import PUSH, publish, stats, status, tick
from tests.factories import Tenant


def live_activity() -> dict[str, Any]:
    body = copy.deepcopy(PUSH)
    body["campaign_delivery_type"] = "BROADCAST_LIVE_ACTIVITY"
    body["basic_details"]["platforms"] = ["IOS"]
    body["campaign_content"]["content"]["push"].pop("android")
    return body


class TestBroadcast:
    async def test_one_message_per_execution_whatever_the_audience(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 25)
        campaign_id = await publish(client, workspace, live_activity())
        assert await status(client, workspace, campaign_id) == "ACTIVE"
        await tick(app, workspace)
        await tick(app, workspace)  # a later tick sends nothing more
        [request] = webhook.received
        payload = request.json()
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert payload["id"] == broadcast_id(run["id"])
        assert (payload["platform"], payload["recipient"]["address"]) == ("IOS", "BROADCAST")
        assert payload["message"]["basic_details"]["title"] == "Hi iOS"
        assert run["broadcast"] == {
            "id": payload["id"],
            "status": "SENT",
            "failure_reason": None,
            "attempts": 1,
        }
        assert (run["status"], run["audience"], run["sent"], run["conversions"]) == ("DONE", 0, 0, None)
        [row] = [r for r in await outbox_rows(app, workspace) if r.campaign_id == campaign_id]
        assert (row.id, row.status, row.customer_id) == (payload["id"], "SENT", None)

    async def test_a_transient_failure_is_attempted_again_under_the_same_id(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        webhook.status = 503
        campaign_id = await publish(client, workspace, live_activity())
        await tick(app, workspace)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["broadcast"]["status"], run["broadcast"]["attempts"]) == ("PENDING", 1)
        # The operator's table shows the one message too (it showed an audience of 0 and nothing sent).
        table = await herald(settings, "campaigns", "stats", campaign_id, "-w", workspace.workspace_id)
        assert (
            f"broadcast ({run['id']}): PENDING, 1 attempt(s); last failure: {run['broadcast']['failure_reason']}; "
            f"id {run['broadcast']['id']}"
        ) in table.splitlines()
        await tick(app, workspace)  # not due yet
        assert len(webhook.received) == 1
        webhook.status = 204
        clock.advance(hours=2)
        await tick(app, workspace)
        first, second = webhook.received
        assert first.json()["id"] == second.json()["id"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["broadcast"]["status"], run["broadcast"]["attempts"]) == (
            "DONE",
            "SENT",
            2,
        )
        assert await status(client, workspace, campaign_id) == "ACTIVE"
