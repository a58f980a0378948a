"""The delivery engine end to end: a published one-time campaign delivers to its audience through
real sinks (aiosmtpd, an HTTP receiver), driven by worker ticks on the frozen clock."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import threading
from collections.abc import Coroutine
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete, func, select
from typer.testing import CliRunner

from herald.campaigns import worker
from herald.campaigns.models import Campaign
from herald.cli import app as cli
from herald.clock import FrozenClock, utc
from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import remove_connector
from herald.delivery.engine import halting
from herald.delivery.engine.abandoned import ORPHANED
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.rank import rank_of
from herald.delivery.engine.resolve import FIRST_CHUNK
from herald.delivery.engine.run import AHEAD, BATCH, ROUNDS, delivery_id
from herald.delivery.engine.split import assign_variations
from herald.delivery.models import OutboxEntry
from herald.delivery.streaks import Streaks
from herald.personalization.models import CustomTemplate
from herald.personalization.resources import create_custom_template
from herald.services import Services
from herald.timefmt import rfc3339
from herald.wake import wake_here
from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import HOOK_SECRET, create_campaign, outbox_rows, push_connector, smtp_connector
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.factories import Tenant, add_connector, make_tenant

EMAIL: dict[str, Any] = {
    "channel": "EMAIL",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "crm@example.com",
    "basic_details": {
        "name": "Spring",
        "content_type": "TRANSACTIONAL",
        "user_attribute_identifier": "email",
    },
    "campaign_content": {
        "content": {
            "email": {
                "subject": "Hi {{UserAttribute['first_name'] | default('there')}}",
                "sender_name": "Shop",
                "from_address": "news@shop.example",
                "html_content": (
                    "<html><body><p>Hello {{UserAttribute['first_name'] | default('friend')}}</p>"
                    '<a href="https://shop.example/sale?ref=mail">Sale</a></body></html>'
                ),
            }
        }
    },
    "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "mail"},
    "segmentation_details": {"is_all_user_campaign": True, "send_campaign_to_opt_out_users": False},
    "scheduling_details": {"delivery_type": "ASAP"},
    "utm_params": {"utm_source": "herald", "utm_medium": "email"},
}

PUSH: dict[str, Any] = {
    "channel": "PUSH",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "crm@example.com",
    "basic_details": {"name": "Flash", "platforms": ["ANDROID", "IOS"]},
    "campaign_content": {
        "content": {
            "push": {
                "android": {
                    "template_type": "BASIC",
                    "basic_details": {
                        "title": "Hi {{UserAttribute['first_name'] | default('you')}}",
                        "message": "Sale now",
                        "default_click_action": "URL",
                        "default_click_action_value": "https://shop.example/app?x=1",
                    },
                },
                "ios": {
                    "template_type": "BASIC",
                    "basic_details": {"title": "Hi iOS", "message": "Sale now"},
                },
            }
        }
    },
    "segmentation_details": {"is_all_user_campaign": True},
    "scheduling_details": {"delivery_type": "ASAP"},
    "utm_params": {"utm_source": "herald", "utm_medium": "push"},
}


async def tick(app: FastAPI, tenant: Tenant, *, one_at_a_time: bool = False) -> int:
    """One tick of the test's worker (one per app: its connectors' error streaks, like a worker
    process's, last from tick to tick); `one_at_a_time` hands the connector one message at a time,
    so a test can hold the first message and know that no other one is on its way."""
    services: Services = app.state.herald
    settings = services.settings
    if one_at_a_time:
        settings = dataclasses.replace(settings, delivery_concurrency=1, delivery_smtp_connections=1)
    if not hasattr(app.state, "worker_streaks"):
        app.state.worker_streaks = Streaks()
    now = services.clock.now()
    streaks: Streaks = app.state.worker_streaks
    return await worker.run_tick(services.database, now, [tenant.workspace_id], settings, streaks=streaks)


async def publish(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> str:
    campaign_id = await create_campaign(client, tenant, copy.deepcopy(body))
    await h.publish(client, tenant, campaign_id)
    return campaign_id


async def stats(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str) -> dict[str, Any]:
    response = await client.get(f"/v5/campaigns/{campaign_id}/stats", headers=tenant.headers(campaigns=True))
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def status(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str) -> str:
    return str((await h.get(client, tenant, campaign_id))["status"])


class TestEmail:
    async def test_each_eligible_user_gets_one_personalized_mail(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "ana", "email": "ana@example.com", "first_name": "Ana"},
            {"customer_id": "bo", "email": "bo@example.com"},
            {"customer_id": "cy", "email": "cy@example.com", "first_name": "Cy", "email_opt_out": True},
            {"customer_id": "dee", "first_name": "Dee"},  # no e-mail address
        )
        campaign_id = await publish(client, workspace, EMAIL)
        assert await status(client, workspace, campaign_id) == "ACTIVE"
        assert smtp_server.received == []
        assert await tick(app, workspace) == 2  # ACTIVE → SENDING → SENT
        assert await status(client, workspace, campaign_id) == "SENT"
        mails = {mail.rcpt_tos[0]: mail for mail in smtp_server.received}
        assert sorted(mails) == ["ana@example.com", "bo@example.com"]
        assert len(smtp_server.received) == 2
        assert mails["ana@example.com"].message["Subject"] == "Hi Ana"
        assert mails["bo@example.com"].message["Subject"] == "Hi there"
        html = mails["ana@example.com"].html
        assert "Hello Ana" in html
        assert "https://shop.example/sale?ref=mail&amp;utm_source=herald&amp;utm_medium=email" in html
        rows = await outbox_rows(app, workspace)
        assert sorted((r.customer_id, r.status, r.is_test) for r in rows) == [
            ("ana", "SENT", False),
            ("bo", "SENT", False),
        ]
        # Another tick sends nothing again.
        assert await tick(app, workspace) == 0
        assert len(smtp_server.received) == 2
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["audience"], run["pending"], run["sent"], run["failed"]) == (
            "DONE",
            4,
            0,
            2,
            0,
        )
        assert run["suppressed"] == {
            "opted_out": 1,
            "unsubscribed": 0,
            "no_address": 1,
            "audience_limit": 0,
            "no_user": 0,
            "frequency_cap": 0,
            "dnd": 0,
            "minimum_delay": 0,
        }
        assert run["held_out"] == {"control_group": 0, "global_control": 0}

    async def test_an_address_named_twice_is_one_recipient(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # In both Cc and Bcc (in other cases), and the user's own address in Cc: one RCPT TO each,
        # or a plain receiver delivers the mail twice.
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        body = copy.deepcopy(EMAIL)
        email = body["campaign_content"]["content"]["email"]
        email["cc_ids"] = ["team@shop.example", "Ana@Example.com"]
        email["bcc_ids"] = ["TEAM@shop.example", "audit@shop.example"]
        await publish(client, workspace, body)
        await tick(app, workspace)
        [mail] = smtp_server.received
        assert mail.rcpt_tos == ["ana@example.com", "team@shop.example", "audit@shop.example"]

    async def test_text_shaped_as_encoded_words_goes_out_as_the_text_and_adds_no_header(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # Plain ASCII that reads as an RFC 2047 encoded word of "Hi\r\nReply-To: ...": assigned to
        # the header, the email package decoded it into header lines of the user's choosing.
        shaped = "=?utf-8?b?SGkNClJlcGx5LVRvOiBldmlsQGF0dGFja2VyLnRlc3QNClgtSW5qOiAx?="
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "eve", "email": "eve@example.com", "first_name": shaped},
        )
        body = copy.deepcopy(EMAIL)
        body["campaign_content"]["content"]["email"]["sender_name"] = "Shop =?utf-8?b?Qm9zcw==?="
        await publish(client, workspace, body)
        await tick(app, workspace)
        [mail] = smtp_server.received
        assert mail.rcpt_tos == ["eve@example.com"]
        assert mail.message["Reply-To"] is None
        assert mail.message["X-Inj"] is None
        assert mail.message["Bcc"] is None
        # The reader shows the text the outbox records, as it was rendered.
        assert str(mail.message["Subject"]) == f"Hi {shaped}"
        assert (
            mail.message["From"].addresses[0].display_name == "Shop =?utf-8?b?Qm9zcw==?="
        )  # not "Shop Boss"
        assert mail.message["From"].addresses[0].addr_spec == "news@shop.example"
        [row] = await outbox_rows(app, workspace)
        assert row.status == "SENT"

    async def test_an_address_that_reads_as_another_mailbox_fails_its_user_and_reaches_no_one(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # `me<victim@other.test>` holds one `@`, as the ingestion rule asks; read as a To header it
        # is a display name and another mailbox, which RCPT TO named.
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "ana", "email": "ana@example.com"},
            {"customer_id": "odd", "email": "me<victim@other.test>"},
            {"customer_id": "commented", "email": "a(note)@example.com"},
        )
        await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["ana@example.com"]]
        rows = {r.customer_id: r for r in await outbox_rows(app, workspace)}
        assert rows["ana"].status == "SENT"
        for customer_id, reads_as in (("odd", "victim@other.test"), ("commented", "a@example.com")):
            assert rows[customer_id].status == "FAILED"
            assert f"reads as another mailbox ('{reads_as}')" in (rows[customer_id].failure_reason or "")

    async def test_the_preview_text_is_the_personalized_preheader_of_each_mail(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "ana", "email": "ana@example.com", "first_name": "Ana"},
        )
        body = copy.deepcopy(EMAIL)
        body["campaign_content"]["content"]["email"]["preview_text"] = (
            "{{UserAttribute['first_name']}}, the sale ends tonight"
        )
        await publish(client, workspace, body)
        await tick(app, workspace)
        [mail] = smtp_server.received
        after_body = mail.html.split("<body>", 1)[1]
        assert after_body.startswith('<div style="display:none;')
        assert ">Ana, the sale ends tonight</div><p>Hello Ana</p>" in after_body
        assert not mail.text.startswith("Ana, the sale")

    async def test_a_render_failure_fails_that_user_only(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "small", "email": "s@example.com", "count": 3},
            {"customer_id": "huge", "email": "h@example.com", "count": 10**9},
        )
        body = copy.deepcopy(EMAIL)
        body["campaign_content"]["content"]["email"]["html_content"] = (
            "{% for i in range(user.count) %}x{% endfor %}"
        )
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["s@example.com"]]
        rows = {r.customer_id: r for r in await outbox_rows(app, workspace)}
        assert rows["small"].status == "SENT"
        assert rows["huge"].status == "FAILED"
        assert (rows["huge"].failure_reason or "").startswith("Personalization failed:")

    async def test_a_sender_no_longer_verified_when_sending_fails_its_users_unsent(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # Publishing checked the from_address; the administrator then replaced the connector with
        # one that may not send from it. Nothing goes out from an address the connector refuses.
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        campaign_id = await publish(client, workspace, EMAIL)
        services: Services = app.state.herald
        async with services.database.writer() as session:
            await remove_connector(session, workspace.workspace_id, "mail", force=True)
            await session.commit()
        await smtp_connector(app, workspace, smtp_server, senders=["@brand.example"])
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert smtp_server.received == []
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.failure_reason) == (
            "FAILED",
            "'news@shop.example' is not a verified sender of the connector (@brand.example).",
        )
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["failed"]) == (0, 1)

    async def test_content_that_can_no_longer_be_prepared_fails_its_users_with_the_reason(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # Publishing checks the custom template exists; one gone since (here: its rows deleted)
        # made every tick fail on the campaign, which stayed SENDING for good.
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        services: Services = app.state.herald
        async with services.database.writer() as session:
            await create_custom_template(
                session,
                services.clock.now(),
                workspace.workspace_id,
                "welcome",
                "EMAIL",
                {"html_content": "<p>Hi</p>"},
            )
            await session.commit()
        body = copy.deepcopy(EMAIL)
        email = body["campaign_content"]["content"]["email"]
        del email["html_content"]
        email["custom_template_id"] = "welcome"
        campaign_id = await publish(client, workspace, body)
        async with services.database.writer() as session:
            await session.execute(delete(CustomTemplate))
            await session.commit()
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert smtp_server.received == []
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["failed"]) == (0, 1)

    async def test_an_address_the_smtp_client_cannot_name_fails_its_user_and_the_rest_go_on(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        # Publishing refuses a from_address that is not an address; one stored before that check
        # made the SMTP client raise on every tick (the campaign never left SENDING).
        await smtp_connector(app, workspace, smtp_server)
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        campaign_id = await publish(client, workspace, EMAIL)
        services: Services = app.state.herald
        async with services.database.writer() as session:
            row = await session.scalar(select(Campaign).where(Campaign.campaign_id == campaign_id))
            assert row is not None
            components = copy.deepcopy(row.components)
            components["campaign_content"]["content"]["email"]["from_address"] = "not an address"
            row.components = components
            await session.commit()
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert smtp_server.received == []
        [row_sent] = await outbox_rows(app, workspace)
        assert row_sent.status == "FAILED"
        assert "cannot be sent" in (row_sent.failure_reason or "")

    async def test_the_control_group_is_held_out(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        users = [{"customer_id": f"u{i:02d}", "email": f"u{i:02d}@example.com"} for i in range(20)]
        await add_users(app, workspace.workspace_id, *users)
        body = copy.deepcopy(EMAIL)
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 25,
        }
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert len(smtp_server.received) == 15
        assert len({mail.rcpt_tos[0] for mail in smtp_server.received}) == 15
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["held_out"], run["sent"]) == (
            20,
            {"control_group": 5, "global_control": 0},
            15,
        )

    async def test_manual_variations_split_what_the_control_group_leaves_exactly(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        users = [{"customer_id": f"u{i:03d}", "email": f"u{i:03d}@example.com"} for i in range(200)]
        await add_users(app, workspace.workspace_id, *users)
        body = copy.deepcopy(EMAIL)
        email = body["campaign_content"]["content"]["email"]
        body["campaign_content"] = {
            "variation_details": {
                "distribution_type": "MANUAL",
                "no_of_variations": 2,
                "manual_distribution_percentage": {"variation_1": 30, "variation_2": 70},
            },
            "content": {
                "default": {
                    "variation_1": {"email": {**email, "subject": "A"}},
                    "variation_2": {"email": {**email, "subject": "B"}},
                }
            },
        }
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 10,
        }
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        subjects = [str(mail.message["Subject"]) for mail in smtp_server.received]
        assert (subjects.count("A"), subjects.count("B")) == (54, 126)  # 30 % and 70 % of 180
        # The engine's cut is the pure rule's: the same users get the same variation.
        held = {f"u{i:03d}" for i in range(200)} - {m.rcpt_tos[0].split("@")[0] for m in smtp_server.received}
        left = [f"u{i:03d}" for i in range(200) if f"u{i:03d}" not in held]
        expected = assign_variations(campaign_id, left, [("variation_1", 30.0), ("variation_2", 70.0)])
        got = {m.rcpt_tos[0].split("@")[0]: str(m.message["Subject"]) for m in smtp_server.received}
        assert got == {user: "A" if v == "variation_1" else "B" for user, v in expected.items()}

    async def test_the_audience_limit_caps_the_users_sent_to(
        self, app: FastAPI, client: httpx.AsyncClient, smtp_server: SmtpServer
    ) -> None:
        workspace = await make_tenant(
            app, features={"campaign_audience_limit": True}, rate_limits=OPEN_LIMITS
        )
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        users = [{"customer_id": f"u{i:02d}", "email": f"u{i:02d}@example.com"} for i in range(10)]
        await add_users(app, workspace.workspace_id, *users)
        body = copy.deepcopy(EMAIL)
        body["campaign_audience_limit"] = {
            "is_campaign_audience_limit_enabled": True,
            "metric": "SENT",
            "frequency": "TOTAL",
            "limit": 4,
        }
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert len(smtp_server.received) == 4
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["suppressed"]["audience_limit"]) == (4, 6)

    async def test_stats_of_an_unknown_campaign_are_404(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await client.get(
            "/v5/campaigns/0123456789abcdef01234567/stats", headers=workspace.headers(campaigns=True)
        )
        assert response.status_code == 404

    async def test_stats_refuse_an_unknown_query_parameter(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await client.get(
            "/v5/campaigns/0123456789abcdef01234567/stats?foo=1", headers=workspace.headers(campaigns=True)
        )
        assert response.status_code == 400
        assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [
            ("UNKNOWN_FIELD", "foo")
        ]


class TestCommandLine:
    """`herald campaigns stats` shows the API's figures; `herald outbox list --campaign` narrows."""

    async def test_stats_and_outbox_of_a_sent_campaign(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        monkeypatch: pytest.MonkeyPatch,
        database_url: str,
    ) -> None:
        monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
        monkeypatch.delenv("HERALD_REDIS_URL", raising=False)
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        users = [{"customer_id": f"u{i}", "email": f"u{i}@example.com"} for i in range(4)]
        await add_users(app, workspace.workspace_id, *users, {"customer_id": "x", "email_opt_out": True})
        body = copy.deepcopy(EMAIL)
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 25,
        }
        campaign_id = await publish(client, workspace, body)
        other_id = await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        ws = workspace.workspace_id

        shown = await _cli("campaigns", "stats", campaign_id, "-w", ws, "--json")
        assert json.loads(shown) == await stats(client, workspace, campaign_id)
        table = (await _cli("campaigns", "stats", campaign_id, "-w", ws)).splitlines()
        assert table[0] == f"campaign {campaign_id}  status SENT"
        figures = {line[:24].strip(): line[24:].split() for line in table[1:]}
        assert figures["status"] == ["DONE"]
        assert (figures["audience"], figures["held out: control_group"]) == (["5"], ["1"])
        assert (figures["suppressed: opted_out"], figures["sent"], figures["failed"]) == (["1"], ["3"], ["0"])
        unknown = await asyncio.to_thread(
            runner.invoke, cli, ["campaigns", "stats", "0123456789abcdef01234567", "-w", ws]
        )
        assert unknown.exit_code == 1
        assert "No campaign with this id" in unknown.output

        unknown = await asyncio.to_thread(
            runner.invoke, cli, ["outbox", "list", "-w", ws, "--campaign", "0123456789abcdef01234567"]
        )
        assert (unknown.exit_code, "has no campaign" in unknown.output) == (1, True), unknown.output
        listed = await _cli("outbox", "list", "-w", ws, "--campaign", campaign_id, "--json")
        rows = [json.loads(line) for line in listed.splitlines()]
        assert len(rows) == 3
        assert {row["campaign_id"] for row in rows} == {campaign_id}
        everything = await _cli("outbox", "list", "-w", ws, "--json")
        assert {json.loads(line)["campaign_id"] for line in everything.splitlines()} == {
            campaign_id,
            other_id,
        }
        newest = [json.loads(line)["id"] for line in everything.splitlines()]
        assert len(newest) == 7
        # Page by page with --before the last id shown: every row once, in the same order.
        pages: list[str] = []
        before: list[str] = []
        while True:
            page = await _cli("outbox", "list", "-w", ws, "--limit", "3", "--json", *before)
            ids = [json.loads(line)["id"] for line in page.splitlines()]
            if not ids:
                break
            pages += ids
            before = ["--before", ids[-1]]
        assert pages == newest
        sent = await _cli("outbox", "list", "-w", ws, "--status", "SENT", "--json")
        assert len(sent.splitlines()) == 7
        assert await _cli("outbox", "list", "-w", ws, "--status", "FAILED", "--json") == ""
        unknown_row = await asyncio.to_thread(
            runner.invoke, cli, ["outbox", "list", "-w", ws, "--before", "nosuchrow"]
        )
        assert unknown_row.exit_code == 1
        assert "no outbox row 'nosuchrow'" in unknown_row.output


