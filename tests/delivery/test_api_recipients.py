"""C8 identifier types: who each one reaches, unknown values, custom segments."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from tests.delivery.builders import (
    detail_targets,
    inline_email,
    inline_push,
    outbox_rows,
    push_connector,
    results,
    send_test,
    smtp_connector,
)
from tests.delivery.conftest import add_segment, add_users
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.delivery.test_engine_wake import _until
from tests.factories import Tenant

ANA = {
    "customer_id": "u-ana",
    "email": "ana@example.com",
    "mobile": "+34600000001",
    "gaid": "gaid-ana",
    "push_id": "tok-ana",
    "first_name": "Ana",
}
BEN = {
    "customer_id": "u-ben",
    "email": "ben@example.com",
    "mobile": "+34600000002",
    "gaid": "gaid-ben",
    "push_id": "tok-ben",
}


@pytest.fixture
async def people(app: FastAPI, workspace: Tenant) -> Tenant:
    await add_users(app, workspace.workspace_id, ANA, BEN)
    return workspace


class TestEmailIdentifiers:
    @pytest.mark.parametrize(
        ("identifier", "value"),
        [("EMAIL", "ana@example.com"), ("ID", "u-ana"), ("MOBILE_NUMBER", "+34600000001")],
    )
    async def test_each_identifier_reaches_the_users_address(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        people: Tenant,
        smtp_server: SmtpServer,
        identifier: str,
        value: str,
    ) -> None:
        await smtp_connector(app, people, smtp_server)
        results(await send_test(client, people, inline_email(identifier, value)))
        assert smtp_server.received[0].rcpt_tos == ["ana@example.com"]
        [row] = await outbox_rows(app, people)
        assert row.customer_id == "u-ana"

    async def test_unknown_ids_are_404_and_nothing_is_sent(
        self, app: FastAPI, client: httpx.AsyncClient, people: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, people, smtp_server)
        response = await send_test(client, people, inline_email("ID", "u-ana", "ghost", "u-ben", "nobody"))
        assert response.status_code == 404
        assert detail_targets(response) == {
            ("NOT_FOUND", "test_campaign_meta.identifier_values.1"),
            ("NOT_FOUND", "test_campaign_meta.identifier_values.3"),
        }
        assert smtp_server.received == []
        assert await outbox_rows(app, people) == []

    async def test_two_values_for_one_user_send_once(
        self, app: FastAPI, client: httpx.AsyncClient, people: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, people, smtp_server)
        results(await send_test(client, people, inline_email("ID", "u-ana", "u-ana")))
        assert len(smtp_server.received) == 1


class TestPushIdentifiers:
    @pytest.mark.parametrize(
        ("identifier", "value"),
        [
            ("USER_ATTRIBUTE_UNIQUE_ID", "u-ben"),
            ("USER_ATTRIBUTE_USER_EMAIL", "ben@example.com"),
            ("USER_ATTRIBUTE_USER_MOBILE", "+34600000002"),
            ("SVC_GAID", "gaid-ben"),
            ("ADVERTISING_IDENTIFIER", "gaid-ben"),
            ("PUSH_ID", "tok-ben"),
        ],
    )
    async def test_each_identifier_reaches_the_users_push_token(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        people: Tenant,
        webhook: HttpReceiver,
        identifier: str,
        value: str,
    ) -> None:
        await push_connector(app, people, webhook)
        body = inline_push(identifier, value)
        del body["campaign_content"]["content"]["push"]["ios"]
        assert results(await send_test(client, people, body)) == {
            "ANDROID_default_variation_1": {"status": "SENT"}
        }
        [request] = webhook.received
        assert request.json()["recipient"]["address"] == "tok-ben"
        assert request.json()["recipient"]["customer_id"] == "u-ben"

    async def test_the_sends_between_the_first_and_the_last_go_side_by_side(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        # In turn, a receiver taking a second an answer held a test of 100 sends for 100 seconds.
        # The first goes alone (its write claims the request's key) and so does the last (its
        # write records the answer): the two between are in flight at once.
        names = ["s1", "s2", "s3", "s4"]
        await add_users(
            app,
            workspace.workspace_id,
            *({"customer_id": name, "push_id": f"tok-{name}", "platform": "ANDROID"} for name in names),
        )
        await push_connector(app, workspace, webhook)
        body = inline_push("USER_ATTRIBUTE_UNIQUE_ID", *names)
        del body["campaign_content"]["content"]["push"]["ios"]
        webhook.hold()
        sending = asyncio.create_task(send_test(client, workspace, body))
        try:
            await _until(lambda: webhook.held == 1, "the first send, alone")
            webhook.release()
            webhook.hold()
            await _until(lambda: webhook.held == 2, "the two sends between, at once")
        finally:
            webhook.release()
            answer = await sending
        assert results(answer) == {"ANDROID_default_variation_1": {"status": "SENT"}}
        addresses = sorted(request.json()["recipient"]["address"] for request in webhook.received)
        assert addresses == [f"tok-{name}" for name in names]
        assert [row.status for row in await outbox_rows(app, workspace)] == ["SENT"] * 4

    @pytest.mark.parametrize("value", ["g3tok", "g3ios"])
    async def test_a_push_id_finds_the_user_by_any_of_its_tokens(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver, value: str
    ) -> None:
        # Ingested once per device: the IOS token became the user's push_id, and the ANDROID one,
        # which live campaigns still deliver to, named no user (404).
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "g3", "push_id": "g3tok", "platform": "ANDROID"},
            {"customer_id": "g3", "push_id": "g3ios", "platform": "IOS"},
        )
        await push_connector(app, workspace, webhook)
        sent = results(await send_test(client, workspace, inline_push("PUSH_ID", value)))
        assert set(sent) == {"ANDROID_default_variation_1", "IOS_default_variation_1"}
        addresses = {(r.json()["platform"], r.json()["recipient"]["address"]) for r in webhook.received}
        assert addresses == {("ANDROID", "g3tok"), ("IOS", "g3ios")}
        assert {r.json()["recipient"]["customer_id"] for r in webhook.received} == {"g3"}

    async def test_an_unknown_push_id_is_404(
        self, app: FastAPI, client: httpx.AsyncClient, people: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, people, webhook)
        response = await send_test(client, people, inline_push("PUSH_ID", "tok-unknown"))
        assert response.status_code == 404
        assert response.json()["error"]["target"] == "test_campaign_meta.identifier_values.0"
        assert webhook.received == []


class TestCustomSegments:
    async def test_a_segment_of_ten_members_is_sent_to_all(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        members = [f"m{n:02d}" for n in range(10)]
        await add_users(
            app, workspace.workspace_id, *({"customer_id": m, "email": f"{m}@example.com"} for m in members)
        )
        await add_segment(app, workspace.workspace_id, "beta testers", members)
        results(await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", "beta testers")))
        received = sorted(address for mail in smtp_server.received for address in mail.rcpt_tos)
        assert received == [f"{m}@example.com" for m in members]

    async def test_a_segment_larger_than_ten_is_refused_not_cut(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        members = [f"m{n:02d}" for n in range(15)]
        await add_users(
            app, workspace.workspace_id, *({"customer_id": m, "email": f"{m}@example.com"} for m in members)
        )
        await add_segment(app, workspace.workspace_id, "small", members[:2])
        await add_segment(app, workspace.workspace_id, "big", members)
        response = await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", "small", "big"))
        assert response.status_code == 400, response.text
        assert detail_targets(response) == {("OUT_OF_RANGE", "test_campaign_meta.identifier_values.1")}
        message = response.json()["error"]["details"][0]["message"]
        assert "'big' has 15 members" in message
        assert "at most 10 recipients" in message
        assert smtp_server.received == []
        assert await outbox_rows(app, workspace) == []

    async def test_segments_with_more_than_ten_members_in_all_are_refused(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        members = [f"m{n:02d}" for n in range(12)]
        await add_users(
            app, workspace.workspace_id, *({"customer_id": m, "email": f"{m}@example.com"} for m in members)
        )
        # 8 and 8 members, 4 of them in both: 12 recipients.
        await add_segment(app, workspace.workspace_id, "first", members[:8])
        await add_segment(app, workspace.workspace_id, "last", members[4:])
        response = await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", "first", "last"))
        assert response.status_code == 400, response.text
        assert detail_targets(response) == {("OUT_OF_RANGE", "test_campaign_meta.identifier_values")}
        assert "12 members in all" in response.text
        assert smtp_server.received == []

    async def test_segment_by_id_and_members_that_are_not_users(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(app, workspace.workspace_id, {"customer_id": "known", "email": "known@example.com"})
        segment_id = await add_segment(app, workspace.workspace_id, "mixed", ["known", "unknown"])
        data = results(await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", segment_id)))
        assert data["EMAIL_default_variation_1"] == {
            "status": "FAILED",
            "failure_reason": "1 of 2 recipients failed: unknown: Segment member 'unknown' is not a known user.",
        }
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["known@example.com"]]

    async def test_unknown_filter_based_and_empty_segments(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_segment(app, workspace.workspace_id, "by filter", [], kind="filter")
        await add_segment(app, workspace.workspace_id, "empty", [])
        unknown = await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", "no such segment"))
        assert unknown.status_code == 404
        unusable = await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", "by filter", "empty"))
        assert unusable.status_code == 422
        assert detail_targets(unusable) == {
            ("INVALID_ENUM_VALUE", "test_campaign_meta.identifier_values.0"),
            ("OUT_OF_RANGE", "test_campaign_meta.identifier_values.1"),
        }
        assert smtp_server.received == []

    async def test_another_workspaces_segment_is_unknown(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        other_tenant: Tenant,
        smtp_server: SmtpServer,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await add_users(app, other_tenant.workspace_id, {"customer_id": "x", "email": "x@example.com"})
        segment_id = await add_segment(app, other_tenant.workspace_id, "theirs", ["x"])
        for value in (segment_id, "theirs"):
            assert (
                await send_test(client, workspace, inline_email("CUSTOM_SEGMENT", value))
            ).status_code == 404
        assert smtp_server.received == []
