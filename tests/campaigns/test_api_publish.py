"""L1 (earlier-API update and publish) and versioning, through the HTTP API."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from herald.campaigns import review, worker
from herald.campaigns.models import Campaign
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import create_database
from herald.delivery import connectors as delivery_connectors
from herald.delivery.config import ConnectorInput
from herald.workspaces.scopes import Scope
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import ALL_FEATURES, PAYLOADS, variant
from tests.factories import Tenant, add_connector, add_key, make_tenant
from tests.personalization.helpers import add_resources

MINIMAL_PUSH = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "ana@example.com"}
ANDROID_TITLE = "campaign_content.content.push.android.basic_details.title"

# What each realistic payload becomes when published on 2026-01-15 (the frozen clock).
PUBLISHED_AS = {
    "push_one_time_android_ios": "SCHEDULED",  # AT_FIXED_TIME in 2030
    "push_periodic": "SCHEDULED",  # before its first run
    "push_event_triggered_delay": "SCHEDULED",  # starts listening in 2030
    "push_device_triggered": "ACTIVE",
    "push_location_triggered": "ACTIVE",
    "push_web": "SCHEDULED",
    "push_multi_locale_ab": "ACTIVE",  # ASAP
    "email_one_time_promotional": "SCHEDULED",
    "email_event_triggered": "ACTIVE",
    "email_business_event": "SCHEDULED",
    "email_periodic": "SCHEDULED",
    "push_broadcast_live_activity": "ACTIVE",
}


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


@pytest.fixture
async def flat(app: FastAPI) -> Tenant:
    """A workspace without versioning."""
    return await h.workspace(app, versioning=False)


class TestPublish:
    @pytest.mark.parametrize("name", sorted(PAYLOADS))
    async def test_a_valid_draft_goes_live(self, client: httpx.AsyncClient, ws: Tenant, name: str) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS[name])
        response = await h.v1_patch(client, ws, campaign_id)
        assert response.status_code == 204, response.text
        assert response.content == b""
        stored = await h.get(client, ws, campaign_id)
        assert stored["status"] == PUBLISHED_AS[name]
        assert stored["updated_by"] == h.PUBLISHER
        assert stored["version_number"] == 1

    @pytest.mark.parametrize(
        ("change", "target", "code"),
        [
            (
                {"content.email.custom_template_version": 9},
                "campaign_content.content.email.custom_template_id",
                "INVALID_TEMPLATE_ID",
            ),
            (
                {"content.email.custom_template_id": "no_such_template"},
                "campaign_content.content.email.custom_template_id",
                "INVALID_TEMPLATE_ID",
            ),
            (
                {"content.email.from_address": "not an address"},
                "campaign_content.content.email.from_address",
                "INVALID_TYPE",
            ),
            # The SMTP server refused the copy: every user's message failed, and the campaign
            # paused at the connector's error threshold.
            (
                {"content.email.cc_ids": ["cc@relay.test", "ops@localhost", "not an address"]},
                "campaign_content.content.email.cc_ids.2",
                "INVALID_TYPE",
            ),
            (
                {"content.email.bcc_ids": ["a\r\nBcc: x@y.example"]},
                "campaign_content.content.email.bcc_ids.0",
                "INVALID_TYPE",
            ),
            (
                {"content.email.reply_to_address": "x y"},
                "campaign_content.content.email.reply_to_address",
                "INVALID_TYPE",
            ),
        ],
    )
    async def test_content_the_engine_could_not_send_is_reported_and_refused(
        self, client: httpx.AsyncClient, ws: Tenant, change: dict[str, Any], target: str, code: str
    ) -> None:
        # Validate called these valid and the publish took them; the engine then failed on the
        # campaign at every tick (the test send and the preview refused the same content).
        body = {**PAYLOADS["email_event_triggered"]}
        body["campaign_content"] = variant(body["campaign_content"], change)
        campaign_id = await h.create(client, ws, body)
        validated = await client.post(
            f"/v5/campaigns/{campaign_id}/validate", json={}, headers=ws.headers(campaigns=True)
        )
        assert (target, code) in {(e["field"], e["code"]) for e in validated.json()["data"]["errors"]}
        response = await h.v1_patch(client, ws, campaign_id)
        assert response.status_code == 422, response.text
        assert (target, code) in {(d["target"], d["code"]) for d in response.json()["error"]["details"]}
        assert (await h.get(client, ws, campaign_id))["status"] == "DRAFT"

    async def test_copies_go_to_any_address_a_user_may_have(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # As a user's `email`: the operator's relay judges a sandbox or local domain, not Herald.
        body = {**PAYLOADS["email_event_triggered"]}
        body["campaign_content"] = variant(
            body["campaign_content"],
            {
                "content.email.cc_ids": ["cc@relay.test", "ops@localhost"],
                "content.email.reply_to_address": "help@relay.local",
            },
        )
        campaign_id = await h.create(client, ws, body)
        validated = await client.post(
            f"/v5/campaigns/{campaign_id}/validate", json={}, headers=ws.headers(campaigns=True)
        )
        assert validated.json()["data"]["errors"] == []

    async def test_a_subject_and_sender_the_custom_template_supplies_are_not_missing(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # The engine fills the message from its custom template before sending (as the preview
        # shows it): what the template has, the message need not repeat.
        await add_resources(
            app,
            ws,
            templates={
                "complete": (
                    "EMAIL",
                    {
                        "html_content": "<p>Hi {{ user.first_name }}</p>",
                        "subject": "Tpl subj {{ user.first_name }}",
                        "from_address": "news@example.com",
                    },
                ),
                "bodyonly": ("EMAIL", {"html_content": "<p>Hi</p>"}),
            },
        )
        body = copy.deepcopy(PAYLOADS["email_event_triggered"])
        body["campaign_content"] = {"content": {"email": {"custom_template_id": "complete"}}}
        complete = await h.create(client, ws, body)
        body["campaign_content"] = {"content": {"email": {"custom_template_id": "bodyonly"}}}
        lacking = await h.create(client, ws, body)

        validated = await client.post(
            f"/v5/campaigns/{complete}/validate", json={}, headers=ws.headers(campaigns=True)
        )
        assert validated.json()["data"]["errors"] == []
        assert validated.json()["data"]["valid"] is True
        validated = await client.post(
            f"/v5/campaigns/{lacking}/validate", json={}, headers=ws.headers(campaigns=True)
        )
        assert {(e["field"], e["code"]) for e in validated.json()["data"]["errors"]} == {
            ("campaign_content.content.email.subject", "REQUIRED_FIELD_MISSING"),
            ("campaign_content.content.email.from_address", "REQUIRED_FIELD_MISSING"),
        }
        assert (await h.v1_patch(client, ws, complete)).status_code == 204
        assert (await h.v1_patch(client, ws, lacking)).status_code == 422

    async def test_an_incomplete_draft_is_422_with_every_failure_and_stays_a_draft(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, MINIMAL_PUSH)
        before = await h.get(client, ws, campaign_id)
        response = await h.v1_patch(
            client, ws, campaign_id, {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        )
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "UNPROCESSABLE_ENTITY"
        targets = {detail["target"] for detail in error["details"]}
        assert {
            "basic_details.platforms",
            "campaign_content",
            "scheduling_details",
            "segmentation_details",
        } <= targets
        assert await h.get(client, ws, campaign_id) == before  # the components sent were not kept either

    async def test_publish_clears_the_rejection_comment(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        async with app.state.herald.database.writer() as session:
            await review.reject(
                session, ws.workspace_id, campaign_id, "Fix the copy", app.state.herald.clock.now()
            )
            await session.commit()
        assert [row.rejection_comment for row in await h.stored(app, ws, campaign_id)] == ["Fix the copy"]
        await h.publish(client, ws, campaign_id)
        assert [row.rejection_comment for row in await h.stored(app, ws, campaign_id)] == [None]

    @pytest.mark.parametrize("state", ["STOPPED", "SENT", "ARCHIVED"])
    async def test_a_finished_campaign_cannot_be_published(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, state: str
    ) -> None:
        [row_id] = await h.seed(app, ws, h.line(channel="PUSH", status=state))
        response = await h.v1_patch(client, ws, row_id)
        assert response.status_code == 422
        assert state in response.json()["error"]["message"]

    async def test_v5_update_cannot_publish(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        response = await client.patch(
            f"{h.BASE}/{campaign_id}", json={"status": "PUBLISH"}, headers=ws.write_headers(campaigns=True)
        )
        assert response.status_code == 400
        assert response.json()["error"]["details"][0] == {
            "code": "UNKNOWN_FIELD",
            "target": "status",
            "message": "'status' is not a recognised field here.",
        }
        assert (await h.get(client, ws, campaign_id))["status"] == "DRAFT"


class TestDeliverable:
    """Publish refuses what the delivery engine could not send, naming the field."""

    async def _refused(self, client: httpx.AsyncClient, tenant: Tenant, campaign_id: str) -> dict[str, Any]:
        response = await h.v1_patch(client, tenant, campaign_id)
        assert response.status_code == 422, response.text
        assert (await h.get(client, tenant, campaign_id))["status"] == "DRAFT"
        error: dict[str, Any] = response.json()["error"]
        return error

    async def test_an_email_campaign_whose_connector_was_removed_is_422(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["email_one_time_promotional"])
        async with app.state.herald.database.writer() as session:
            await delivery_connectors.remove_connector(session, ws.workspace_id, "marketing-api")
            await session.commit()
        error = await self._refused(client, ws, campaign_id)
        assert [(d["code"], d["target"]) for d in error["details"]] == [
            ("INVALID_ENUM_VALUE", "connector.connector_name")
        ]
        assert "marketing-api" in error["details"][0]["message"]

    async def test_a_push_campaign_without_a_push_connector_is_422(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        bare = await make_tenant(app, features=dict.fromkeys(ALL_FEATURES, True), rate_limits=h.OPEN_LIMITS)
        campaign_id = await h.create(client, bare, PAYLOADS["push_multi_locale_ab"])
        error = await self._refused(client, bare, campaign_id)
        assert [(d["code"], d["target"]) for d in error["details"]] == [
            ("REQUIRED_FIELD_MISSING", "connector")
        ]
        assert "herald connectors add" in error["details"][0]["message"]

    async def test_a_push_campaign_with_several_push_connectors_is_422(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        await add_connector(
            app, ws, ConnectorInput("push-b", "CUSTOM_API", channel="push", url="https://hooks.example.com/b")
        )
        campaign_id = await h.create(client, ws, PAYLOADS["push_multi_locale_ab"])
        error = await self._refused(client, ws, campaign_id)
        assert [d["target"] for d in error["details"]] == ["connector"]
        assert "push-b, push-gw" in error["details"][0]["message"]

    @pytest.mark.parametrize(
        ("filters", "target", "message"),
        [
            (
                [{"filter_type": "custom_segments", "name": "Ghost", "id": "0123456789abcdef01234567"}],
                "segmentation_details.included_filters.filters.0.id",
                "No custom segment with id '0123456789abcdef01234567' exists in this workspace.",
            ),
            # (An action in an action's attributes, once found here, is refused at the write:
            # test_api_drafts.TestFiltersRefusedAtTheWrite.)
        ],
    )
    async def test_an_audience_the_engine_cannot_evaluate_is_422_and_validate_says_so(
        self, client: httpx.AsyncClient, ws: Tenant, filters: list[dict[str, Any]], target: str, message: str
    ) -> None:
        # It passed validate and publish, and the campaign then went SENT at its start with its
        # execution FAILED ("The audience cannot be resolved"), sending nothing.
        body = copy.deepcopy(PAYLOADS["push_one_time_android_ios"])
        body["segmentation_details"] = {"included_filters": {"filter_operator": "and", "filters": filters}}
        campaign_id = await h.create(client, ws, body)
        validated = await client.post(f"{h.BASE}/{campaign_id}/validate", headers=ws.headers(campaigns=True))
        assert validated.json()["data"] == {
            "valid": False,
            "errors": [{"field": target, "issue": message, "code": "INVALID_ENUM_VALUE"}],
        }
        error = await self._refused(client, ws, campaign_id)
        assert [(d["target"], d["message"]) for d in error["details"]] == [(target, message)]

    async def test_a_trigger_naming_a_segment_that_does_not_exist_is_422(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        body = copy.deepcopy(PAYLOADS["push_event_triggered_delay"])
        ghost = {"filter_type": "custom_segments", "name": "Ghost", "id": "0123456789abcdef01234567"}
        body["trigger_condition"]["secondary_included_filters"] = {
            "filter_operator": "and",
            "filters": [ghost],
        }
        campaign_id = await h.create(client, ws, body)
        error = await self._refused(client, ws, campaign_id)
        assert [d["target"] for d in error["details"]] == [
            "trigger_condition.secondary_included_filters.filters.0.id"
        ]

    async def test_a_business_event_campaign_with_an_empty_audience_is_refused_as_a_one_time_one(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # A business event starts a run to the campaign's segment: with an empty one it was
        # published and reached nobody. Without one it goes to every user (contract C4 asks an
        # audience of the non-triggered types only).
        body = variant(PAYLOADS["email_business_event"], drop=("segmentation_details",))
        campaign_id = await h.create(client, ws, body)
        validated = await client.post(f"{h.BASE}/{campaign_id}/validate", headers=ws.headers(campaigns=True))
        assert validated.json()["data"] == {"valid": True, "errors": []}

        empty = {"segmentation_details": {}}
        target = "segmentation_details.included_filters"
        created = await client.post(h.BASE, json=body | empty, headers=ws.write_headers(campaigns=True))
        patched = await client.patch(
            f"{h.BASE}/{campaign_id}", json=empty, headers=ws.write_headers(campaigns=True)
        )
        for response in (created, patched):
            assert response.status_code == 400, response.text
            assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [
                ("REQUIRED_FIELD_MISSING", target)
            ]

    @pytest.mark.parametrize(
        "trigger",
        [
            {},
            {
                "included_filters": {
                    "filter_operator": "and",
                    "filters": [
                        {
                            "filter_type": "user_attributes",
                            "data_type": "string",
                            "name": "city",
                            "operator": "is",
                            "value": "Pune",
                            "project_name": "retail-app",
                        }
                    ],
                }
            },
        ],
        ids=["no-filter", "user-attributes-only"],
    )
    async def test_a_device_triggered_campaign_no_action_can_fire_is_422(
        self, client: httpx.AsyncClient, ws: Tenant, trigger: dict[str, Any]
    ) -> None:
        # Evaluated exactly as an event-triggered campaign: only an action done fires it, so this
        # one was published and never sent.
        body = variant(PAYLOADS["push_device_triggered"], {"trigger_condition": trigger})
        campaign_id = await h.create(client, ws, body)
        validated = await client.post(f"{h.BASE}/{campaign_id}/validate", headers=ws.headers(campaigns=True))
        expected = [("REQUIRED_FIELD_MISSING", "trigger_condition.included_filters")]
        assert [(e["code"], e["field"]) for e in validated.json()["data"]["errors"]] == expected
        error = await self._refused(client, ws, campaign_id)
        assert [(d["code"], d["target"]) for d in error["details"]] == expected

    async def test_validate_reports_the_same_problem(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        bare = await make_tenant(app, features=dict.fromkeys(ALL_FEATURES, True), rate_limits=h.OPEN_LIMITS)
        campaign_id = await h.create(client, bare, PAYLOADS["push_multi_locale_ab"])
        response = await client.post(f"{h.BASE}/{campaign_id}/validate", headers=bare.headers(campaigns=True))
        assert response.status_code == 200
        assert [e["field"] for e in response.json()["data"]["errors"]] == ["connector"]


class TestBodyAndAccess:
    async def test_component_update_without_publish_applies_like_c3(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, MINIMAL_PUSH)
        utm = {"utm_source": "a", "utm_medium": "b"}
        response = await h.v1_patch(client, ws, campaign_id, {"utm_params": utm}, publish=False)
        assert response.status_code == 204
        stored = await h.get(client, ws, campaign_id)
        assert stored["utm_params"] == utm
        assert stored["status"] == "DRAFT"

    async def test_components_follow_c3_rules(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        campaign_id = await h.create(client, ws, MINIMAL_PUSH)
        response = await h.v1_patch(
            client, ws, campaign_id, {"utm_params": {"utm_source": "a"}}, publish=False
        )
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["target"] == "utm_params.utm_medium"

    async def test_request_id_and_updated_by_are_required_and_status_is_publish_only(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, MINIMAL_PUSH)
        response = await client.patch(
            f"{h.V1}/{campaign_id}", json={"status": "ACTIVE"}, headers=ws.headers(campaigns=True)
        )
        assert response.status_code == 400
        details = {(d["code"], d["target"]) for d in response.json()["error"]["details"]}
        assert details == {
            ("REQUIRED_FIELD_MISSING", "request_id"),
            ("REQUIRED_FIELD_MISSING", "updated_by"),
            ("INVALID_ENUM_VALUE", "status"),
        }

    @pytest.mark.parametrize("channel", ["SMS", "WHATSAPP"])
    @pytest.mark.parametrize("publish", [True, False])
    @pytest.mark.parametrize(
        "body", [{}, {"utm_params": {"utm_source": "a", "utm_medium": "b"}}, {"basic_details": {"name": "x"}}]
    )
    async def test_an_imported_channel_v5_cannot_update_is_400_at_channel_alone(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        ws: Tenant,
        channel: str,
        publish: bool,
        body: dict[str, Any],
    ) -> None:
        # The merged components are not read as any channel's, and `status` is an L1 field.
        [row_id] = await h.seed(app, ws, h.line(channel=channel, status="DRAFT"))
        response = await h.v1_patch(client, ws, row_id, body, publish=publish)
        assert response.status_code == 400, response.text
        details = response.json()["error"]["details"]
        assert [(d["code"], d["target"]) for d in details] == [("INVALID_ENUM_VALUE", "channel")]

    async def test_publishing_needs_the_publish_scope(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        manager = await add_key(app, ws, [Scope.CAMPAIGNS_CREATE_MANAGE])
        refused = await h.v1_patch(client, manager, campaign_id)
        assert refused.status_code == 403
        assert refused.headers["content-type"].startswith("text/plain")
        assert json.loads(refused.text)["code"] == "ER007"
        assert (await h.get(client, ws, campaign_id))["status"] == "DRAFT"
        allowed = await h.v1_patch(
            client,
            manager,
            campaign_id,
            {"utm_params": {"utm_source": "a", "utm_medium": "b"}},
            publish=False,
        )
        assert allowed.status_code == 204
        viewer = await add_key(app, ws, [Scope.CAMPAIGNS_VIEW])
        assert (await h.v1_patch(client, viewer, campaign_id, publish=False)).status_code == 403

    async def test_app_key_header_is_required(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        campaign_id = await h.create(client, ws, MINIMAL_PUSH)
        response = await client.patch(
            f"{h.V1}/{campaign_id}", json={"request_id": "r", "updated_by": h.PUBLISHER}, headers=ws.headers()
        )
        assert response.status_code == 401

    async def test_another_workspace_and_unknown_ids_get_404(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        stranger = await h.workspace(app)
        for tenant, some_id in ((stranger, campaign_id), (ws, "0" * 24), (ws, "nope")):
            response = await h.v1_patch(client, tenant, some_id)
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "NOT_FOUND"
        assert (await h.get(client, ws, campaign_id))["status"] == "DRAFT"

    async def test_a_repeated_request_id_is_applied_once(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        first = await h.v1_patch(client, ws, campaign_id, request_id="publish-1")
        after_first = await client.get(f"{h.BASE}/{campaign_id}", headers=ws.headers(campaigns=True))
        again = await h.v1_patch(client, ws, campaign_id, request_id="publish-1")
        assert (first.status_code, again.status_code) == (204, 204)
        assert again.headers["Idempotent-Replayed"] == "true"
        after_again = await client.get(f"{h.BASE}/{campaign_id}", headers=ws.headers(campaigns=True))
        assert after_again.headers["ETag"] == after_first.headers["ETag"]  # not written twice
        other = await h.v1_patch(
            client,
            ws,
            campaign_id,
            {"utm_params": {"utm_source": "a", "utm_medium": "b"}},
            request_id="publish-1",
        )
        assert other.status_code == 409
        error = other.json()["error"]
        assert error["code"] == "IDEMPOTENCY_CONFLICT"
        # The key is the body's request_id (the client sent no Idempotency-Key header): named so.
        assert error["target"] == "request_id"
        assert error["message"] == "This request_id was used with a different request."

    async def test_a_repeated_update_is_applied_once_and_its_request_id_answers_first(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # Without `status` the update is written as C3 writes; the request_id's claim goes with
        # the read of the row, and still answers before the body's own checks (here: the scope a
        # publish needs).
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        editor = await add_key(app, ws, [Scope.CAMPAIGNS_CREATE_MANAGE])
        rename = {"basic_details": {"name": "Renamed once"}}
        first = await h.v1_patch(client, editor, campaign_id, rename, publish=False, request_id="edit-1")
        after_first = await client.get(f"{h.BASE}/{campaign_id}", headers=ws.headers(campaigns=True))
        again = await h.v1_patch(client, editor, campaign_id, rename, publish=False, request_id="edit-1")
        assert (first.status_code, again.status_code) == (204, 204)
        assert again.headers["Idempotent-Replayed"] == "true"
        after_again = await client.get(f"{h.BASE}/{campaign_id}", headers=ws.headers(campaigns=True))
        assert after_again.headers["ETag"] == after_first.headers["ETag"]  # not written twice
        assert after_again.json()["data"]["basic_details"]["name"] == "Renamed once"
        publishing = await h.v1_patch(client, editor, campaign_id, rename, request_id="edit-1")
        assert publishing.status_code == 409
        assert publishing.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
        refused = await h.v1_patch(client, editor, campaign_id, rename, request_id="edit-2")
        assert refused.status_code == 403  # a fresh request_id: the scope decides
        assert (await h.get(client, ws, campaign_id))["status"] == "DRAFT"


class TestVersioning:
    async def _live(
        self, client: httpx.AsyncClient, tenant: Tenant, name: str = "push_one_time_android_ios"
    ) -> str:
        campaign_id = await h.create(client, tenant, PAYLOADS[name])
        await h.publish(client, tenant, campaign_id)
        return campaign_id

    async def test_publishing_changes_to_a_live_campaign_makes_a_new_version(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws)
        v1 = await h.get(client, ws, campaign_id)
        content = variant(
            PAYLOADS["push_one_time_android_ios"]["campaign_content"],
            {"content.push.android.basic_details.title": "New title"},
        )
        await h.publish(client, ws, campaign_id, {"campaign_content": content})

        latest = await h.get(client, ws, campaign_id)
        assert latest["campaign_id"] == campaign_id
        assert latest["id"] != campaign_id
        assert latest["version_number"] == 2
        assert latest["status"] == "SCHEDULED"
        assert latest["campaign_content"] == content
        assert latest["created_at"] == v1["created_at"]
        # The first version is an immutable snapshot, still readable; the new one has an id of its own.
        assert await h.get(client, ws, f"{campaign_id}?version_number=1") == v1
        assert await h.get(client, ws, latest["id"]) == latest
        assert await h.get(client, ws, f"{campaign_id}?version_number=2") == latest
        missing = await client.get(
            f"{h.BASE}/{campaign_id}?version_number=3", headers=ws.headers(campaigns=True)
        )
        assert missing.status_code == 404
        bad = await client.get(f"{h.BASE}/{campaign_id}?version_number=0", headers=ws.headers(campaigns=True))
        assert bad.status_code == 400
        assert bad.json()["error"]["details"][0]["target"] == "version_number"
        # The latest version's own id (what C3 and C5 answer with) names the campaign too: a client
        # chaining calls on the id it was given was told it named an immutable snapshot.
        utm = {"utm_source": "a", "utm_medium": "b"}
        patch = await client.patch(
            f"{h.BASE}/{latest['id']}", json={"utm_params": utm}, headers=ws.write_headers(campaigns=True)
        )
        assert patch.status_code == 200, patch.text
        assert patch.json()["data"] == {"id": latest["id"]}
        assert (await h.get(client, ws, campaign_id))["utm_params"] == utm
        assert (await h.get(client, ws, f"{campaign_id}?version_number=1")) == v1
        # A write acts on the latest version: one addressed to another by a parameter is refused
        # (it was ignored, and the latest version changed).
        headers = ws.write_headers(campaigns=True)
        for refused in (
            await client.patch(
                f"{h.BASE}/{campaign_id}?version_number=1",
                json={"utm_params": {"utm_source": "x", "utm_medium": "y"}},
                headers=headers,
            ),
            await client.patch(
                f"{h.BASE}/{campaign_id}/status?version_number=1", json={"action": "STOP"}, headers=headers
            ),
        ):
            assert refused.status_code == 400, refused.text
            details = refused.json()["error"]["details"]
            assert [(d["code"], d["target"]) for d in details] == [("UNKNOWN_FIELD", "version_number")]
        assert (await h.get(client, ws, campaign_id))["utm_params"] == utm
        assert (await h.get(client, ws, campaign_id))["status"] == "SCHEDULED"
        rows = await h.stored(app, ws, campaign_id)
        assert [(row.version_number, row.is_latest) for row in rows] == [(1, False), (2, True)]

    async def test_old_versions_cannot_be_changed(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        campaign_id = await self._live(client, ws)
        content = variant(
            PAYLOADS["push_one_time_android_ios"]["campaign_content"],
            {"content.push.android.basic_details.title": "v2"},
        )
        await h.publish(client, ws, campaign_id, {"campaign_content": content})
        second = await h.get(client, ws, campaign_id)
        await h.publish(
            client,
            ws,
            campaign_id,
            {"campaign_content": variant(content, {"content.push.android.basic_details.title": "v3"})},
        )
        latest = await h.get(client, ws, campaign_id)
        assert latest["version_number"] == 3
        # campaign_id names the campaign (its latest version), and so does the latest version's own
        # id; an older version's own id names a snapshot.
        for write in (
            h.v1_patch(client, ws, second["id"]),
            h.action(client, ws, second["id"], "STOP"),
        ):
            response = await write
            assert response.status_code == 409, response.text
            assert "immutable snapshot" in response.json()["error"]["message"]
        stopped = await h.action(client, ws, latest["id"], "STOP")
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["data"] == {"id": latest["id"], "action": "STOP"}
        assert (await h.get(client, ws, campaign_id))["status"] == "STOPPED"
        snapshot = (await h.found(client, ws, campaign_fields={"ids": [campaign_id], "version_number": 1}))[0]
        assert snapshot["campaign_content"] == PAYLOADS["push_one_time_android_ios"]["campaign_content"]
        # Read-only, C4 checks a version by its own id, as C2 reads it (contract: always 200).
        validated = await client.post(
            f"/v5/campaigns/{latest['id']}/validate", headers=ws.headers(campaigns=True)
        )
        assert validated.status_code == 200, validated.text
        # And the delivery stats, which are the campaign's, whichever version each run sent.
        for some_id in (campaign_id, latest["id"]):
            found = await client.get(f"/v5/campaigns/{some_id}/stats", headers=ws.headers(campaigns=True))
            assert found.status_code == 200, found.text
            assert found.json()["data"]["campaign_id"] == campaign_id

    async def test_search_returns_each_version_and_filters_by_version_number(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws)
        for title in ("v2", "v3"):
            content = variant(
                PAYLOADS["push_one_time_android_ios"]["campaign_content"],
                {"content.push.android.basic_details.title": title},
            )
            await h.publish(client, ws, campaign_id, {"campaign_content": content})
        rows = await h.found(client, ws, campaign_fields={"ids": [campaign_id]})
        assert [row["version_number"] for row in rows] == [3, 2, 1]
        assert {row["campaign_id"] for row in rows} == {campaign_id}
        assert len({row["id"] for row in rows}) == 3
        only = await h.found(client, ws, campaign_fields={"version_number": 2})
        assert [(row["campaign_id"], row["version_number"]) for row in only] == [(campaign_id, 2)]

    async def test_status_actions_act_on_the_latest_version(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws)
        content = variant(
            PAYLOADS["push_one_time_android_ios"]["campaign_content"],
            {"content.push.android.basic_details.title": "v2"},
        )
        await h.publish(client, ws, campaign_id, {"campaign_content": content})
        response = await h.action(client, ws, campaign_id, "STOP")
        assert response.status_code == 200
        latest = await h.get(client, ws, campaign_id)
        assert response.json()["data"] == {"id": latest["id"], "action": "STOP"}
        assert latest["status"] == "STOPPED"
        [first] = await h.found(client, ws, campaign_fields={"ids": [campaign_id], "version_number": 1})
        # Its content is the snapshot's; its status the campaign's: a version left SCHEDULED was
        # found by a search for SCHEDULED campaigns after the campaign had stopped.
        assert first["status"] == "STOPPED"
        assert (
            await h.found(client, ws, campaign_fields={"ids": [campaign_id], "status": ["SCHEDULED"]}) == []
        )
        [second, first] = await h.found(
            client, ws, campaign_fields={"ids": [campaign_id], "status": ["STOPPED"]}
        )
        assert (second["version_number"], first["version_number"]) == (2, 1)

    async def test_earlier_versions_follow_the_campaign_through_the_clock(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        campaign_id = await self._live(client, ws, "push_event_triggered_delay")  # listens from 2030
        content = variant(
            PAYLOADS["push_event_triggered_delay"]["campaign_content"],
            {"content.push.android.basic_details.title": "v2"},
        )
        await h.publish(client, ws, campaign_id, {"campaign_content": content})
        clock.set(datetime(2030, 6, 1, tzinfo=UTC))
        await worker.tick(app.state.herald.database, clock.now(), [ws.workspace_id])
        assert (await h.get(client, ws, campaign_id))["status"] == "ACTIVE"
        [first] = await h.found(client, ws, campaign_fields={"ids": [campaign_id], "version_number": 1})
        assert first["status"] == "ACTIVE"
        rows = await h.meta_rows(client, ws, campaign_fields={"id": campaign_id, "status": ["SCHEDULED"]})
        assert rows == []

    async def test_publishing_without_changes_makes_no_version(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws)
        await h.publish(client, ws, campaign_id)
        assert [row.version_number for row in await h.stored(app, ws, campaign_id)] == [1]

    async def test_without_versioning_a_live_campaign_changes_in_place(
        self, app: FastAPI, client: httpx.AsyncClient, flat: Tenant
    ) -> None:
        campaign_id = await self._live(client, flat)
        content = variant(
            PAYLOADS["push_one_time_android_ios"]["campaign_content"],
            {"content.push.android.basic_details.title": "v2"},
        )
        await h.publish(client, flat, campaign_id, {"campaign_content": content})
        stored = await h.get(client, flat, campaign_id)
        assert stored["id"] == campaign_id
        assert "version_number" not in stored
        assert stored["campaign_content"] == content
        assert len(await h.stored(app, flat, campaign_id)) == 1

    async def test_a_live_change_that_breaks_publish_rules_is_422_and_changes_nothing(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws, "push_device_triggered")
        before = await h.get(client, ws, campaign_id)
        # L1 merges what is sent: a null removes the field.
        content = {"content": {"push": {"android": {"basic_details": {"title": None}}}}}
        response = await h.v1_patch(client, ws, campaign_id, {"campaign_content": content})
        assert response.status_code == 422
        assert ANDROID_TITLE in {d["target"] for d in response.json()["error"]["details"]}
        assert await h.get(client, ws, campaign_id) == before
        assert len(await h.stored(app, ws, campaign_id)) == 1

    @pytest.mark.parametrize(
        ("name", "cleared", "target"),
        [
            ("push_device_triggered", "campaign_content", "campaign_content"),
            # (An ACTIVE location campaign's geofences are locked outright: 409, test_api_drafts.)
            ("push_one_time_android_ios", "basic_details", "basic_details.platforms"),
        ],
    )
    async def test_a_live_campaign_keeps_the_components_publishing_needs(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, name: str, cleared: str, target: str
    ) -> None:
        # A null clears a component (C3 replaces it whole); a published campaign cannot lose one
        # it needs to be delivered, and nothing changes.
        campaign_id = await self._live(client, ws, name)
        before = await h.get(client, ws, campaign_id)
        response = await client.patch(
            f"/v5/campaigns/{campaign_id}",
            json={"updated_by": "m@example.com", cleared: None},
            headers=ws.write_headers(campaigns=True),
        )
        assert response.status_code == 400, response.text
        assert target in {d["target"] for d in response.json()["error"]["details"]}
        assert await h.get(client, ws, campaign_id) == before

    async def test_a_live_campaign_cannot_be_changed_into_one_publishing_refuses(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # Push content whose Android BASIC lacks its message passes as a draft's patch; on a live
        # campaign it was written, validate (C4) then called it unpublishable, and the start sent
        # every user a push without a message.
        campaign_id = await self._live(client, ws, "push_device_triggered")
        before = await h.get(client, ws, campaign_id)
        content = {
            "push": {"android": {"template_type": "BASIC", "basic_details": {"title": "Only a title"}}}
        }
        response = await client.patch(
            f"/v5/campaigns/{campaign_id}",
            json={"updated_by": "m@example.com", "campaign_content": {"content": content}},
            headers=ws.write_headers(campaigns=True),
        )
        assert response.status_code == 400, response.text
        [detail] = response.json()["error"]["details"]
        assert (detail["code"], detail["target"]) == (
            "REQUIRED_FIELD_MISSING",
            "campaign_content.content.push.android.basic_details.message",
        )
        assert await h.get(client, ws, campaign_id) == before

    @pytest.mark.parametrize("route", ["C3", "L1"])
    async def test_a_platform_added_without_its_message_is_refused_at_the_message(
        self, client: httpx.AsyncClient, ws: Tenant, route: str
    ) -> None:
        # A change of `basic_details` that leaves `campaign_content` unsendable: it used to be
        # written (only problems inside the components sent were looked at), and validate then
        # called the live campaign invalid.
        campaign_id = await self._live(client, ws, "push_device_triggered")
        before = await h.get(client, ws, campaign_id)
        details = {**before["basic_details"], "platforms": ["ANDROID", "IOS"]}
        if route == "C3":
            response = await client.patch(
                f"/v5/campaigns/{campaign_id}",
                json={"updated_by": "m@example.com", "basic_details": details},
                headers=ws.write_headers(campaigns=True),
            )
        else:
            response = await h.v1_patch(
                client, ws, campaign_id, {"basic_details": {"platforms": ["ANDROID", "IOS"]}}, publish=False
            )
        assert response.status_code == 400, response.text
        assert {(d["code"], d["target"]) for d in response.json()["error"]["details"]} == {
            ("REQUIRED_FIELD_MISSING", "campaign_content.content.push.ios")
        }
        assert await h.get(client, ws, campaign_id) == before

    @pytest.mark.parametrize(
        ("change", "target"),
        [
            (
                {"connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "nope"}},
                "connector.connector_name",
            ),
            (
                {
                    "segmentation_details": {
                        "included_filters": {
                            "filter_operator": "and",
                            "filters": [{"filter_type": "custom_segments", "id": "6" * 24, "name": "gone"}],
                        }
                    }
                },
                "segmentation_details.included_filters.filters.0.id",
            ),
        ],
    )
    async def test_a_change_the_workspace_cannot_deliver_is_refused(
        self, client: httpx.AsyncClient, ws: Tenant, change: dict[str, Any], target: str
    ) -> None:
        # Checked with the workspace's connectors and segments, as publishing checks them: the
        # change used to be written, and the campaign then failed when it started.
        campaign_id = await self._live(client, ws, "email_one_time_promotional")
        before = await h.get(client, ws, campaign_id)
        assert before["status"] == "SCHEDULED"
        response = await client.patch(
            f"/v5/campaigns/{campaign_id}",
            json={"updated_by": "m@example.com", **change},
            headers=ws.write_headers(campaigns=True),
        )
        assert response.status_code == 400, response.text
        assert target in {d["target"] for d in response.json()["error"]["details"]}
        assert await h.get(client, ws, campaign_id) == before

    async def test_a_problem_the_live_campaign_had_already_does_not_block_other_changes(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws, "email_one_time_promotional")
        async with app.state.herald.database.writer() as session:
            await delivery_connectors.remove_connector(session, ws.workspace_id, "marketing-api", force=True)
            await session.commit()
        response = await client.patch(
            f"/v5/campaigns/{campaign_id}",
            json={"updated_by": "m@example.com", "utm_params": None},
            headers=ws.write_headers(campaigns=True),
        )
        assert response.status_code == 200, response.text

    async def test_a_live_campaign_may_clear_an_optional_component(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws)
        assert "utm_params" in await h.get(client, ws, campaign_id)
        response = await client.patch(
            f"/v5/campaigns/{campaign_id}",
            json={"updated_by": "m@example.com", "utm_params": None},
            headers=ws.write_headers(campaigns=True),
        )
        assert response.status_code == 200, response.text
        assert "utm_params" not in await h.get(client, ws, campaign_id)

    async def test_live_editability_rules_apply(self, client: httpx.AsyncClient, ws: Tenant) -> None:
        campaign_id = await self._live(client, ws, "push_device_triggered")
        response = await h.v1_patch(
            client, ws, campaign_id, {"segmentation_details": {"is_all_user_campaign": True}}
        )
        assert response.status_code == 409
        assert response.json()["error"]["details"][0]["code"] == "NOT_EDITABLE"

    async def test_status_actions_racing_publishes_of_changes_all_land(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # On PostgreSQL a PAUSE or RESUME racing publishes used to deadlock with them (500), or be
        # refused as if it had named an old version (409); every version now shows the status.
        name = "push_event_triggered_delay"
        campaign_id = await self._live(client, ws, name)  # SCHEDULED: it listens from 2030

        def change(title: str) -> dict[str, Any]:
            content = copy.deepcopy(PAYLOADS[name]["campaign_content"])
            content["content"]["push"]["android"]["basic_details"]["title"] = title
            return {"campaign_content": content}

        for round_ in range(10):
            action = "PAUSE" if round_ % 2 == 0 else "RESUME"
            answers = await asyncio.gather(
                *(h.v1_patch(client, ws, campaign_id, change(f"r{round_}-{i}")) for i in range(5)),
                client.patch(
                    f"/v5/campaigns/{campaign_id}",
                    json={"updated_by": "m@example.com", **change(f"r{round_}-c3")},
                    headers=ws.write_headers(campaigns=True),
                ),
                h.action(client, ws, campaign_id, action),
            )
            assert [a.status_code for a in answers] == [204] * 5 + [200, 200], [a.text for a in answers]
            rows = await h.stored(app, ws, campaign_id)
            assert {row.status for row in rows} == {"PAUSED" if action == "PAUSE" else "SCHEDULED"}

    async def test_an_earlier_version_held_by_a_queued_write_takes_the_status_once_free(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, settings: Settings
    ) -> None:
        # A write queued for a version a publish replaced keeps its row while it waits for the new
        # latest one; a PAUSE meanwhile passes that row over (waiting closed a deadlock). The
        # version kept its old status for good when that write then ended without moving the
        # campaign (refused, or a patch): versions 19 and 20 of a PAUSED campaign read ACTIVE.
        if not settings.database_url.startswith("postgresql"):
            pytest.skip("SQLite has one writer at a time: no row is held by another")
        campaign_id = await self._live(client, ws, "push_event_triggered_delay")
        content = variant(
            PAYLOADS["push_event_triggered_delay"]["campaign_content"],
            {"content.push.android.basic_details.title": "v2"},
        )
        await h.publish(client, ws, campaign_id, {"campaign_content": content})
        first = (await h.stored(app, ws, campaign_id))[0]
        other = create_database(settings)
        try:
            async with other.writer() as queued:  # holds version 1, as the queued write does
                await queued.execute(select(Campaign.id).where(Campaign.id == first.id).with_for_update())
                assert (await h.action(client, ws, campaign_id, "PAUSE")).status_code == 200
                assert [row.status for row in await h.stored(app, ws, campaign_id)] == ["SCHEDULED", "PAUSED"]
            # The write ends (rolled back) without moving the campaign: the version follows it now.
            for _ in range(500):  # a bound against hanging, not a speed assertion
                if {row.status for row in await h.stored(app, ws, campaign_id)} == {"PAUSED"}:
                    break
                await asyncio.sleep(0.01)
            rows = await h.stored(app, ws, campaign_id)
            assert [(row.status, row.paused_from) for row in rows] == [("PAUSED", "SCHEDULED")] * 2
        finally:
            await other.dispose()

    async def test_concurrent_publishes_of_changes_leave_one_version_line(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await self._live(client, ws)

        def change(title: str) -> dict[str, Any]:
            content = copy.deepcopy(PAYLOADS["push_one_time_android_ios"]["campaign_content"])
            content["content"]["push"]["android"]["basic_details"]["title"] = title
            return {"campaign_content": content}

        # On PostgreSQL each waits for the row of the latest version, which the publishes queued
        # ahead of it replace one after the other: each finds the version that replaced it and
        # goes on (none is refused as if it had named an old version).
        responses = await asyncio.gather(
            *(h.v1_patch(client, ws, campaign_id, change(f"t{i}")) for i in range(12))
        )
        assert [response.status_code for response in responses] == [204] * 12, [r.text for r in responses]
        rows = await h.stored(app, ws, campaign_id)
        assert [row.version_number for row in rows] == list(range(1, 14))
        assert [row.is_latest for row in rows] == [False] * (len(rows) - 1) + [True]