runner = CliRunner()


async def _cli(*args: str) -> str:
    result = await asyncio.to_thread(runner.invoke, cli, list(args))
    assert result.exit_code == 0, result.output
    return str(result.output)


class TestPush:
    async def test_one_message_per_user_on_the_platform_of_its_token(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "a", "push_id": "tok-a", "first_name": "Ann", "platform": "ANDROID"},
            {"customer_id": "i", "push_id": "tok-i", "platform": "IOS"},
            {"customer_id": "w", "push_id": "tok-w", "platform": "WEB"},  # not a campaign platform
            {"customer_id": "n", "email": "n@example.com"},  # no push token
            {"customer_id": "o", "push_id": "tok-o", "push_opt_out": True, "platform": "ANDROID"},
        )
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        bodies = {r.json()["recipient"]["customer_id"]: r.json() for r in webhook.received}
        assert sorted(bodies) == ["a", "i"]
        ann = bodies["a"]
        assert ann["test"] is False
        assert ann["campaign_id"] == campaign_id
        assert (ann["platform"], ann["recipient"]["address"]) == ("ANDROID", "tok-a")
        assert ann["message"]["basic_details"]["title"] == "Hi Ann"
        url = ann["message"]["basic_details"]["default_click_action_value"]
        assert parse_qs(urlsplit(url).query) == {"x": ["1"], "utm_source": ["herald"], "utm_medium": ["push"]}
        assert bodies["i"]["platform"] == "IOS"
        ids = {r.customer_id: r.id for r in await outbox_rows(app, workspace)}
        assert ann["id"] == ids["a"]

    @pytest.mark.parametrize("platforms", [["IOS", "ANDROID"], ["ANDROID", "IOS"]])
    async def test_a_user_with_only_a_push_id_gets_the_campaigns_first_platform(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        platforms: list[str],
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, {"customer_id": "bare", "push_id": "tok-bare"})
        body = copy.deepcopy(PUSH)
        body["basic_details"]["platforms"] = platforms
        await publish(client, workspace, body)
        await tick(app, workspace)
        assert [r.json()["platform"] for r in webhook.received] == platforms[:1]

    async def test_a_platform_whose_content_cannot_be_rendered_fails_its_own_messages_only(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        body = copy.deepcopy(PUSH)
        body["campaign_content"]["content"]["push"]["ios"]["basic_details"]["message"] = (
            "{{ 100 // (UserAttribute['divisor'] | default(1)) }} left"
        )
        await push_connector(app, workspace, webhook)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "both", "push_id": "tok-a", "platform": "ANDROID", "divisor": 0},
            {"customer_id": "both", "push_id": "tok-i", "platform": "IOS"},
            {"customer_id": "droid", "push_id": "tok-d", "platform": "ANDROID", "divisor": 0},
            {"customer_id": "fine", "push_id": "tok-f", "platform": "IOS", "divisor": 4},
        )
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        arrived = sorted(
            (r.json()["recipient"]["customer_id"], r.json()["platform"]) for r in webhook.received
        )
        assert arrived == [("both", "ANDROID"), ("droid", "ANDROID"), ("fine", "IOS")]
        assert [
            r.json()["message"]["basic_details"]["message"]
            for r in webhook.received
            if r.json()["platform"] == "IOS"
        ] == ["25 left"]
        rows = {(r.customer_id, r.platform): r for r in await outbox_rows(app, workspace)}
        failed = rows[("both", "IOS")]
        assert failed.status == "FAILED"
        assert (failed.failure_reason or "").startswith(
            "Personalization failed: campaign_content.content.push.ios.basic_details.message:"
        )
        assert "android" not in (failed.failure_reason or "")
        assert {key: row.status for key, row in rows.items() if key != ("both", "IOS")} == {
            ("both", "ANDROID"): "SENT",
            ("droid", "ANDROID"): "SENT",
            ("fine", "IOS"): "SENT",
        }

    async def test_a_user_whose_platforms_fail_alike_is_counted_under_the_reason_once(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        # The stats' `failures` count users by reason: not under "reason; reason" apart.
        await push_connector(app, workspace, webhook)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "both", "push_id": "tok-a", "platform": "ANDROID"},
            {"customer_id": "both", "push_id": "tok-i", "platform": "IOS"},
            {"customer_id": "droid", "push_id": "tok-d", "platform": "ANDROID"},
        )
        webhook.status = 400
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert len(webhook.received) == 3
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["failed"]) == (0, 2)
        assert run["failures"] == [{"reason": "The webhook answered 400.", "users": 2}]

    async def test_button_urls_are_tagged_like_the_click_url(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        body = copy.deepcopy(PUSH)
        body["campaign_content"]["content"]["push"]["android"]["buttons"] = [
            {"title": "Shop", "click_action": "URL", "click_action_value": "https://shop.example/b?y=2#top"},
            {"title": "App", "click_action": "DEEPLINK", "click_action_value": "shop://sale"},
            {
                "title": "Tracked",
                "click_action": "URL",
                "click_action_value": "https://shop.example/?utm_source=own",
            },
        ]
        await push_connector(app, workspace, webhook)
        await add_users(
            app, workspace.workspace_id, {"customer_id": "a", "push_id": "tok-a", "platform": "ANDROID"}
        )
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        [message] = [r.json()["message"] for r in webhook.received]
        assert [button["click_action_value"] for button in message["buttons"]] == [
            "https://shop.example/b?y=2&utm_source=herald&utm_medium=push#top",
            "shop://sale",
            "https://shop.example/?utm_source=own&utm_medium=push",
        ]
        assert message["basic_details"]["default_click_action_value"] == (
            "https://shop.example/app?x=1&utm_source=herald&utm_medium=push"
        )


class _Gate:
    """A webhook receiver that holds each request until released (`hold`: only the first `hold`
    requests; those after them are answered at once)."""

    def __init__(self, hold: int | None = None) -> None:
        self.arrived = threading.Event()
        self.arrivals = threading.Semaphore(0)  # one release per request
        self.release = threading.Event()
        self.count = 0
        self.ids: list[str] = []  # the delivery id of each message, in arrival order
        self.bodies: list[dict[str, Any]] = []
        self.counting = threading.Lock()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                for item in body if isinstance(body, list) else [body]:  # a batch is an array
                    gate.ids.append(item["id"])
                    gate.bodies.append(item)
                with gate.counting:
                    gate.count += 1
                    held = hold is None or gate.count <= hold
                gate.arrived.set()
                gate.arrivals.release()
                if held:
                    gate.release.wait(30)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


async def _dies_with_its_first_message_in_flight(app: FastAPI, workspace: Tenant, gate: _Gate) -> None:
    """A worker's tick, handing over one message at a time, killed while the first one is held at
    the gate: what a worker that dies mid-send leaves behind."""
    running = asyncio.create_task(tick(app, workspace, one_at_a_time=True))
    assert await asyncio.to_thread(gate.arrived.wait, 30)
    # Killed once the batch claimed ahead is committed, as a process dies at any point: a task
    # cancelled inside that claim's PostgreSQL transaction left its connection to be torn down
    # under the next test steps (asyncpg: "unexpected connection_lost() call").
    services: Services = app.state.herald
    pending = select(func.count()).where(
        ExecutionUser.workspace_id == workspace.workspace_id, ExecutionUser.state == "PENDING"
    )
    for _ in range(300):  # a bound, not a timing: a run with nobody left to claim ahead goes on
        async with services.database.reader() as session:
            if not await session.scalar(pending):
                break
        await asyncio.sleep(0.01)
    for _ in range(100):  # and the rest of the turn it is in (its users' render) run out
        await asyncio.sleep(0)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


async def _publish_to_gate(
    app: FastAPI,
    client: httpx.AsyncClient,
    workspace: Tenant,
    gate: _Gate,
    body: dict[str, Any] = PUSH,
    *,
    users: int = 5,
    batch_size: int | None = None,
) -> str:
    """A push connector to `gate`, users with Android tokens, and a published campaign to them."""
    given = ConnectorInput(
        "push-gw",
        "CUSTOM_API",
        channel="push",
        url=gate.url,
        secret=HOOK_SECRET,
        timeout=30,
        batch_size=batch_size,
    )
    await add_connector(app, workspace, given)
    users_ = [{"customer_id": f"u{i}", "push_id": f"tok-{i}", "platform": "ANDROID"} for i in range(users)]
    await add_users(app, workspace.workspace_id, *users_)
    return await publish(client, workspace, body)


def _worker_tick(app: FastAPI, workspace: Tenant, concurrency: int = 2) -> Coroutine[Any, Any, int]:
    """A tick of a worker of its own (`concurrency` requests in flight) on the app's clock, as it
    moves: what each of several workers runs."""
    services: Services = app.state.herald
    settings = dataclasses.replace(services.settings, delivery_concurrency=concurrency)
    clock = services.clock
    return worker.run_tick(services.database, clock.now(), [workspace.workspace_id], settings, clock=clock)


def _lease(app: FastAPI) -> timedelta:
    services: Services = app.state.herald
    return timedelta(seconds=services.settings.delivery_lease_seconds)


async def _window_ahead_written(app: FastAPI, workspace: Tenant, handed: int) -> None:
    """Wait for the rows of the windows holding tickets, the one ahead of those on the wire
    included (a bound against hanging, not a timing)."""
    for _ in range(3000):
        if len(await outbox_rows(app, workspace)) == handed:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the window ahead of those on the wire was not written")


# A campaign whose windows are on the wire (`_windows_on_the_wire`): its users, and the messages
# whose rows are written then (the two windows on the wire and the one ahead of them).
_ON_THE_WIRE = (3 * (2 + AHEAD) * ROUNDS, (2 + AHEAD) * ROUNDS)


async def _windows_on_the_wire(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, gate: _Gate
) -> tuple[str, asyncio.Task[int]]:
    """A campaign published to `_ON_THE_WIRE` users through `gate`, its tick running with two
    lanes (one message per POST) until a request of each of its two windows is held by the gate
    and the window ahead of them is written: the campaign's id, and the running tick."""
    users, handed = _ON_THE_WIRE
    campaign_id = await _publish_to_gate(app, client, workspace, gate, users=users)
    services: Services = app.state.herald
    settings = dataclasses.replace(services.settings, delivery_concurrency=2)
    running = asyncio.create_task(
        worker.run_tick(services.database, services.clock.now(), [workspace.workspace_id], settings)
    )
    for _ in range(2):  # a request of each window on the wire, held by the receiver
        assert await asyncio.to_thread(gate.arrivals.acquire, True, 30)
    await _window_ahead_written(app, workspace, handed)
    return campaign_id, running


def _assert_halted(rows: list[OutboxEntry], arrived: list[str], written: int) -> None:
    """Of the `written` rows of the windows begun before a STOP, those of the messages that
    `arrived` at the receiver SENT, the others FAILED as never handed over, with no attempt."""
    assert len(rows) == written
    assert len(set(arrived)) == len(arrived)
    assert sorted(r.id for r in rows if r.status == "SENT") == sorted(arrived)
    halted = [r for r in rows if r.status != "SENT"]
    assert len(halted) == written - len(arrived)
    for row in halted:
        assert (row.status, row.attempts) == ("FAILED", 0)
        assert row.failure_reason == f"Not handed over: {halting.STOPPED}.", row.failure_reason


class TestStop:
    async def test_after_stop_no_new_message_is_handed_to_the_connector(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate)
            running = asyncio.create_task(tick(app, workspace, one_at_a_time=True))
            assert await asyncio.to_thread(gate.arrived.wait, 30)  # the first message is in flight
            assert await status(client, workspace, campaign_id) == "SENDING"
            stopped = await h.action(client, workspace, campaign_id, "STOP")
            assert stopped.status_code == 200, stopped.text
            gate.release.set()
            await running
            assert gate.count == 1
            assert await status(client, workspace, campaign_id) == "STOPPED"
            await tick(app, workspace)
            assert gate.count == 1
            rows = await outbox_rows(app, workspace)
            assert [(r.status, r.is_test) for r in rows] == [("SENT", False)]
        finally:
            gate.stop()

    async def test_stop_while_two_windows_are_on_the_wire_hands_over_nothing_more(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Two messages per request and two lanes: two windows of one request each go out side by
        # side (the second one's rows written while the first is on the wire, its lane being
        # free), and a third is written ahead of them (`AHEAD`), its request waiting for a lane.
        # After the STOP's answer, that request is not made (`engine.halting`): the two on the
        # wire are answered, nothing more goes out.
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, users=10, batch_size=2)
            services: Services = app.state.herald
            settings = dataclasses.replace(services.settings, delivery_concurrency=2)
            now = services.clock.now()
            running = asyncio.create_task(
                worker.run_tick(services.database, now, [workspace.workspace_id], settings)
            )
            for _ in range(2):  # both windows in flight, held by the receiver
                assert await asyncio.to_thread(gate.arrivals.acquire, True, 30)
            handed = 2 * (2 + AHEAD)  # messages whose rows are written: the windows holding tickets
            await _window_ahead_written(app, workspace, handed)
            stopped = await h.action(client, workspace, campaign_id, "STOP")
            assert stopped.status_code == 200, stopped.text
            gate.release.set()
            await running
            assert gate.count == 2  # the requests on the wire at the STOP, nothing after
            assert await status(client, workspace, campaign_id) == "STOPPED"
            await tick(app, workspace)
            assert gate.count == 2
            _assert_halted(await outbox_rows(app, workspace), gate.ids, handed)
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["status"], run["sent"], run["pending"], run["unsent"]) == ("STOPPED", 4, 0, 6)
            assert run["progress"] == 100.0  # nobody is left to send to
        finally:
            gate.stop()

    async def test_stop_while_windows_of_single_posts_are_on_the_wire_hands_over_nothing_more(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # One message per POST and two lanes: each window holds `ROUNDS` messages on its one lane
        # (its share), two windows are on the wire and a third is written ahead of them. The STOP
        # answers after their rows; of their messages, only the two on the wire at its answer go
        # out (`engine.halting`).
        gate = _Gate()
        users, handed = _ON_THE_WIRE
        try:
            campaign_id, running = await _windows_on_the_wire(app, client, workspace, gate)
            assert gate.count == 2  # one request per window's lane, not one per message
            stopped = await h.action(client, workspace, campaign_id, "STOP")
            assert stopped.status_code == 200, stopped.text
            gate.release.set()
            await running
            assert gate.count == 2  # the requests on the wire at the STOP, nothing after
            await tick(app, workspace)
            assert gate.count == 2
            _assert_halted(await outbox_rows(app, workspace), gate.ids, handed)
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["status"], run["sent"], run["pending"], run["unsent"]) == (
                "STOPPED",
                2,
                0,
                users - 2,
            )
        finally:
            gate.stop()

    async def test_a_run_ended_while_its_windows_are_on_the_wire_leaves_no_row_waiting(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Another worker's tick ends the run (STOPPED) after the STOP, while this worker's windows
        # are still on the wire: their users are CLAIMED, so that tick leaves their rows alone. The
        # rows this worker then halts are settled by it, not left waiting for an attempt for ever.
        gate = _Gate()
        _, handed = _ON_THE_WIRE
        try:
            campaign_id, running = await _windows_on_the_wire(app, client, workspace, gate)
            stopped = await h.action(client, workspace, campaign_id, "STOP")
            assert stopped.status_code == 200, stopped.text
            await tick(app, workspace)  # the other worker: the run ends
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert run["status"] == "STOPPED"
            gate.release.set()
            await running
            assert gate.count == 2
            _assert_halted(await outbox_rows(app, workspace), gate.ids, handed)
        finally:
            gate.stop()

    async def test_a_connector_removed_while_its_campaign_sends_takes_no_message_after_it(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # `herald connectors remove --force` while windows are on the wire: those written before it
        # go out, no message is handed to the removed connector after it, and the users left fail
        # with the reason (the README: "their remaining messages then fail").
        gate = _Gate()
        users, handed = _ON_THE_WIRE
        try:
            campaign_id, running = await _windows_on_the_wire(app, client, workspace, gate)
            async with app.state.herald.database.writer() as session:
                forced = await remove_connector(session, workspace.workspace_id, "push-gw", force=True)
                await session.commit()
            assert [using.campaign_id for using in forced] == [campaign_id]
            gate.release.set()
            await running
            assert gate.count == handed
            await tick(app, workspace)
            assert gate.count == handed
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["sent"], run["failed"], run["pending"]) == (handed, users - handed, 0)
            failed = [r for r in await outbox_rows(app, workspace) if r.status == "FAILED"]
            assert len(failed) == users - handed
            assert all("push connector" in (r.failure_reason or "") for r in failed), failed[0].failure_reason
        finally:
            gate.stop()

    async def test_a_batch_sent_slower_than_the_lease_is_renewed_and_never_taken_over(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # A slow receiver: worker A's batch is still going out when its claim is older than the
        # lease. A renews its claim before a window once it is a third of the lease old, so a worker
        # B ticking past the first claim's lease finds nothing to take over, and every message goes
        # out once (taken over, the users not yet sent went out from both workers).
        gate = _Gate()
        users = 12  # one batch of six windows of one request of two messages
        try:
            await _publish_to_gate(app, client, workspace, gate, users=users, batch_size=2)
            services: Services = app.state.herald
            clock = services.clock
            assert isinstance(clock, FrozenClock)
            lease = _lease(app)
            claimed_at = clock.now()
            a = asyncio.create_task(_worker_tick(app, workspace))
            for _ in range(2):  # A's first two windows on the wire, held
                assert await asyncio.to_thread(gate.arrivals.acquire, True, 30)
            renewed_at = clock.advance(lease / 2)
            gate.release.set()  # those two answer; the windows after them are held again
            gate.release.clear()
            for _ in range(3000):  # a bound against hanging, not a timing
                async with services.database.reader() as session:
                    held = await session.scalar(
                        select(func.count()).where(
                            ExecutionUser.workspace_id == workspace.workspace_id,
                            ExecutionUser.state == "CLAIMED",
                            ExecutionUser.claimed_at == renewed_at,
                        )
                    )
                if held:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the claim was not renewed")
            clock.set(claimed_at + lease + timedelta(seconds=1))  # the first claim's lease is over
            await _worker_tick(app, workspace)
            assert gate.count <= 4  # B sent nothing (A: two windows answered, two held)
            gate.release.set()
            await a
            assert sorted(gate.ids) == sorted(set(gate.ids))
            assert len(gate.ids) == users
        finally:
            gate.stop()

    async def test_a_worker_whose_users_were_taken_over_leaves_their_outcomes_to_the_new_claim(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Worker A stalls with a window on the wire (its first request held) past its claim's
        # lease; worker B takes its users over, sends them and ends the run. A's window then
        # answers and halts its other requests (the run is over): A records the message it sent,
        # and nothing over B's outcomes. Before, A wrote B's users RETRY (and its reason onto their
        # SENT outbox rows) after the run had ended DONE: users waiting for ever.
        gate = _Gate(hold=1)
        # One window of users (two lanes, `ROUNDS` requests on each window's one): A claims no
        # batch ahead, which a claim made after the clock moved would leave to A alone.
        users = ROUNDS
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, users=users)
            services: Services = app.state.herald
            clock = services.clock
            assert isinstance(clock, FrozenClock)
            claimed_at = clock.now()
            a = asyncio.create_task(_worker_tick(app, workspace))
            assert await asyncio.to_thread(gate.arrivals.acquire, True, 30)  # A's first, held
            clock.set(claimed_at + _lease(app) + timedelta(seconds=1))  # A's claim's lease is over
            await _worker_tick(app, workspace)  # B
            await _worker_tick(app, workspace)  # B sent them all: its next tick ends the run
            assert await status(client, workspace, campaign_id) == "SENT"
            wake_here(workspace.workspace_id)  # A's watch reads the run again: over
            gate.release.set()
            await a
            assert set(gate.ids) == {row.id for row in await outbox_rows(app, workspace)}
            assert len(set(gate.ids)) == users  # one id a user, whoever sent it
            rows = await outbox_rows(app, workspace)
            assert [(row.status, row.failure_reason) for row in rows] == [("SENT", None)] * users
            async with services.database.reader() as session:
                mine = ExecutionUser.workspace_id == workspace.workspace_id
                states = (await session.scalars(select(ExecutionUser.state).where(mine))).all()
            assert states == ["SENT"] * users
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["status"], run["sent"], run["pending"]) == ("DONE", users, 0)
        finally:
            gate.stop()

    async def test_a_stop_during_the_first_chunk_leaves_the_whole_audience_on_record(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # More users than the first chunk written: the counts a publish does not wait for are taken
        # while the first chunk's messages go out, not when the second chunk is written (after them).
        gate = _Gate()
        users = FIRST_CHUNK + 200
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, users=users)
            running = asyncio.create_task(tick(app, workspace, one_at_a_time=True))
            assert await asyncio.to_thread(gate.arrived.wait, 30)  # the first message is held
            for _ in range(3000):  # a bound against hanging, not a timing
                [run] = (await stats(client, workspace, campaign_id))["executions"]
                if run["audience"] == users:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"only the first chunk is counted while it is sent: {run}")
            assert (run["pending"], run["sent"], run["unsent"]) == (users, 0, 0)
            stopped = await h.action(client, workspace, campaign_id, "STOP")
            assert stopped.status_code == 200, stopped.text
            gate.release.set()
            await running
            await tick(app, workspace)
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            figures = (run["status"], run["audience"], run["sent"], run["pending"], run["unsent"])
            assert figures == ("STOPPED", users, 1, 0, users - 1)
            assert gate.count == 1
        finally:
            gate.stop()


