"""How live messages share connections: a batched webhook connector (many messages per POST, each
with its own delivery id) and SMTP sessions kept between messages, through real receivers."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from fastapi import FastAPI

from herald.delivery.config import ConnectorInput, check_connector
from herald.delivery.signing import verify
from herald.delivery.webhook import batch_id
from tests.delivery.builders import HOOK_SECRET, outbox_rows, smtp_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.delivery.test_engine_send import EMAIL, PUSH, publish, stats, status, tick
from tests.factories import Tenant, add_connector

ANDROID_ONLY: dict[str, Any] = copy.deepcopy(PUSH)
ANDROID_ONLY["basic_details"]["platforms"] = ["ANDROID"]


def _users(count: int) -> list[dict[str, Any]]:
    return [
        {
            "customer_id": f"u{i:02d}",
            "push_id": f"tok-{i:02d}",
            "platform": "ANDROID",
            "email": f"u{i:02d}@x.example",
        }
        for i in range(count)
    ]


async def _batched(app: FastAPI, tenant: Tenant, receiver: HttpReceiver, size: int) -> None:
    given = ConnectorInput(
        "push-gw",
        "CUSTOM_API",
        channel="push",
        url=receiver.url,
        secret=HOOK_SECRET,
        timeout=5,
        batch_size=size,
    )
    await add_connector(app, tenant, given)


class TestBatchedWebhook:
    async def test_each_post_carries_a_list_of_messages_with_their_own_ids(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await _batched(app, workspace, webhook, 10)
        await add_users(app, workspace.workspace_id, *_users(25))
        campaign_id = await publish(client, workspace, ANDROID_ONLY)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        bodies = [request.json() for request in webhook.received]
        assert sorted(len(body) for body in bodies) == [5, 10, 10]
        messages = [message for body in bodies for message in body]
        rows = {row.customer_id: row for row in await outbox_rows(app, workspace)}
        assert len(rows) == 25
        assert all(row.status == "SENT" for row in rows.values())
        # The same objects as one message per POST: each its own stable id, the outbox row's.
        assert sorted(m["id"] for m in messages) == sorted(row.id for row in rows.values())
        assert {m["recipient"]["customer_id"] for m in messages} == set(rows)
        assert all(m["test"] is False and m["platform"] == "ANDROID" for m in messages)
        assert messages[0]["message"]["basic_details"]["title"].startswith("Hi ")
        for request, body in zip(webhook.received, bodies, strict=True):
            headers = {name.lower(): value for name, value in request.headers.items()}
            stamp = headers["x-herald-timestamp"]
            assert verify(HOOK_SECRET, request.body, stamp, headers["x-herald-signature"], int(stamp))
            assert headers["x-herald-delivery"] == batch_id_of(body)
        run = (await stats(client, workspace, campaign_id))["executions"][0]
        assert (run["sent"], run["pending"], run["failed"]) == (25, 0, 0)

    async def test_a_failed_batch_is_attempted_again_whole_under_the_same_ids(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver, clock: Any
    ) -> None:
        await _batched(app, workspace, webhook, 4)
        await add_users(app, workspace.workspace_id, *_users(4))
        webhook.status = 503
        campaign_id = await publish(client, workspace, ANDROID_ONLY)
        await tick(app, workspace)
        [first] = [request.json() for request in webhook.received]
        rows = await outbox_rows(app, workspace)
        assert [(row.status, row.attempts) for row in rows] == [("PENDING", 1)] * 4
        webhook.status = 204
        clock.advance(minutes=5)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        second = webhook.received[1].json()
        assert sorted(m["id"] for m in second) == sorted(m["id"] for m in first)
        rows = await outbox_rows(app, workspace)
        assert [(row.status, row.attempts) for row in rows] == [("SENT", 2)] * 4


def batch_id_of(body: list[dict[str, Any]]) -> str:
    class _Id:
        def __init__(self, value: str) -> None:
            self.delivery_id = value

    return batch_id([_Id(m["id"]) for m in body])  # type: ignore[list-item]


class TestConcurrentSends:
    async def test_many_users_in_flight_each_get_exactly_one_message(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await add_connector(
            app,
            workspace,
            ConnectorInput(
                "push-gw", "CUSTOM_API", channel="push", url=webhook.url, secret=HOOK_SECRET, timeout=5
            ),
        )
        await add_users(app, workspace.workspace_id, *_users(60))
        campaign_id = await publish(client, workspace, ANDROID_ONLY)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        ids = [request.json()["id"] for request in webhook.received]
        assert len(ids) == 60
        assert set(ids) == {row.id for row in await outbox_rows(app, workspace)}


class TestSmtpSessions:
    async def test_one_connection_carries_many_messages_up_to_its_bound(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, session_messages=10)
        await add_users(app, workspace.workspace_id, *_users(25))
        campaign_id = await publish(client, workspace, EMAIL)
        await tick(app, workspace, one_at_a_time=True)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert len(smtp_server.received) == 25
        assert smtp_server.sink.sessions == 3  # 10 + 10 + 5 messages
        delivered = {mail.message["X-Herald-Delivery"] for mail in smtp_server.received}
        assert delivered == {row.id for row in await outbox_rows(app, workspace)}

    async def test_side_by_side_sends_open_no_more_connections_than_are_in_flight(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(app, workspace.workspace_id, *_users(40))
        services = app.state.herald
        await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        assert len(smtp_server.received) == 40
        assert len({mail.message["X-Herald-Delivery"] for mail in smtp_server.received}) == 40
        assert smtp_server.sink.sessions <= services.settings.delivery_smtp_connections


class TestConnectorRules:
    def test_batch_size_is_for_webhooks_and_session_messages_for_smtp(self) -> None:
        hook = ConnectorInput("h", "CUSTOM_API", channel="push", url="https://x.example/h", secret="s" * 20)
        checked, errors = check_connector(ConnectorInput(**{**hook.__dict__, "batch_size": 50}), "g" * 32)
        assert errors == []
        assert checked is not None
        assert checked.settings["batch_size"] == 50
        _, errors = check_connector(ConnectorInput(**{**hook.__dict__, "batch_size": 0}), "g" * 32)
        assert errors == ["--batch-size must be 1-1000"]
        mail = ConnectorInput("m", "CUSTOM_SMTP", host="mail.example", security="none")
        _, errors = check_connector(ConnectorInput(**{**mail.__dict__, "batch_size": 5}), "g" * 32)
        assert errors == ["--batch-size belongs to webhook connectors, not CUSTOM_SMTP"]
        checked, errors = check_connector(
            ConnectorInput(**{**mail.__dict__, "session_messages": 20}), "g" * 32
        )
        assert errors == []
        assert checked is not None
        assert checked.settings["session_messages"] == 20
