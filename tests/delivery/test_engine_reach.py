"""Who a live send reaches, through the HTTP API and real sinks: one push message per platform the
user has a token for (tokens from the ingestion API), the campaign's push `advanced` settings in
every message (live and test), PROMOTIONAL e-mail respecting the subscription category, and C7's
reachability counting the users the engine materialises."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from herald.clock import FrozenClock
from herald.timefmt import rfc3339
from tests.delivery.builders import create_campaign, meta, push_connector, results, send_test, smtp_connector
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.delivery.test_engine_send import EMAIL, PUSH, publish, stats, status, tick
from tests.factories import Tenant

ADVANCED: dict[str, Any] = {
    "expiration_settings": {"expire_notification_after_value": 2, "expire_notification_after_type": "DAY"},
    "platform_level_priority": {
        "android_specific_priority": {"send_with_priority": True},
        "ios_specific_priority": {"apns_priority": "10", "interruption_level": "TIME_SENSITIVE"},
    },
}


async def ingest(client: httpx.AsyncClient, tenant: Tenant, customer_id: str, **attributes: Any) -> None:
    response = await client.post(
        f"/v1/customer/{tenant.workspace_id}",
        json={"type": "customer", "customer_id": customer_id, "attributes": attributes},
        headers=tenant.headers(),
    )
    assert response.status_code == 200, response.text


def by_slot(webhook: HttpReceiver) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.json()["recipient"]["customer_id"], r.json()["platform"]): r.json() for r in webhook.received}


class TestPushTokens:
    async def test_one_message_per_platform_the_user_has_a_token_for(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await ingest(client, workspace, "both", push_id="tok-and", platform="ANDROID", first_name="Bo")
        await ingest(client, workspace, "both", push_id="tok-ios", platform="ios")
        await ingest(client, workspace, "web", push_id="tok-web", platform="WEB")
        await ingest(client, workspace, "bare", push_id="tok-bare")  # no platform: the first one
        await ingest(client, workspace, "gone", push_id="tok-g", platform="ANDROID")
        await ingest(client, workspace, "gone", push_id=None)  # removes its tokens
        body = copy.deepcopy(PUSH)
        body["advanced"] = ADVANCED
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        sent = by_slot(webhook)
        assert {slot: b["recipient"]["address"] for slot, b in sent.items()} == {
            ("both", "ANDROID"): "tok-and",
            ("both", "IOS"): "tok-ios",
            ("bare", "ANDROID"): "tok-bare",
        }
        # A message's push_id is its platform's token too (the user's own is the one seen last).
        assert {slot: b["recipient"]["push_id"] for slot, b in sent.items()} == {
            ("both", "ANDROID"): "tok-and",
            ("both", "IOS"): "tok-ios",
            ("bare", "ANDROID"): "tok-bare",
        }
        assert sent[("both", "ANDROID")]["message"]["basic_details"]["title"] == "Hi Bo"
        assert len({b["id"] for b in sent.values()}) == 3  # a delivery id per (user, platform)
        expires = rfc3339(clock.now() + timedelta(days=2))
        assert sent[("both", "ANDROID")]["advanced"] == {
            "expiration_settings": ADVANCED["expiration_settings"],
            "expires_at": expires,
            "priority": {"send_with_priority": True},
        }
        assert sent[("both", "IOS")]["advanced"]["priority"] == {
            "apns_priority": "10",
            "interruption_level": "Time sensitive",
        }
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["sent"], run["suppressed"]["no_address"]) == (4, 2, 2)

    async def test_a_test_send_goes_to_each_platform_token_with_the_advanced_settings(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await ingest(client, workspace, "both", push_id="tok-and", platform="ANDROID")
        await ingest(client, workspace, "both", push_id="tok-ios", platform="IOS")
        await ingest(client, workspace, "droid", push_id="tok-d", platform="ANDROID")
        body = copy.deepcopy(PUSH)
        body["advanced"] = ADVANCED
        draft_id = await create_campaign(client, workspace, body)
        request = {
            "draft_id": draft_id,
            "test_campaign_meta": meta("USER_ATTRIBUTE_UNIQUE_ID", "both", "droid"),
        }
        data = results(await send_test(client, workspace, request))
        assert data["ANDROID_default_variation_1"] == {"status": "SENT"}
        assert data["IOS_default_variation_1"]["status"] == "FAILED"
        assert (
            "droid: User 'droid' has no IOS push token." in data["IOS_default_variation_1"]["failure_reason"]
        )
        sent = by_slot(webhook)
        assert {slot: b["recipient"]["address"] for slot, b in sent.items()} == {
            ("both", "ANDROID"): "tok-and",
            ("both", "IOS"): "tok-ios",
            ("droid", "ANDROID"): "tok-d",
        }
        assert all(b["test"] is True for b in sent.values())
        assert sent[("both", "IOS")]["advanced"]["priority"]["interruption_level"] == "Time sensitive"
        assert sent[("droid", "ANDROID")]["advanced"]["priority"] == {"send_with_priority": True}


class TestSubscriptionCategory:
    async def test_promotional_mail_skips_users_unsubscribed_from_its_category(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await ingest(client, workspace, "in", email="in@example.com")
        await ingest(client, workspace, "other", email="o@example.com", unsubscribed_categories=["offers"])
        await ingest(client, workspace, "out", email="out@example.com", unsubscribed_categories=["news", "x"])
        await ingest(client, workspace, "opted", email="op@example.com", email_opt_out=True)
        body = copy.deepcopy(EMAIL)
        body["basic_details"] |= {"content_type": "PROMOTIONAL", "subscription_category": "news"}
        body["segmentation_details"]["send_campaign_to_opt_out_users"] = True
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert sorted(m.rcpt_tos[0] for m in smtp_server.received) == [
            "in@example.com",
            "o@example.com",
            "op@example.com",  # the campaign is sent to opted-out users, not to unsubscribed ones
        ]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["sent"]) == (4, 3)
        assert (run["suppressed"]["unsubscribed"], run["suppressed"]["opted_out"]) == (1, 0)

    async def test_a_transactional_mail_ignores_the_category(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await ingest(client, workspace, "out", email="out@example.com", unsubscribed_categories=["news"])
        body = copy.deepcopy(EMAIL)
        body["basic_details"]["subscription_category"] = "news"
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert [m.rcpt_tos[0] for m in smtp_server.received] == ["out@example.com"]
        assert await status(client, workspace, campaign_id) == "SENT"


class TestReachability:
    async def test_c7_counts_the_users_the_engine_sends_to(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await ingest(client, workspace, "both", push_id="tok-and", platform="ANDROID")
        await ingest(client, workspace, "both", push_id="tok-ios", platform="IOS")
        await ingest(client, workspace, "bare", push_id="tok-bare")
        await ingest(client, workspace, "web", push_id="tok-web", platform="WEB")
        await ingest(client, workspace, "none", email="n@example.com")
        await ingest(client, workspace, "opted", push_id="tok-o", platform="IOS", push_opt_out=True)
        body = copy.deepcopy(PUSH)
        start = clock.now() + timedelta(days=1)
        body["scheduling_details"] = {
            "delivery_type": "AT_FIXED_TIME",
            "start_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "timezone": "UTC",
        }
        campaign_id = await publish(client, workspace, body)
        listed = await client.post(
            "/v5/campaigns/meta",
            json={"limit": 15, "page": 1, "campaign_fields": {"id": campaign_id}},
            headers=workspace.write_headers(campaigns=True),
        )
        assert listed.status_code == 200, listed.text
        [row] = listed.json()["data"]["campaigns"]
        assert row["reachability_details"]["count"] == 2  # "both" and "bare"
        clock.advance(days=1, minutes=1)
        await tick(app, workspace)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["audience"] - sum(run["suppressed"].values()) == row["reachability_details"]["count"]
        assert {c for c, _ in by_slot(webhook)} == {"both", "bare"}
        assert await status(client, workspace, campaign_id) == "SENT"


class TestTracking:
    async def test_utm_params_reach_every_link_of_a_live_mail(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await ingest(client, workspace, "ana", email="ana@example.com")
        body = copy.deepcopy(EMAIL)
        body["campaign_content"]["content"]["email"]["html_content"] = (
            '<p><a href="https://a.example/x?ref=1#top">one</a> <a class="b" href=\'http://b.example\'>two</a>'
            ' <a href="https://c.example/?utm_source=mine">three</a> <a href="mailto:x@example.com">mail</a>'
            ' <img src="https://cdn.example/i.png"></p>'
        )
        await publish(client, workspace, body)
        await tick(app, workspace)
        [mail] = smtp_server.received
        assert mail.html.strip() == (
            '<p><a href="https://a.example/x?ref=1&amp;utm_source=herald&amp;utm_medium=email#top">one</a>'
            " <a class=\"b\" href='http://b.example?utm_source=herald&amp;utm_medium=email'>two</a>"
            ' <a href="https://c.example/?utm_source=mine&amp;utm_medium=email">three</a>'
            ' <a href="mailto:x@example.com">mail</a> <img src="https://cdn.example/i.png"></p>'
        )