def _expiring_in_an_hour(clock: FrozenClock) -> dict[str, Any]:
    body = copy.deepcopy(PUSH)
    expiry = clock.now() + timedelta(hours=1)
    body["scheduling_details"] = {
        "delivery_type": "ASAP",
        "expiry_time": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return body


class TestChangesWhileSending:
    async def test_a_content_change_applies_to_the_messages_not_yet_handed_over(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate)
            running = asyncio.create_task(tick(app, workspace, one_at_a_time=True))
            assert await asyncio.to_thread(gate.arrived.wait, 30)  # the first message is in flight
            assert await status(client, workspace, campaign_id) == "SENDING"
            content = copy.deepcopy(PUSH["campaign_content"])
            content["content"]["push"]["android"]["basic_details"]["title"] = "Changed"
            changed = await client.patch(
                f"/v5/campaigns/{campaign_id}",
                json={"campaign_content": content, "updated_by": "crm@example.com"},
                headers=workspace.write_headers(campaigns=True),
            )
            assert changed.status_code == 200, changed.text
            gate.release.set()
            assert await running == 2  # ACTIVE → SENDING → SENT
            titles = [body["message"]["basic_details"]["title"] for body in gate.bodies]
            assert titles == ["Hi you", "Changed", "Changed", "Changed", "Changed"]
            assert await status(client, workspace, campaign_id) == "SENT"
        finally:
            gate.stop()

    async def test_a_content_change_reaches_the_windows_already_begun(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Two lanes: two windows on the wire and one written ahead of them (`AHEAD`), rendered with
        # the first content. After the change's answer none of their messages not yet handed over
        # goes out with it (`engine.halting`): each goes out once, with the new content.
        gate = _Gate()
        users, _ = _ON_THE_WIRE
        try:
            campaign_id, running = await _windows_on_the_wire(app, client, workspace, gate)
            content = copy.deepcopy(PUSH["campaign_content"])
            content["content"]["push"]["android"]["basic_details"]["title"] = "Changed"
            changed = await client.patch(
                f"/v5/campaigns/{campaign_id}",
                json={"campaign_content": content, "updated_by": "crm@example.com"},
                headers=workspace.write_headers(campaigns=True),
            )
            assert changed.status_code == 200, changed.text
            gate.release.set()
            await running
            titles = [body["message"]["basic_details"]["title"] for body in gate.bodies]
            assert titles == ["Hi you"] * 2 + ["Changed"] * (users - 2)
            assert len(set(gate.ids)) == len(gate.ids) == users
            rows = await outbox_rows(app, workspace)
            assert sorted(r.id for r in rows) == sorted(gate.ids)
            assert {(r.status, r.attempts) for r in rows} == {("SENT", 1)}
            # The record says what went out: the first content for the two sent before the change.
            title_of = {body["id"]: body["message"]["basic_details"]["title"] for body in gate.bodies}
            assert all(r.summary["title"] == title_of[r.id] for r in rows)
            assert await status(client, workspace, campaign_id) == "SENT"
        finally:
            gate.stop()

    async def test_expiry_time_ends_dispatch(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, _expiring_in_an_hour(clock))
            running = asyncio.create_task(tick(app, workspace, one_at_a_time=True))
            assert await asyncio.to_thread(gate.arrived.wait, 30)
            clock.advance(hours=2)
            await tick(app, workspace)  # another worker's tick: the campaign expired
            assert await status(client, workspace, campaign_id) == "SENT"
            gate.release.set()
            await running
            assert gate.count == 1  # nothing handed over after the expiry
            await tick(app, workspace)
            assert gate.count == 1
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["status"], run["sent"], run["pending"], run["unsent"]) == ("STOPPED", 1, 0, 4)
        finally:
            gate.stop()

    async def test_expiry_time_reached_during_a_send_ends_it_with_no_other_worker(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        # One worker alone (the embedded default): its tick began before the expiry, and the clock
        # it is given moves on while it sends; nobody else marks the campaign SENT.
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, _expiring_in_an_hour(clock))
            services: Services = app.state.herald
            settings = dataclasses.replace(services.settings, delivery_concurrency=1)
            running = asyncio.create_task(
                worker.run_tick(
                    services.database, clock.now(), [workspace.workspace_id], settings, clock=clock
                )
            )
            assert await asyncio.to_thread(gate.arrived.wait, 30)
            clock.advance(hours=2)
            gate.release.set()
            await running
            assert gate.count == 1  # the message in flight at the expiry, nothing after it
            assert await status(client, workspace, campaign_id) == "SENDING"  # until the next tick
            await tick(app, workspace)
            assert await status(client, workspace, campaign_id) == "SENT"
            assert gate.count == 1
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["status"], run["sent"], run["pending"], run["unsent"]) == ("STOPPED", 1, 0, 4)
        finally:
            gate.stop()


