"""The worker wakes when work is committed, instead of waiting for its next poll: the engine
embedded in the API process (`herald serve` on SQLite) runs here with a poll interval of an hour,
so a message that reaches the sink got there because the publish woke it."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable

import httpx
from fastapi import FastAPI

from herald.campaigns import worker
from herald.services import Services
from tests.delivery.builders import push_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import PUSH, publish
from tests.factories import Tenant

HOUR = 3600.0


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for a background worker's effect (a bound against hanging, not a speed assertion)."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def _of(webhook: HttpReceiver, campaign_id: str) -> list[str]:
    return [
        str(r.json()["recipient"]["customer_id"])
        for r in webhook.received
        if r.json()["campaign_id"] == campaign_id
    ]


async def test_publishing_wakes_the_worker(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    await push_connector(app, workspace, webhook)
    await add_users(
        app, workspace.workspace_id, {"customer_id": "ana", "push_id": "t", "platform": "ANDROID"}
    )
    services: Services = app.state.herald
    stop = asyncio.Event()
    task = asyncio.create_task(
        worker.run_forever(services.database, services.clock, HOUR, stop, services.settings)
    )
    try:
        first = await publish(client, workspace, PUSH)
        await _until(lambda: _of(webhook, first) == ["ana"], "the first campaign is sent")
        # The worker now waits for an hour, unless something wakes it.
        body = copy.deepcopy(PUSH)
        body["basic_details"]["name"] = "Second"
        second = await publish(client, workspace, body)
        await _until(lambda: _of(webhook, second) == ["ana"], "the second campaign is sent")
    finally:
        stop.set()
        await task
    assert not task.exception()
