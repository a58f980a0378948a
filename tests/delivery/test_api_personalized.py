"""C8 personalized test sends: each recipient gets content rendered for them (contract §6)."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from tests.delivery.builders import (
    create_campaign,
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
from tests.factories import Tenant
from tests.personalization.helpers import add_resources

GREETING = "Hello {{ user.first_name | default('there') }}"
HTML = "<p>Hi {{ UserAttribute['first_name'] }}, your {{ event.product | default('order') }} ships soon.</p>"


def _personal_email(*values: str, identifier: str = "EMAIL", **extra: Any) -> dict[str, Any]:
    body = inline_email(identifier, *values, **extra)
    body["campaign_content"]["content"]["email"] |= {"subject": GREETING, "html_content": HTML}
    return body


class TestEmail:
    async def test_each_recipient_gets_their_own_content_and_unknown_addresses_none(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1", "email": "ana@example.com", "first_name": "Ana"},
            {"customer_id": "u2", "email": "bo@example.com", "first_name": "<Bo>"},
        )
        body = _personal_email("ana@example.com", "bo@example.com", "stranger@example.org")
        assert results(await send_test(client, workspace, body)) == {
            "EMAIL_default_variation_1": {"status": "SENT"}
        }
        mails = {mail.rcpt_tos[0]: mail for mail in smtp_server.received}
        assert mails["ana@example.com"].message["Subject"] == "Hello Ana"
        assert "<p>Hi Ana, your order ships soon.</p>" in mails["ana@example.com"].html
        # Values inserted into HTML are escaped.
        assert "<p>Hi &lt;Bo&gt;, your order ships soon.</p>" in mails["bo@example.com"].html
        # An address that is no user: unpersonalized (missing values render empty or their default).
        assert mails["stranger@example.org"].message["Subject"] == "Hello there"
        assert "<p>Hi , your order ships soon.</p>" in mails["stranger@example.org"].html
        subjects = sorted(row.summary["subject"] for row in await outbox_rows(app, workspace))
        assert subjects == ["Hello <Bo>", "Hello Ana", "Hello there"]

    async def test_personalization_details_override_the_profile(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1", "email": "ana@example.com", "first_name": "Ana"},
        )
        details = {"user_attributes": {"first_name": "Zoe"}, "event_attributes": {"product": "bike"}}
        body = _personal_email("ana@example.com", "stranger@example.org", personalization_details=details)
        results(await send_test(client, workspace, body))
        for mail in smtp_server.received:
            assert mail.message["Subject"] == "Hello Zoe"
            assert "<p>Hi Zoe, your bike ships soon.</p>" in mail.html

    async def test_values_are_spelled_as_json_and_a_null_is_a_missing_value(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1", "email": "ana@example.com", "first_name": "Ana"},
        )
        details = {
            "user_attributes": {"first_name": None},
            "event_attributes": {"x": None, "y": [1, 2], "z": {"a": 1}, "flag": True},
        }
        body = _personal_email("ana@example.com", personalization_details=details)
        body["campaign_content"]["content"]["email"]["subject"] = (
            "[{{ user.first_name }}|{{ event.x }}|{{ event.y }}|{{ event.z }}|{{ event.flag }}]"
        )
        results(await send_test(client, workspace, body))
        assert smtp_server.received[0].message["Subject"] == '[||[1,2]|{"a":1}|true]'

    async def test_custom_template_is_filled_from_the_workspace(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_resources(
            app,
            workspace,
            templates={"welcome": ("EMAIL", {"html_content": "<h1>Welcome {{ user.first_name }}</h1>"})},
        )
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1", "email": "ana@example.com", "first_name": "Ana"},
        )
        body = inline_email("ID", "u1")
        email = body["campaign_content"]["content"]["email"]
        del email["html_content"]
        email["custom_template_id"] = "welcome"
        results(await send_test(client, workspace, body))
        assert "<h1>Welcome Ana</h1>" in smtp_server.received[0].html
        email["custom_template_id"] = "nope"
        response = await send_test(client, workspace, body)
        assert detail_targets(response) == {
            ("INVALID_TEMPLATE_ID", "campaign_content.content.email.custom_template_id")
        }

    async def test_a_subject_and_sender_the_custom_template_supplies_are_not_missing(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # As the preview shows (and the engine sends) it: the template fills what the message lacks.
        await smtp_connector(app, workspace, smtp_server)
        template = {
            "html_content": "<p>Hi {{ user.first_name }}</p>",
            "subject": "Tpl subj {{ user.first_name }}",
            "from_address": "tpl@shop.example",
        }
        await add_resources(app, workspace, templates={"tplmail": ("EMAIL", template)})
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1", "email": "ana@example.com", "first_name": "Ana"},
        )
        email = {"custom_template_id": "tplmail"}
        inline = inline_email("ID", "u1")
        inline["campaign_content"]["content"]["email"] = email
        assert results(await send_test(client, workspace, inline)) == {
            "EMAIL_default_variation_1": {"status": "SENT"}
        }
        draft = {
            "channel": "EMAIL",
            "campaign_delivery_type": "ONE_TIME",
            "created_by": "ana@example.com",
            "campaign_content": {"content": {"email": email}},
            "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "mail"},
        }
        draft_id = await create_campaign(client, workspace, draft)
        saved = {
            "draft_id": draft_id,
            "test_campaign_meta": {"identifier": "ID", "identifier_values": ["u1"]},
        }
        assert results(await send_test(client, workspace, saved)) == {
            "EMAIL_default_variation_1": {"status": "SENT"}
        }
        assert [mail.message["Subject"] for mail in smtp_server.received] == ["Tpl subj Ana"] * 2
        assert [mail.mail_from for mail in smtp_server.received] == ["tpl@shop.example"] * 2

    async def test_what_neither_the_message_nor_its_template_has_is_missing(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_resources(app, workspace, templates={"body": ("EMAIL", {"html_content": "<p>Hi</p>"})})
        body = inline_email("EMAIL", "a@example.com")
        body["campaign_content"]["content"]["email"] = {"custom_template_id": "body"}
        response = await send_test(client, workspace, body)
        assert response.status_code == 400
        assert detail_targets(response) == {
            ("REQUIRED_FIELD_MISSING", "campaign_content.content.email.subject"),
            ("REQUIRED_FIELD_MISSING", "campaign_content.content.email.from_address"),
        }
        assert smtp_server.received == []

    async def test_a_template_that_does_not_parse_is_400_inline(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        body = inline_email("EMAIL", "a@example.com")
        body["campaign_content"]["content"]["email"]["subject"] = "Hi {{ user.first_name "
        response = await send_test(client, workspace, body)
        assert response.status_code == 400
        assert detail_targets(response) == {("INVALID_TEMPLATE", "campaign_content.content.email.subject")}
        assert smtp_server.received == []

    async def test_a_saved_template_that_does_not_parse_is_422(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        draft = {
            "channel": "EMAIL",
            "campaign_delivery_type": "ONE_TIME",
            "created_by": "ana@example.com",
            "campaign_content": {
                "content": {
                    "email": {
                        **inline_email("EMAIL")["campaign_content"]["content"]["email"],
                        "html_content": "{% if %}",
                    }
                }
            },
            "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "mail"},
        }
        draft_id = await create_campaign(client, workspace, draft)
        body = {
            "draft_id": draft_id,
            "test_campaign_meta": {"identifier": "EMAIL", "identifier_values": ["a@example.com"]},
        }
        response = await send_test(client, workspace, body)
        assert response.status_code == 422
        assert detail_targets(response) == {
            ("INVALID_TEMPLATE", "campaign_content.content.email.html_content")
        }

    async def test_a_template_that_fails_for_one_recipient_fails_that_send_only(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "small", "email": "s@example.com", "count": 3},
            {"customer_id": "huge", "email": "h@example.com", "count": 10**9},
        )
        body = inline_email("ID", "small", "huge")
        body["campaign_content"]["content"]["email"]["html_content"] = (
            "{% for i in range(user.count) %}x{% endfor %}"
        )
        data = results(await send_test(client, workspace, body))
        reason = data["EMAIL_default_variation_1"]["failure_reason"]
        assert reason.startswith(
            "1 of 2 recipients failed: huge: Personalization failed: campaign_content.content.email.html_content:"
        )
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["s@example.com"]]
        assert "xxx" in smtp_server.received[0].html
        rows = await outbox_rows(app, workspace)
        assert [(row.customer_id, row.status) for row in rows] == [("small", "SENT"), ("huge", "FAILED")]


class TestPush:
    async def test_titles_are_rendered_per_recipient(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "u1", "push_id": "t1", "first_name": "Ana"},
            {"customer_id": "u2", "push_id": "t2"},
        )
        body = inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u1", "u2")
        del body["campaign_content"]["content"]["push"]["ios"]
        body["campaign_content"]["content"]["push"]["android"]["basic_details"]["title"] = GREETING
        results(await send_test(client, workspace, body))
        titles = {
            r.json()["recipient"]["customer_id"]: r.json()["message"]["basic_details"]["title"]
            for r in webhook.received
        }
        assert titles == {"u1": "Hello Ana", "u2": "Hello there"}

    async def test_a_title_and_message_the_custom_template_supplies_are_not_missing(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_resources(
            app,
            workspace,
            templates={
                "promo": ("PUSH", {"basic_details": {"title": "Hi {{ user.first_name }}", "message": "m"}})
            },
        )
        await add_users(
            app, workspace.workspace_id, {"customer_id": "u1", "push_id": "t1", "first_name": "Ana"}
        )
        body = inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u1")
        del body["campaign_content"]["content"]["push"]["ios"]
        body["campaign_content"]["content"]["push"]["android"] = {
            "template_type": "BASIC",
            "custom_template_id": "promo",
        }
        results(await send_test(client, workspace, body))
        assert [r.json()["message"]["basic_details"]["title"] for r in webhook.received] == ["Hi Ana"]