class TestLongSends:
    async def test_each_batch_is_claimed_and_sent_at_the_moment_it_is_claimed(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        # A send that outlasts the lease: its later batches carry the time they were claimed, so
        # another worker's tick does not take them over as abandoned while this one sends them
        # (and their messages the time they went out, which frequency caps count from). Claimed
        # at the tick's start, a batch claimed 4 minutes in was taken over 1 minute later.
        gate = _Gate()
        services: Services = app.state.herald
        # Claimed at the start, of the audience's first chunk (all of it on PostgreSQL, whose next
        # chunk is written once it is sent): the first batch (one window: one user, through one
        # lane), handed over at once, then the next batch, whose windows wait for the lane, and
        # the batch ahead of it; the last 50 users later.
        at_start = min(1 + 2 * BATCH[services.database.engine.dialect.name], FIRST_CHUNK)
        users = at_start + 50
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, users=users)
            settings = dataclasses.replace(services.settings, delivery_concurrency=1)
            start = clock.now()
            running = asyncio.create_task(
                worker.run_tick(services.database, start, [workspace.workspace_id], settings, clock=clock)
            )
            assert await asyncio.to_thread(gate.arrived.wait, 30)
            for _ in range(3000):  # those claimed at the start (a bound against hanging, not a timing)
                if sum((await _claimed_at(services, workspace)).values()) == at_start:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(
                    f"the batch ahead was not claimed: {await _claimed_at(services, workspace)}"
                )
            # Within the lease (5 minutes) of those batches, past it counted from the tick's start
            # once the next four minutes go by: what a long send's later batches are.
            later = clock.advance(minutes=4)
            gate.release.set()
            await running
            assert await status(client, workspace, campaign_id) == "SENT"
            # The first batches' claims, four minutes old by then (more than a third of the lease),
            # were renewed before their next window: every claim reads the later moment, but for
            # the message on the wire when the clock moved, whose answer may be recorded (its user
            # SENT, no longer claimed) before the next window renews the claims, and the window
            # written ahead of it (one lane: ROUNDS messages) when its rows went in before the
            # clock moved (a loaded machine: the test's advance came after that write).
            claims = await _claimed_at(services, workspace)
            assert claims.get(later, 0) + claims.get(start, 0) == users
            assert claims.get(start, 0) <= 1 + AHEAD * ROUNDS < at_start
            async with services.database.reader() as session:
                rows = await session.execute(
                    select(OutboxEntry.created_at, func.count())
                    .where(OutboxEntry.workspace_id == workspace.workspace_id)
                    .group_by(OutboxEntry.created_at)
                )
                sent_at = {utc(at): int(count) for at, count in rows.all()}
            assert sent_at == {start: at_start, later: 50}
            # The run began with the tick, and ended when its last user was settled.
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["started_at"], run["updated_at"]) == (rfc3339(start), rfc3339(later))
        finally:
            gate.stop()


