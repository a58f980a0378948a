"""C8 on saved campaigns: one test per platform x locale x variation, narrowing, and tenancy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.delivery.models import Connector
from tests.delivery.builders import (
    CAMPAIGNS,
    EMAIL_CONTENT,
    HOOK_SECRET,
    create_campaign,
    detail_targets,
    inline_email,
    meta,
    outbox_rows,
    push_connector,
    results,
    send_test,
    smtp_connector,
)
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import SMTP_PASSWORD, HttpReceiver, SmtpServer, start_smtp
from tests.factories import Tenant, make_tenant

LOCALES = ("default", "es-ES")
VARIATIONS = ("variation_1", "variation_2")
SPLIT = {
    "distribution_type": "MANUAL",
    "no_of_variations": 2,
    "manual_distribution_percentage": {"variation_1": 50, "variation_2": 50},
}


def _push_draft(platforms: list[str] | None = None) -> dict[str, Any]:
    content = {
        locale: {
            variation: {
                "push": {
                    key: {
                        "template_type": "BASIC",
                        "basic_details": {"title": f"{key} {locale} {variation}", "message": "m"},
                    }
                    for key in ("android", "ios")
                }
            }
            for variation in VARIATIONS
        }
        for locale in LOCALES
    }
    return {
        "channel": "PUSH",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "ana@example.com",
        "basic_details": {"name": "Spring", "platforms": platforms or ["ANDROID", "IOS"]},
        "campaign_content": {"locales": ["es-ES"], "variation_details": SPLIT, "content": content},
    }


def _email_draft(connector: str = "mail") -> dict[str, Any]:
    content = {
        locale: {
            variation: {"email": {**EMAIL_CONTENT, "subject": f"{locale} {variation}"}}
            for variation in VARIATIONS
        }
        for locale in LOCALES
    }
    return {
        "channel": "EMAIL",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "ana@example.com",
        "campaign_content": {"locales": ["es-ES"], "variation_details": SPLIT, "content": content},
        "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": connector},
    }


def _draft_test(draft_id: str, identifier: str, *values: str, **narrowing: Any) -> dict[str, Any]:
    return {"draft_id": draft_id, "test_campaign_meta": meta(identifier, *values, **narrowing)}


@pytest.fixture
async def push_ready(app: FastAPI, workspace: Tenant, webhook: HttpReceiver) -> Tenant:
    await push_connector(app, workspace, webhook)
    await add_users(app, workspace.workspace_id, {"customer_id": "u1", "push_id": "tok-1"})
    return workspace


class TestPushDraft:
    async def test_one_send_per_platform_locale_and_variation(
        self, client: httpx.AsyncClient, push_ready: Tenant, webhook: HttpReceiver
    ) -> None:
        draft_id = await create_campaign(client, push_ready, _push_draft())
        data = results(
            await send_test(client, push_ready, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1"))
        )
        expected = [f"{p}_{loc}_{var}" for loc in LOCALES for var in VARIATIONS for p in ("ANDROID", "IOS")]
        assert list(data) == expected
        assert all(value == {"status": "SENT"} for value in data.values())
        # Received in any order: the sends between the first and the last go side by side.
        titles = sorted(request.json()["message"]["basic_details"]["title"] for request in webhook.received)
        assert titles == sorted(
            f"{p} {loc} {var}" for loc in LOCALES for var in VARIATIONS for p in ("android", "ios")
        )
        assert {request.json()["campaign_id"] for request in webhook.received} == {draft_id}

    async def test_a_draft_with_utm_params_is_tested_with_its_links_tagged(
        self, client: httpx.AsyncClient, push_ready: Tenant, webhook: HttpReceiver
    ) -> None:
        # As the live send will tag them: a test shows the links a user will get.
        body = _push_draft(["ANDROID"])
        android = body["campaign_content"]["content"]["default"]["variation_1"]["push"]["android"]
        android["basic_details"]["default_click_action_value"] = "https://shop.example/sale?ref=push"
        body["utm_params"] = {"utm_source": "herald", "utm_medium": "push"}
        draft_id = await create_campaign(client, push_ready, body)
        test = _draft_test(
            draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1", locale_name="default", variation="variation_1"
        )
        assert results(await send_test(client, push_ready, test)) == {
            "ANDROID_default_variation_1": {"status": "SENT"}
        }
        [sent] = webhook.received
        assert sent.json()["message"]["basic_details"]["default_click_action_value"] == (
            "https://shop.example/sale?ref=push&utm_source=herald&utm_medium=push"
        )

    async def test_platforms_outside_basic_details_are_not_tested(
        self, client: httpx.AsyncClient, push_ready: Tenant
    ) -> None:
        draft_id = await create_campaign(client, push_ready, _push_draft(["IOS"]))
        data = results(
            await send_test(client, push_ready, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1"))
        )
        assert {key.split("_")[0] for key in data} == {"IOS"}

    @pytest.mark.parametrize(
        ("narrowing", "expected"),
        [
            ({"platform": "ANDROID"}, [f"ANDROID_{loc}_{var}" for loc in LOCALES for var in VARIATIONS]),
            (
                {"locale_name": "es-ES"},
                [f"{p}_es-ES_{var}" for var in VARIATIONS for p in ("ANDROID", "IOS")],
            ),
            (
                {"variation": "variation_2"},
                [f"{p}_{loc}_variation_2" for loc in LOCALES for p in ("ANDROID", "IOS")],
            ),
            ({"variation": 2}, [f"{p}_{loc}_variation_2" for loc in LOCALES for p in ("ANDROID", "IOS")]),
            ({"platform": "IOS", "locale_name": "es-ES", "variation": 1}, ["IOS_es-ES_variation_1"]),
        ],
    )
    async def test_narrowing(
        self,
        client: httpx.AsyncClient,
        push_ready: Tenant,
        webhook: HttpReceiver,
        narrowing: dict[str, Any],
        expected: list[str],
    ) -> None:
        draft_id = await create_campaign(client, push_ready, _push_draft())
        data = results(
            await send_test(
                client, push_ready, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1", **narrowing)
            )
        )
        assert list(data) == expected
        assert len(webhook.received) == len(expected)

    async def test_narrowing_to_nothing_says_what_there_is(
        self, client: httpx.AsyncClient, push_ready: Tenant
    ) -> None:
        draft_id = await create_campaign(client, push_ready, _push_draft(["ANDROID"]))
        body = _draft_test(
            draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1", platform="WEB", locale_name="fr-FR", variation=3
        )
        response = await send_test(client, push_ready, body)
        assert response.status_code == 400
        assert detail_targets(response) == {
            ("INVALID_ENUM_VALUE", "test_campaign_meta.platform"),
            ("INVALID_ENUM_VALUE", "test_campaign_meta.locale_name"),
            ("INVALID_ENUM_VALUE", "test_campaign_meta.variation"),
        }
        assert "(it has: default, es-ES)" in response.text

    async def test_bad_variation_form(self, client: httpx.AsyncClient, push_ready: Tenant) -> None:
        body = _draft_test("0" * 24, "USER_ATTRIBUTE_UNIQUE_ID", "u1", variation="second")
        assert detail_targets(await send_test(client, push_ready, body)) == {
            ("INVALID_TYPE", "test_campaign_meta.variation")
        }

    async def test_a_draft_without_content_is_422(
        self, client: httpx.AsyncClient, push_ready: Tenant
    ) -> None:
        draft_id = await create_campaign(
            client,
            push_ready,
            {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "ana@example.com"},
        )
        response = await send_test(
            client, push_ready, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1")
        )
        assert response.status_code == 422
        assert detail_targets(response) == {("REQUIRED_FIELD_MISSING", "campaign_content")}

    async def test_incomplete_saved_content_is_422_at_the_draft_field(
        self, client: httpx.AsyncClient, push_ready: Tenant
    ) -> None:
        draft = _push_draft(["ANDROID"])
        del draft["campaign_content"]["content"]["es-ES"]["variation_2"]["push"]["android"]["basic_details"][
            "title"
        ]
        draft_id = await create_campaign(client, push_ready, draft)
        response = await send_test(
            client, push_ready, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1")
        )
        assert response.status_code == 422
        assert detail_targets(response) == {
            (
                "REQUIRED_FIELD_MISSING",
                "campaign_content.content.es-ES.variation_2.push.android.basic_details.title",
            )
        }
        # Narrowed away from the incomplete message, the rest can be tested.
        body = _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1", locale_name="default")
        assert len(results(await send_test(client, push_ready, body))) == 2


class TestModes:
    async def test_content_with_draft_id_is_400(self, client: httpx.AsyncClient, push_ready: Tenant) -> None:
        body = {
            **_draft_test("0" * 24, "USER_ATTRIBUTE_UNIQUE_ID", "u1"),
            "campaign_content": {"content": {}},
            "basic_details": {},
        }
        assert detail_targets(await send_test(client, push_ready, body)) == {
            ("MUTUALLY_EXCLUSIVE", "campaign_content"),
            ("MUTUALLY_EXCLUSIVE", "basic_details"),
        }

    async def test_channel_may_be_sent_if_it_matches(
        self, client: httpx.AsyncClient, push_ready: Tenant
    ) -> None:
        draft_id = await create_campaign(client, push_ready, _push_draft())
        body = {
            **_draft_test(
                draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1", platform="IOS", locale_name="default", variation=1
            ),
            "channel": "PUSH",
        }
        assert results(await send_test(client, push_ready, body)) == {
            "IOS_default_variation_1": {"status": "SENT"}
        }
        body["channel"] = "EMAIL"
        assert ("INVALID_ENUM_VALUE", "channel") in detail_targets(await send_test(client, push_ready, body))

    @pytest.mark.parametrize("draft_id", ["0" * 24, "not-an-id"])
    async def test_unknown_draft_is_404(
        self, client: httpx.AsyncClient, push_ready: Tenant, draft_id: str
    ) -> None:
        response = await send_test(
            client, push_ready, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1")
        )
        assert response.status_code == 404
        assert response.json()["error"]["target"] == "draft_id"


class TestEmailDraft:
    async def test_saved_connector_and_keys(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        draft_id = await create_campaign(client, workspace, _email_draft())
        data = results(await send_test(client, workspace, _draft_test(draft_id, "EMAIL", "a@example.com")))
        assert list(data) == [f"EMAIL_{loc}_{var}" for loc in LOCALES for var in VARIATIONS]
        assert [mail.message["Subject"] for mail in smtp_server.received] == [
            f"{loc} {var}" for loc in LOCALES for var in VARIATIONS
        ]

    async def test_body_connector_overrides_the_saved_one_for_this_test(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, name="other")
        draft_id = await create_campaign(client, workspace, _email_draft("not-configured"))
        body = _draft_test(draft_id, "EMAIL", "a@example.com", locale_name="default", variation=1)
        response = await send_test(client, workspace, body)
        assert response.status_code == 422
        assert detail_targets(response) == {("INVALID_ENUM_VALUE", "connector.connector_name")}
        body["connector"] = {"connector_type": "CUSTOM_SMTP", "connector_name": "other"}
        assert results(await send_test(client, workspace, body)) == {
            "EMAIL_default_variation_1": {"status": "SENT"}
        }

    async def test_platform_narrows_push_only(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        draft_id = await create_campaign(client, workspace, _email_draft())
        response = await send_test(
            client, workspace, _draft_test(draft_id, "EMAIL", "a@example.com", platform="ANDROID")
        )
        assert response.status_code == 400
        assert response.json()["error"]["details"] == [
            {
                "code": "INVALID_ENUM_VALUE",
                "target": "test_campaign_meta.platform",
                "message": "platform narrows Push tests only.",
            }
        ]

    async def test_too_many_sends_must_be_narrowed(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        draft = _email_draft()
        locales = [f"l{n}" for n in range(30)]
        draft["campaign_content"]["locales"] = ["es-ES", *locales]
        for locale in locales:
            draft["campaign_content"]["content"][locale] = draft["campaign_content"]["content"]["default"]
        draft_id = await create_campaign(client, workspace, draft)
        values = [f"r{n}@example.com" for n in range(2)]
        response = await send_test(client, workspace, _draft_test(draft_id, "EMAIL", *values))
        assert detail_targets(response) == {("OUT_OF_RANGE", "test_campaign_meta")}
        assert smtp_server.received == []


class TestTenancy:
    async def test_another_workspace_cannot_test_my_draft(
        self, app: FastAPI, client: httpx.AsyncClient, push_ready: Tenant, webhook: HttpReceiver
    ) -> None:
        draft_id = await create_campaign(client, push_ready, _push_draft())
        stranger = await make_tenant(app, rate_limits=OPEN_LIMITS)
        await push_connector(app, stranger, webhook)
        await add_users(app, stranger.workspace_id, {"customer_id": "u1", "push_id": "tok-x"})
        response = await send_test(client, stranger, _draft_test(draft_id, "USER_ATTRIBUTE_UNIQUE_ID", "u1"))
        assert response.status_code == 404
        assert webhook.received == []
        assert await outbox_rows(app, stranger) == []

    async def test_another_workspaces_connectors_and_users_are_not_used(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
    ) -> None:
        other_server = start_smtp()
        try:
            stranger = await make_tenant(app, rate_limits=OPEN_LIMITS)
            await smtp_connector(app, stranger, other_server)  # same name "mail", other server
            await add_users(
                app, stranger.workspace_id, {"customer_id": "u1", "email": "stranger-user@example.com"}
            )
            body = inline_email("ID", "u1")
            # My workspace has neither the connector nor the user.
            assert detail_targets(await send_test(client, workspace, body)) == {
                ("INVALID_ENUM_VALUE", "connector.connector_name")
            }
            await smtp_connector(app, workspace, smtp_server)
            response = await send_test(client, workspace, body)
            assert response.status_code == 404
            await add_users(app, workspace.workspace_id, {"customer_id": "u1", "email": "mine@example.com"})
            results(await send_test(client, workspace, body))
            assert [mail.rcpt_tos for mail in smtp_server.received] == [["mine@example.com"]]
            assert other_server.received == []
            assert await outbox_rows(app, stranger) == []
        finally:
            other_server.controller.stop()


class TestSecrets:
    async def test_secrets_never_appear_in_answers_and_are_sealed_at_rest(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        webhook: HttpReceiver,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server)
        await push_connector(app, workspace, webhook)
        await add_users(
            app, workspace.workspace_id, {"customer_id": "u1", "email": "a@example.com", "push_id": "t"}
        )
        draft_id = await create_campaign(client, workspace, _email_draft())
        answers = [
            await send_test(client, workspace, _draft_test(draft_id, "ID", "u1")),
            await send_test(client, workspace, _draft_test(draft_id, "ID", "nobody")),
            await send_test(client, workspace, inline_email("EMAIL", "bad")),
            await client.get(f"{CAMPAIGNS}/{draft_id}", headers=workspace.headers(campaigns=True)),
            await client.post(f"{CAMPAIGNS}/{draft_id}/validate", headers=workspace.headers(campaigns=True)),
            await client.get("/openapi.json"),
        ]
        for answer in answers:
            assert SMTP_PASSWORD not in answer.text
            assert HOOK_SECRET not in answer.text
        async with app.state.herald.database.reader() as session:
            from sqlalchemy import select

            rows = (
                await session.scalars(
                    select(Connector).where(Connector.workspace_id == workspace.workspace_id)
                )
            ).all()
        stored = " ".join(f"{row.settings} {row.sealed_secrets}" for row in rows)
        assert SMTP_PASSWORD not in stored
        assert HOOK_SECRET not in stored
        assert all(row.sealed_secrets for row in rows)
