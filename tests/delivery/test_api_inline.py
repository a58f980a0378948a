"""C8 with inline content: what the SMTP server and the webhook receiver actually get, and the outbox."""

from __future__ import annotations

import uuid

import httpx
import pytest
from fastapi import FastAPI

from herald.delivery.signing import verify
from herald.workspaces.scopes import Scope
from tests.delivery.builders import (
    HOOK_SECRET,
    TEST_PATH,
    detail_targets,
    inline_email,
    inline_push,
    outbox_rows,
    push_connector,
    results,
    send_test,
    smtp_connector,
)
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.factories import Tenant, add_key


async def _ingest_email(client: httpx.AsyncClient, tenant: Tenant, address: str) -> httpx.Response:
    body = {"type": "customer", "customer_id": "u1", "attributes": {"email": address}}
    return await client.post(f"/v1/customer/{tenant.workspace_id}", json=body, headers=tenant.headers())


class TestInlineEmail:
    async def test_sent_through_smtp_to_the_recipient(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(app, workspace.workspace_id, {"customer_id": "u1", "email": "ana@example.com"})
        response = await send_test(client, workspace, inline_email("EMAIL", "ana@example.com"))
        assert response.json() == {
            "response_id": response.json()["response_id"],
            "type": "campaign",
            "data": {
                "data": {"EMAIL_default_variation_1": {"status": "SENT"}},
                "message": "Test campaign processed",
            },
        }
        [mail] = smtp_server.received
        assert mail.rcpt_tos == ["ana@example.com"]
        assert mail.mail_from == "news@shop.example"
        assert mail.message["Subject"] == "Spring sale"
        assert mail.message["From"] == "Shop <news@shop.example>"
        assert "<p>Hello from the shop</p>" in mail.html
        assert mail.text.strip() == "Hello from the shop"

    async def test_every_send_is_in_the_outbox(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(app, workspace.workspace_id, {"customer_id": "u1", "email": "ana@example.com"})
        response = await send_test(client, workspace, inline_email("ID", "u1"))
        assert results(response) == {"EMAIL_default_variation_1": {"status": "SENT"}}
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.failure_reason, row.is_test) == ("SENT", None, True)
        assert (row.channel, row.platform, row.locale, row.variation) == (
            "EMAIL",
            None,
            "default",
            "variation_1",
        )
        assert (row.recipient, row.customer_id, row.connector_name) == ("ana@example.com", "u1", "mail")
        assert row.summary == {"subject": "Spring sale", "from": "news@shop.example", "html_bytes": 52}
        assert row.created_at == app.state.herald.clock.now()
        assert row.request_id == response.headers["X-SVC-Request-Id"]

    async def test_unknown_address_still_gets_the_message(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        response = await send_test(client, workspace, inline_email("EMAIL", "stranger@example.org"))
        assert results(response) == {"EMAIL_default_variation_1": {"status": "SENT"}}
        assert smtp_server.received[0].rcpt_tos == ["stranger@example.org"]
        [row] = await outbox_rows(app, workspace)
        assert row.customer_id is None

    async def test_smtp_down_is_failed_with_a_reason_and_recorded(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, closed_port: int
    ) -> None:
        await smtp_connector(app, workspace, None, port=closed_port)
        body = inline_email("EMAIL", "a@example.com", "b@example.com")
        data = results(await send_test(client, workspace, body))
        failure = data["EMAIL_default_variation_1"]
        assert failure["status"] == "FAILED"
        assert failure["failure_reason"].startswith(
            "2 of 2 recipients failed: a@example.com: SMTP 127.0.0.1:"
        )
        rows = await outbox_rows(app, workspace)
        assert [row.status for row in rows] == ["FAILED", "FAILED"]
        assert f"127.0.0.1:{closed_port}" in (rows[0].failure_reason or "")
        # The dead server cost one attempt: the second message was not tried.
        assert (rows[1].failure_reason or "").startswith("Not attempted: connector 'mail' failed earlier")

    async def test_known_user_without_email_is_failed_not_skipped(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1"},
            {"customer_id": "u2", "email": "b@example.com"},
        )
        data = results(await send_test(client, workspace, inline_email("ID", "u1", "u2")))
        assert data["EMAIL_default_variation_1"] == {
            "status": "FAILED",
            "failure_reason": "1 of 2 recipients failed: u1: User 'u1' has no e-mail address.",
        }
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["b@example.com"]]
        assert [row.status for row in await outbox_rows(app, workspace)] == ["FAILED", "SENT"]

    async def test_connector_problems_are_400_at_the_connector(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        missing = inline_email("EMAIL", "a@example.com")
        del missing["connector"]
        assert detail_targets(await send_test(client, workspace, missing)) == {
            ("REQUIRED_FIELD_MISSING", "connector")
        }
        unknown = inline_email("EMAIL", "a@example.com", connector="nope")
        assert detail_targets(await send_test(client, workspace, unknown)) == {
            ("INVALID_ENUM_VALUE", "connector.connector_name")
        }
        wrong_type = inline_email("EMAIL", "a@example.com")
        wrong_type["connector"]["connector_type"] = "SENDGRID"
        assert detail_targets(await send_test(client, workspace, wrong_type)) == {
            ("INVALID_ENUM_VALUE", "connector.connector_type")
        }
        assert smtp_server.received == []

    async def test_sender_must_be_verified_on_the_smtp_connector(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=("@brand.example",))
        response = await send_test(client, workspace, inline_email("EMAIL", "a@example.com"))
        assert response.status_code == 400
        assert detail_targets(response) == {
            ("INVALID_ENUM_VALUE", "campaign_content.content.email.from_address")
        }
        assert "not a verified sender" in response.text

    @pytest.mark.parametrize("address", ["plain@ed.test", "t@localhost"])
    async def test_an_address_ingestion_accepts_is_one_a_test_is_sent_to(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        address: str,
    ) -> None:
        # A user's `email` is where live campaigns deliver; a test may go wherever they do.
        await smtp_connector(app, workspace, smtp_server)
        assert (await _ingest_email(client, workspace, address)).status_code == 200
        response = await send_test(client, workspace, inline_email("EMAIL", address))
        assert results(response) == {"EMAIL_default_variation_1": {"status": "SENT"}}
        assert smtp_server.received[0].rcpt_tos == [address]

    @pytest.mark.parametrize(
        "address",
        ["nobody", "a b@example.com", "two@@example.com", "bell\x07@example.com", "trailing@example.com\n"],
    )
    async def test_an_address_ingestion_refuses_is_refused_for_a_test_too(
        self, client: httpx.AsyncClient, workspace: Tenant, address: str
    ) -> None:
        ingested = await _ingest_email(client, workspace, address)
        assert ingested.status_code == 400, ingested.text
        assert ("INVALID_TYPE", "attributes.email") in detail_targets(ingested)
        response = await send_test(client, workspace, inline_email("EMAIL", address))
        assert response.status_code == 400
        assert ("INVALID_TYPE", "test_campaign_meta.identifier_values.0") in detail_targets(response)

    async def test_incomplete_content_lists_every_problem(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        body = inline_email("EMAIL", "not-an-address")
        body["campaign_content"]["content"]["email"] = {"from_address": "news@shop.example"}
        response = await send_test(client, workspace, body)
        assert response.status_code == 400
        assert detail_targets(response) == {
            ("REQUIRED_FIELD_MISSING", "campaign_content.content.email.subject"),
            ("REQUIRED_FIELD_MISSING", "campaign_content.content.email.html_content"),
            ("INVALID_TYPE", "test_campaign_meta.identifier_values.0"),
        }
        assert await outbox_rows(app, workspace) == []


class TestInlinePush:
    async def test_each_platform_is_posted_signed_to_the_push_webhook(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(
            app, workspace.workspace_id, {"customer_id": "u1", "push_id": "tok-1", "gaid": "gaid-1"}
        )
        data = results(await send_test(client, workspace, inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u1")))
        assert data == {
            "ANDROID_default_variation_1": {"status": "SENT"},
            "IOS_default_variation_1": {"status": "SENT"},
        }
        assert [request.json()["message"]["basic_details"]["title"] for request in webhook.received] == [
            "Hi Android",
            "Hi iOS",
        ]
        now = app.state.herald.clock.now().timestamp()
        for request in webhook.received:
            body = request.json()
            assert body["recipient"] == {
                "address": "tok-1",
                "customer_id": "u1",
                "push_id": "tok-1",
                "gaid": "gaid-1",
            }
            assert body["test"] is True
            timestamp, signature = (
                request.headers["X-Herald-Timestamp"],
                request.headers["X-Herald-Signature"],
            )
            assert verify(HOOK_SECRET, request.body, timestamp, signature, now)
            tampered = request.body.replace(b"Sale now", b"Sale NOW")
            assert not verify(HOOK_SECRET, tampered, timestamp, signature, now)
        rows = await outbox_rows(app, workspace)
        assert [(row.platform, row.status, row.summary["title"]) for row in rows] == [
            ("ANDROID", "SENT", "Hi Android"),
            ("IOS", "SENT", "Hi iOS"),
        ]
        assert [request.headers["X-Herald-Delivery"] for request in webhook.received] == [
            row.id for row in rows
        ]

    async def test_webhook_error_is_failed(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        webhook.status = 500
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, {"customer_id": "u1", "push_id": "tok-1"})
        data = results(await send_test(client, workspace, inline_push("PUSH_ID", "tok-1")))
        assert data["ANDROID_default_variation_1"] == {
            "status": "FAILED",
            "failure_reason": "The webhook answered 500.",
        }

    async def test_without_a_push_connector_is_422(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)  # e-mail connectors do not carry push
        await add_users(app, workspace.workspace_id, {"customer_id": "u1", "push_id": "tok-1"})
        response = await send_test(client, workspace, inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u1"))
        assert response.status_code == 422
        assert detail_targets(response) == {("REQUIRED_FIELD_MISSING", "connector")}
        # Nothing is saved inline: the answer does not speak of a saved campaign.
        assert "saved" not in response.json()["error"]["message"]

    async def test_with_several_push_connectors_the_body_names_one(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook, name="gw-a")
        await push_connector(app, workspace, webhook, name="gw-b")
        await add_users(app, workspace.workspace_id, {"customer_id": "u1", "push_id": "tok-1"})
        body = inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u1")
        response = await send_test(client, workspace, body)
        assert response.status_code == 400
        assert detail_targets(response) == {("REQUIRED_FIELD_MISSING", "connector")}
        body["connector"] = {"connector_type": "CUSTOM_API", "connector_name": "gw-b"}
        results(await send_test(client, workspace, body))
        assert {row.connector_name for row in await outbox_rows(app, workspace)} == {"gw-b"}


class TestRequestRules:
    async def test_one_to_ten_identifier_values(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        eleven = [f"r{n}@example.com" for n in range(11)]
        for values in ([], eleven):
            response = await send_test(client, workspace, inline_email("EMAIL", *values))
            assert response.status_code == 400
            assert detail_targets(response) == {("OUT_OF_RANGE", "test_campaign_meta.identifier_values")}
        ten = eleven[:10]
        data = results(await send_test(client, workspace, inline_email("EMAIL", *ten)))
        assert data == {"EMAIL_default_variation_1": {"status": "SENT"}}
        assert sorted(address for mail in smtp_server.received for address in mail.rcpt_tos) == sorted(ten)

    async def test_identifier_must_suit_the_channel(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await send_test(client, workspace, inline_email("PUSH_ID", "tok"))
        assert ("INVALID_ENUM_VALUE", "test_campaign_meta.identifier") in detail_targets(response)
        response = await send_test(client, workspace, inline_push("EMAIL", "a@example.com"))
        assert ("INVALID_ENUM_VALUE", "test_campaign_meta.identifier") in detail_targets(response)

    async def test_all_body_problems_in_one_400(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        body = {
            "test_campaign_meta": {"identifier": "FAX", "identifier_values": ["x"] * 11, "variation": "v2"},
            "channel": "EMAIL",
            "campaign_content": {"content": {"email": {"subject": 5}}},
            "surprise": True,
        }
        response = await send_test(client, workspace, body)
        assert response.status_code == 400
        assert detail_targets(response) >= {
            ("INVALID_ENUM_VALUE", "test_campaign_meta.identifier"),
            ("OUT_OF_RANGE", "test_campaign_meta.identifier_values"),
            ("UNKNOWN_FIELD", "surprise"),
            ("INVALID_TYPE", "campaign_content.content.email.subject"),
        }

    async def test_neither_draft_nor_content(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await send_test(
            client,
            workspace,
            {"test_campaign_meta": {"identifier": "EMAIL", "identifier_values": ["a@example.com"]}},
        )
        assert detail_targets(response) == {("REQUIRED_FIELD_MISSING", "draft_id")}
        response = await send_test(
            client,
            workspace,
            {
                "test_campaign_meta": {"identifier": "EMAIL", "identifier_values": ["a@x.com"]},
                "campaign_content": {},
            },
        )
        assert ("REQUIRED_FIELD_MISSING", "channel") in detail_targets(response)

    async def test_idempotency_key_is_required_and_a_replay_sends_nothing_again(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        body = inline_email("EMAIL", "a@example.com")
        missing = await client.post(TEST_PATH, json=body, headers=workspace.headers(campaigns=True))
        assert missing.status_code == 400
        assert detail_targets(missing) == {("MISSING_IDEMPOTENCY_KEY", "Idempotency-Key")}
        headers = workspace.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        first = await client.post(TEST_PATH, json=body, headers=headers)
        again = await client.post(TEST_PATH, json=body, headers=headers)
        assert again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["data"] == first.json()["data"]
        assert len(smtp_server.received) == 1
        assert len(await outbox_rows(app, workspace)) == 1

    async def test_needs_the_create_manage_scope(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        viewer = await add_key(app, workspace, [Scope.CAMPAIGNS_VIEW])
        response = await send_test(client, viewer, inline_email("EMAIL", "a@example.com"))
        assert response.status_code == 403
        assert response.json()["code"] == "ER007"


async def test_openapi_describes_the_test_operation(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    operation = document["paths"][TEST_PATH]["post"]
    assert operation["summary"] == "Test campaign"
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/CampaignTestBody"}
    body = document["components"]["schemas"]["CampaignTestBody"]
    assert body["required"] == ["test_campaign_meta"]
    assert {"draft_id", "channel", "campaign_content", "connector", "personalization_details"} <= set(
        body["properties"]
    )
    assert "CampaignTestMeta" in document["components"]["schemas"]
    assert {"Idempotency-Key", "SVC-APPKEY"} <= {
        p["name"] for p in operation["parameters"] if p.get("required")
    }