async def _claimed_at(services: Services, tenant: Tenant) -> dict[datetime, int]:
    """How many of the workspace's execution users were claimed at each moment (never: absent)."""
    async with services.database.reader() as session:
        rows = await session.execute(
            select(ExecutionUser.claimed_at, func.count())
            .where(ExecutionUser.workspace_id == tenant.workspace_id, ExecutionUser.claimed_at.is_not(None))
            .group_by(ExecutionUser.claimed_at)
        )
        return {utc(at): int(count) for at, count in rows.all()}


class TestResume:
    async def test_a_worker_that_stopped_mid_send_is_resumed_and_repeats_only_under_the_same_id(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate)
            await _dies_with_its_first_message_in_flight(app, workspace, gate)
            gate.release.set()
            assert await tick(app, workspace) == 0  # the batch is still claimed by the dead worker
            assert gate.count == 1
            clock.advance(minutes=6)  # past the claim's lease
            assert await tick(app, workspace) == 1  # SENDING → SENT
            assert await status(client, workspace, campaign_id) == "SENT"
            # The message in flight when the worker died had an unknown outcome: it is sent again
            # under the same delivery id (the receiver drops the repeat by it); the others once.
            assert gate.count == 6
            assert gate.ids.count(gate.ids[0]) == 2
            assert len(set(gate.ids)) == 5
            rows = {r.customer_id: r for r in await outbox_rows(app, workspace)}
            assert len(rows) == 5
            assert all(r.status == "SENT" for r in rows.values())
            assert sorted(r.attempts for r in rows.values()) == [1, 1, 1, 1, 2]
            assert set(gate.ids) == {r.id for r in rows.values()}
        finally:
            gate.stop()

    async def test_ids_rise_with_the_users_rank_and_name_the_outbox_rows(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        """An execution's ids follow its send order (the users' rank): its outbox rows go to one
        place of the outbox's key index (migration 0028)."""
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, users=12)
            gate.release.set()
            await tick(app, workspace, one_at_a_time=True)  # handed over one by one, in order
            assert await status(client, workspace, campaign_id) == "SENT"
            rows = {r.id: r.customer_id for r in await outbox_rows(app, workspace)}
            assert sorted(gate.ids) == sorted(rows)
            assert gate.ids == sorted(gate.ids)
            by_rank = sorted(rows.values(), key=lambda customer_id: rank_of(campaign_id, customer_id))
            assert [rows[i] for i in gate.ids] == by_rank
        finally:
            gate.stop()

    async def test_an_execution_begun_before_ids_were_ordered_is_resumed_under_its_ids(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        clock: FrozenClock,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Begun by a version that hashed ids whole (its row's `ordered_ids` false after migration
        0028) and resumed by this one: the message in flight when its worker died is sent again
        under the id it went out with, and the rest under ids of the same kind."""
        starting = Execution.starting.__func__  # type: ignore[attr-defined]

        def as_before(cls: type[Execution], *args: Any, **more: Any) -> Execution:
            execution: Execution = starting(cls, *args, **more)
            execution.ordered_ids = False
            return execution

        gate = _Gate()
        try:
            with monkeypatch.context() as before:
                before.setattr(Execution, "starting", classmethod(as_before))
                campaign_id = await _publish_to_gate(app, client, workspace, gate)
                await _dies_with_its_first_message_in_flight(app, workspace, gate)
            gate.release.set()
            clock.advance(minutes=6)  # past the claim's lease
            assert await tick(app, workspace) == 1
            assert await status(client, workspace, campaign_id) == "SENT"
            async with app.state.herald.database.reader() as session:
                execution_id = await session.scalar(
                    select(Execution.id).where(Execution.campaign_id == campaign_id)
                )
            assert execution_id is not None
            hashed = {delivery_id(execution_id, f"u{i}", "ANDROID") for i in range(5)}
            assert gate.ids.count(gate.ids[0]) == 2
            assert set(gate.ids) == hashed
            assert {r.id for r in await outbox_rows(app, workspace)} == hashed
        finally:
            gate.stop()


class TestDeadWorkerAfterStop:
    async def test_a_dead_workers_message_of_a_stopped_campaign_is_settled_once_its_lease_passes(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        """A worker dies with a message on the wire, then the campaign is stopped: nobody takes
        over a stopped run's users, so the row would say PENDING for ever. Once the claim's lease
        has passed (a live worker would have renewed it), the row and its user are settled FAILED,
        the outcome unknown; nothing is sent again."""
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate)
            await _dies_with_its_first_message_in_flight(app, workspace, gate)
            stopped = await h.action(client, workspace, campaign_id, "STOP")
            assert stopped.status_code == 200, stopped.text
            gate.release.set()
            await tick(app, workspace)  # the run ends STOPPED; the claim is still within its lease
            [row] = await outbox_rows(app, workspace)
            assert row.status == "PENDING"
            # Its users are in the dead worker's hands, the one on the wire may have arrived:
            # pending until their end is recorded, not unsent (they were, then became failed).
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert run["status"] == "STOPPED"
            assert run["pending"] >= 1
            assert (run["sent"], run["pending"] + run["unsent"]) == (0, 5)
            assert run["progress"] < 100

            clock.advance(minutes=6)  # past the claim's lease
            await tick(app, workspace)
            [row] = await outbox_rows(app, workspace)
            assert row.status == "FAILED"
            assert row.failure_reason == f"{ORPHANED}."
            assert gate.count == 1  # nothing sent again
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["failed"], run["unsent"], run["pending"]) == (1, 4, 0)
            await tick(app, workspace)  # settled once: nothing left to find
            assert [r.status for r in await outbox_rows(app, workspace)] == ["FAILED"]
        finally:
            gate.stop()
