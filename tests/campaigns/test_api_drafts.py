"""C1-C4 through the HTTP API: create, get, update, validate, as a client sees them."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from herald.campaigns.models import Campaign, CampaignTag
from herald.campaigns.views import etag_of
from herald.clock import FrozenClock
from herald.config import Settings
from herald.http import idempotency
from herald.http.ratelimit import RateLimitStore
from herald.main import create_app
from herald.workspaces.scopes import Scope
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import ALL_FEATURES, PAYLOADS, variant
from tests.factories import Tenant, add_key, is_replay_of, make_tenant

BASE = "/v5/campaigns"
MINIMAL_PUSH = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "ana@example.com"}
MINIMAL_EMAIL = {"channel": "EMAIL", "campaign_delivery_type": "ONE_TIME", "created_by": "ana@example.com"}
OPEN_LIMITS = {
    "campaign_create": "1000/second",
    "campaign_create_success": "1000/minute",
    "campaign_ops": "1000/second",
}


@pytest.fixture
async def workspace(app: FastAPI) -> Tenant:
    """A workspace with every feature on, limits out of the way, and the payloads' connectors and segment."""
    tenant = await make_tenant(app, features=dict.fromkeys(ALL_FEATURES, True), rate_limits=OPEN_LIMITS)
    await h.add_payload_connectors(app, tenant)
    await h.add_payload_resources(app, tenant)
    return tenant


async def _create(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> httpx.Response:
    return await client.post(BASE, json=body, headers=tenant.write_headers(campaigns=True))


async def _created_id(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> str:
    response = await _create(client, tenant, body)
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["id"])


async def _set_status(app: FastAPI, campaign_id: str, status: str) -> None:
    async with app.state.herald.database.writer() as session:
        await session.execute(
            update(Campaign).where(Campaign.campaign_id == campaign_id).values(status=status)
        )
        await session.commit()


class TestCreate:
    async def test_minimal_create_is_201_draft(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await _create(client, workspace, MINIMAL_PUSH)
        assert response.status_code == 201
        body = response.json()
        assert body["type"] == "campaign"
        assert body["response_id"].startswith("resp_")
        assert body["data"]["status"] == "DRAFT"
        assert len(body["data"]["id"]) == 24

    @pytest.mark.parametrize(
        ("start_time", "timezone"),
        [
            ("9999-12-31T23:59:00-05:00", None),  # after the last instant a date-time holds, in UTC
            ("0001-01-01T00:00:00+05:00", None),  # before the first
            ("0001-01-01T00:00:00", "Pacific/Kiritimati"),  # read in a zone east of UTC
        ],
    )
    async def test_a_start_beyond_the_calendar_in_utc_is_stored_and_read_back(
        self, client: httpx.AsyncClient, workspace: Tenant, start_time: str, timezone: str | None
    ) -> None:
        scheduling = {"delivery_type": "AT_FIXED_TIME", "start_time": start_time}
        if timezone:
            scheduling["timezone"] = timezone
        response = await _create(client, workspace, {**MINIMAL_PUSH, "scheduling_details": scheduling})
        assert response.status_code == 201, response.text
        stored = await client.get(
            f"{BASE}/{response.json()['data']['id']}", headers=workspace.headers(campaigns=True)
        )
        assert stored.json()["data"]["scheduling_details"]["start_time"] == start_time

    @pytest.mark.parametrize("missing", ["channel", "campaign_delivery_type", "created_by"])
    async def test_each_required_field_is_reported(
        self, client: httpx.AsyncClient, workspace: Tenant, missing: str
    ) -> None:
        body = {key: value for key, value in MINIMAL_PUSH.items() if key != missing}
        response = await _create(client, workspace, body)
        assert response.status_code == 400
        details = response.json()["error"]["details"]
        assert {"code": "REQUIRED_FIELD_MISSING", "target": missing} in [
            {"code": d["code"], "target": d["target"]} for d in details
        ]

    @pytest.mark.parametrize("channel", ["SMS", "WHATSAPP", "push"])
    async def test_channels_that_v5_cannot_create_are_400(
        self, client: httpx.AsyncClient, workspace: Tenant, channel: str
    ) -> None:
        response = await _create(client, workspace, {**MINIMAL_PUSH, "channel": channel})
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "INVALID_ENUM_VALUE"
        assert response.json()["error"]["details"][0]["target"] == "channel"

    @pytest.mark.parametrize(
        "delivery_type", ["DEVICE_TRIGGERED", "LOCATION_TRIGGERED", "BROADCAST_LIVE_ACTIVITY"]
    )
    async def test_push_only_delivery_types_are_refused_for_email(
        self, client: httpx.AsyncClient, workspace: Tenant, delivery_type: str
    ) -> None:
        response = await _create(
            client, workspace, {**MINIMAL_EMAIL, "campaign_delivery_type": delivery_type}
        )
        assert response.status_code == 400
        assert "campaign_delivery_type" in [d["target"] for d in response.json()["error"]["details"]]

    async def test_all_problems_are_collected(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        body = {
            **MINIMAL_PUSH,
            "created_by": "not-an-email",
            "utm_params": {"utm_source": "x"},
            "control_group_details": {
                "is_campaign_control_group_enabled": True,
                "campaign_control_group_percentage": 101,
            },
            "surprise": 1,
        }
        response = await _create(client, workspace, body)
        assert response.status_code == 400
        targets = {detail["target"] for detail in response.json()["error"]["details"]}
        assert {"created_by", "utm_params.utm_medium", "surprise"} <= targets
        assert "control_group_details.campaign_control_group_percentage" in targets

    async def test_audience_limit_without_the_feature_is_400_feature_not_enabled(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        tenant = await make_tenant(app, rate_limits=OPEN_LIMITS)
        body = {
            **MINIMAL_PUSH,
            "campaign_audience_limit": {
                "is_campaign_audience_limit_enabled": True,
                "metric": "SENT",
                "frequency": "TOTAL",
                "limit": 10,
            },
        }
        response = await _create(client, tenant, body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        assert error["details"][0]["code"] == "FEATURE_NOT_ENABLED"
        assert "not enabled" in error["details"][0]["message"]
        # Named beside a type fault of the same component too (it was hidden by it).
        body["campaign_audience_limit"]["limit"] = "x"
        response = await _create(client, tenant, body)
        assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
            ("FEATURE_NOT_ENABLED", "campaign_audience_limit"),
            ("INVALID_TYPE", "campaign_audience_limit.limit"),
        ]

    async def test_malformed_json_is_400_bad_request(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await client.post(
            BASE,
            content=b'{"channel": ',
            headers={**workspace.write_headers(campaigns=True), "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_view_scope_cannot_create(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        viewer = await add_key(app, workspace, [Scope.CAMPAIGNS_VIEW])
        response = await _create(client, viewer, MINIMAL_PUSH)
        assert response.status_code == 403

    async def test_create_needs_the_app_key_header(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        headers = workspace.headers(idempotency_key=str(uuid.uuid4()))
        assert (await client.post(BASE, json=MINIMAL_PUSH, headers=headers)).status_code == 401


class TestRequestId:
    async def test_reuse_after_success_is_409_for_an_hour_on_push(
        self, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        first_id = await _created_id(client, workspace, {**MINIMAL_PUSH, "request_id": "r-1"})
        clock.advance(minutes=59, seconds=59)
        again = await _create(client, workspace, {**MINIMAL_PUSH, "request_id": "r-1"})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "DUPLICATE_REQUEST_ID"
        assert first_id in again.json()["error"]["message"]
        assert again.json()["error"]["request_id"] == "r-1"
        clock.advance(seconds=1)
        assert (await _create(client, workspace, {**MINIMAL_PUSH, "request_id": "r-1"})).status_code == 201

    async def test_reuse_after_success_is_409_for_a_day_on_email(
        self, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        await _created_id(client, workspace, {**MINIMAL_EMAIL, "request_id": "r-2"})
        clock.advance(hours=23, minutes=59)
        assert (await _create(client, workspace, {**MINIMAL_EMAIL, "request_id": "r-2"})).status_code == 409
        clock.advance(minutes=1)
        assert (await _create(client, workspace, {**MINIMAL_EMAIL, "request_id": "r-2"})).status_code == 201

    async def test_a_failed_create_does_not_consume_the_request_id(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        bad = await _create(client, workspace, {**MINIMAL_PUSH, "request_id": "r-3", "created_by": "x"})
        assert bad.status_code == 400
        assert (await _create(client, workspace, {**MINIMAL_PUSH, "request_id": "r-3"})).status_code == 201

    async def test_fifty_concurrent_creates_sharing_a_request_id_make_one_campaign(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        responses = await asyncio.gather(
            *(_create(client, workspace, {**MINIMAL_PUSH, "request_id": "same"}) for _ in range(50))
        )
        assert sorted({r.status_code for r in responses}) in ([201, 409], [201])
        assert [r.status_code for r in responses].count(201) == 1
        async with app.state.herald.database.reader() as session:
            rows = (
                await session.scalars(select(Campaign).where(Campaign.workspace_id == workspace.workspace_id))
            ).all()
        assert len(rows) == 1

    async def test_a_used_request_id_refuses_a_tagged_create_and_stores_none_of_it(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # The hold and the row (its tags, its idempotency record) go in one statement on
        # PostgreSQL: a refused hold must leave no row, no tag row and no record behind.
        tagged = {**MINIMAL_PUSH, "request_id": "tagged", "basic_details": {"tags": ["festive", "sale"]}}
        responses = await asyncio.gather(*(_create(client, workspace, tagged) for _ in range(10)))
        assert sorted(r.status_code for r in responses) == [201] + [409] * 9
        assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {
            "DUPLICATE_REQUEST_ID"
        }
        async with app.state.herald.database.reader() as session:
            rows = (
                await session.scalars(select(Campaign).where(Campaign.workspace_id == workspace.workspace_id))
            ).all()
            tags = (
                await session.scalars(
                    select(CampaignTag.campaign_row_id).where(
                        CampaignTag.workspace_id == workspace.workspace_id
                    )
                )
            ).all()
        assert len(rows) == 1
        assert sorted(tags) == [rows[0].id, rows[0].id]


class TestReplay:
    async def test_a_repeated_create_is_replayed_with_one_campaign(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # The create writes its idempotency record with its row (one statement on PostgreSQL).
        headers = workspace.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        body = {**PAYLOADS["push_one_time_android_ios"], "request_id": "replayed"}
        first = await client.post(BASE, json=body, headers=headers)
        second = await client.post(BASE, json=body, headers=headers)
        assert first.status_code == second.status_code == 201
        assert is_replay_of(second, first)
        assert second.headers["Idempotent-Replayed"] == "true"
        assert second.headers["content-type"] == first.headers["content-type"]
        async with app.state.herald.database.reader() as session:
            rows = (
                await session.scalars(select(Campaign).where(Campaign.workspace_id == workspace.workspace_id))
            ).all()
        assert [row.id for row in rows] == [first.json()["data"]["id"]]
        assert sorted(rows[0].tags) == sorted(body["basic_details"]["tags"])


class TestReplayAfterAReadFirst:
    """With no credentials cache, a create reads its key's row first, in its own transaction (on
    SQLite that takes the write lock): its write then goes in that transaction, still claiming the
    key."""

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return dataclasses.replace(settings, credentials_cache_seconds=0)

    async def test_a_repeated_create_is_replayed(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        tenant = await make_tenant(app, rate_limits={"campaign_create": "1000/second"})
        headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        for body in (MINIMAL_PUSH, {**MINIMAL_PUSH, "request_id": "read-first"}):
            first = await client.post(BASE, json=body, headers=headers)
            second = await client.post(BASE, json=body, headers=headers)
            assert first.status_code == second.status_code == 201, second.text
            assert second.headers["Idempotent-Replayed"] == "true"
            assert is_replay_of(second, first)
            other = await client.post(BASE, json={**body, "request_id": "another"}, headers=headers)
            assert other.status_code == 409
            assert other.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
            headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))


BETWEEN_ON_A_STRING = {
    "included_filters": {
        "filter_operator": "and",
        "filters": [
            {
                "filter_type": "user_attributes",
                "project_name": "app",
                "data_type": "string",
                "name": "a",
                "operator": "between",
                "value": 1,
            }
        ],
    }
}


_PURCHASED = {
    "filter_type": "actions",
    "action_name": "purchase",
    "execution": {"type": "atleast", "count": 1},
    "executed": True,
}


class TestFiltersRefusedAtTheWrite:
    async def test_a_dynamic_value_naming_no_attribute_and_an_action_in_an_actions_attributes(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Both were stored by C3 (200) and refused only at validate and publish, where every other
        # filter fault is refused at the write.
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        dynamic = {
            "filter_type": "user_attributes",
            "project_name": "app",
            "data_type": "string",
            "name": "city",
            "operator": "is",
            "value": "Paris",
            "is_dynamic_value": True,
        }
        nested = {**_PURCHASED, "attributes": {"filter_operator": "and", "filters": [_PURCHASED]}}
        body = {
            "segmentation_details": {
                "included_filters": {"filter_operator": "and", "filters": [dynamic, nested]}
            }
        }
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=body, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 400, response.text
        path = "segmentation_details.included_filters.filters"
        assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
            ("INVALID_ENUM_VALUE", f"{path}.1.attributes.filters.0.filter_type"),
            ("INVALID_TYPE", f"{path}.0.value"),
        ]
        created = await _create(client, workspace, {**MINIMAL_PUSH, **body})
        assert created.status_code == 400, created.text
        assert len(created.json()["error"]["details"]) == 2
        dynamic["value"] = "{{UserAttribute['home_city']}}"
        nested["attributes"]["filters"] = [
            {**dynamic, "name": "amount", "is_dynamic_value": False, "value": "x"}
        ]
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=body, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 200, response.text


class TestEveryViolationInOneAnswer:
    """A body that fails to parse still has the rules of its sound components checked: the client
    learns every violation at once (contract §3), not the rules' only once the types are fixed."""

    async def test_create(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        body = {**MINIMAL_PUSH, "created_by": "nope", "segmentation_details": BETWEEN_ON_A_STRING}
        response = await _create(client, workspace, body)
        assert response.status_code == 400
        assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
            ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.0.operator"),
            ("INVALID_TYPE", "created_by"),
        ]

    async def test_patch(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        body = {
            "updated_by": 7,
            "segmentation_details": BETWEEN_ON_A_STRING,
            "utm_params": {"utm_source": "s", "utm_medium": "m", "foo": "x"},
        }
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=body, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 400
        assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
            ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.0.operator"),
            ("INVALID_TYPE", "updated_by"),
            ("UNKNOWN_FIELD", "utm_params.foo"),
        ]

    async def test_a_patch_refused_for_its_head_names_its_bodys_faults_as_the_campaign_reads_them(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # A malformed request id: the body's rules (judged against the stored campaign, L1's merged
        # over it) are named beside it, as C1 names them (C3 named the faults common to every
        # channel only, L1 none).
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        headers = {**workspace.write_headers(campaigns=True), "X-SVC-Request-Id": "not-a-uuid"}
        body = {"segmentation_details": BETWEEN_ON_A_STRING}
        patched = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        earlier = {"request_id": str(uuid.uuid4()), "updated_by": "bo@example.com", **body}
        merged = await client.patch(
            f"/core-services/v1/campaigns/{campaign_id}", json=earlier, headers=headers
        )
        for response in (patched, merged):
            assert response.status_code == 400, response.text
            assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
                ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.0.operator"),
                ("INVALID_TYPE", "X-SVC-Request-Id"),
            ]

    async def test_patches_refused_for_their_heads_at_once_do_not_wait_on_each_other(
        self, settings: Settings, clock: FrozenClock, limiter: RateLimitStore
    ) -> None:
        # The stored campaign that names the body's faults is read on the request's own session:
        # on a session of its own, from the same pool (PostgreSQL), each refusal held a connection
        # and waited for a second one, and as many as the pool has waited until its timeout (30 s,
        # then 503 for them and for every other request of the process).
        app = create_app(dataclasses.replace(settings, db_pool_size=2), clock=clock, limiter=limiter)
        try:
            tenant = await make_tenant(app, rate_limits={"campaign_ops": "1000/second"})
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://t"
            ) as client:
                campaign_id = await _created_id(client, tenant, MINIMAL_PUSH)
                headers = {**tenant.write_headers(campaigns=True), "Idempotency-Key": "nope"}
                body = {"segmentation_details": BETWEEN_ON_A_STRING}

                async def refused() -> httpx.Response:
                    return await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)

                answers = await asyncio.wait_for(asyncio.gather(*(refused() for _ in range(6))), 20)
            for answer in answers:
                assert answer.status_code == 400, answer.text
                assert sorted((d["code"], d["target"]) for d in answer.json()["error"]["details"]) == [
                    ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.0.operator"),
                    ("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key"),
                ]
        finally:
            await app.state.herald.aclose()

    async def test_a_patch_with_a_component_that_does_not_parse_has_the_others_rules_checked(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # `utm_medium` missing spoils `utm_params`; the companions missing in the two sound
        # components are reported with it, on C3 as on C1 (the patch reported the utm field alone).
        trigger = {
            "included_filters": {"filter_operator": "and", "filters": [_PURCHASED]},
            "trigger_delay_type": "DELAY",
        }
        body = {
            "control_group_details": {"is_campaign_control_group_enabled": True},
            "trigger_condition": trigger,
            "utm_params": {"utm_source": "s"},
        }
        expected = [
            ("REQUIRED_FIELD_MISSING", "control_group_details.campaign_control_group_percentage"),
            ("REQUIRED_FIELD_MISSING", "trigger_condition.trigger_delay_granularity"),
            ("REQUIRED_FIELD_MISSING", "trigger_condition.trigger_delay_value"),
            ("REQUIRED_FIELD_MISSING", "trigger_condition.trigger_relation"),
            ("REQUIRED_FIELD_MISSING", "utm_params.utm_medium"),
        ]
        event_triggered = {**MINIMAL_PUSH, "campaign_delivery_type": "EVENT_TRIGGERED"}
        created = await _create(client, workspace, {**event_triggered, **body})
        campaign_id = await _created_id(client, workspace, event_triggered)
        headers = workspace.write_headers(campaigns=True)
        patched = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        earlier = {"request_id": str(uuid.uuid4()), "updated_by": "bo@example.com", **body}
        merged = await client.patch(
            f"/core-services/v1/campaigns/{campaign_id}",
            json=earlier,
            headers=workspace.headers(campaigns=True),
        )
        for response in (created, patched, merged):
            assert response.status_code == 400, response.text
            assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == expected

    async def test_a_component_that_does_not_parse_still_has_its_keys_checked(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # `utm_medium` missing spoils the component; its custom keys' rules are read from the keys
        # as sent: one without the `utm_` prefix, and six custom keys where five are allowed.
        utm = {"utm_source": "s", "foo": "x", **{f"utm_k{n}": "v" for n in range(5)}}
        created = await _create(client, workspace, {**MINIMAL_PUSH, "utm_params": utm})
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        patched = await client.patch(
            f"{BASE}/{campaign_id}", json={"utm_params": utm}, headers=workspace.write_headers(campaigns=True)
        )
        for response in (created, patched):
            assert response.status_code == 400
            assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
                ("OUT_OF_RANGE", "utm_params"),
                ("REQUIRED_FIELD_MISSING", "utm_params.utm_medium"),
                ("UNKNOWN_FIELD", "utm_params.foo"),
            ]

    @pytest.mark.parametrize(
        ("delivery_type", "component", "sent", "expected"),
        [
            (  # an operator its data type does not take, beside a type fault in another filter
                "ONE_TIME",
                "segmentation_details",
                {
                    "included_filters": {
                        "filter_operator": "and",
                        "filters": [
                            BETWEEN_ON_A_STRING["included_filters"]["filters"][0],
                            {**_PURCHASED, "negate": "z"},
                        ],
                    }
                },
                [
                    ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.0.operator"),
                    ("UNKNOWN_FIELD", "segmentation_details.included_filters.filters.1.negate"),
                ],
            ),
            (  # a Custom template without its id, beside a type fault in another platform's object
                "ONE_TIME",
                "campaign_content",
                {
                    "content": {
                        "push": {
                            "android": {"template_type": "Custom"},
                            "ios": {"template_type": "BASIC", "basic_details": {"title": 5, "message": "m"}},
                        }
                    }
                },
                [
                    ("INVALID_TYPE", "campaign_content.content.push.ios.basic_details.title"),
                    ("REQUIRED_FIELD_MISSING", "campaign_content.content.push.android.custom_template_id"),
                ],
            ),
            # No problem judged on a value left out: a sibling reads it as missing. An all-users
            # flag that is no boolean is not "no audience"; a timezone that is no name does not
            # read the times in UTC.
            (
                "ONE_TIME",
                "segmentation_details",
                {"is_all_user_campaign": "yes"},
                [
                    ("INVALID_TYPE", "segmentation_details.is_all_user_campaign"),
                ],
            ),
            (
                "ONE_TIME",
                "scheduling_details",
                {
                    "delivery_type": "AT_FIXED_TIME",
                    "start_time": "2027-01-01T10:00:00",
                    "expiry_time": "2027-01-01T12:00:00+05:00",
                    "timezone": 5,
                },
                [("INVALID_TYPE", "scheduling_details.timezone")],
            ),
        ],
    )
    async def test_a_type_fault_hides_no_rule_of_its_own_component(
        self,
        client: httpx.AsyncClient,
        workspace: Tenant,
        delivery_type: str,
        component: str,
        sent: dict[str, Any],
        expected: list[tuple[str, str]],
    ) -> None:
        # The component is read without its faulty values, so its rules are still checked; none is
        # reported about a value left out (the timezone's "required" above, say).
        kind = {**MINIMAL_PUSH, "campaign_delivery_type": delivery_type}
        created = await _create(client, workspace, {**kind, component: sent})
        campaign_id = await _created_id(client, workspace, kind)
        patched = await client.patch(
            f"{BASE}/{campaign_id}", json={component: sent}, headers=workspace.write_headers(campaigns=True)
        )
        for response in (created, patched):
            assert response.status_code == 400, response.text
            assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == expected


class TestLengthsTheColumnsHold:
    """A campaign's name is kept in a column of 500 characters and each tag in one of 200: longer
    ones are refused at the field on every route that writes them (on PostgreSQL they answered 500,
    on SQLite they were stored whole)."""

    async def test_a_name_or_tag_past_its_column_is_out_of_range_on_c1_c3_and_l1(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        fits = {"name": "n" * 500, "tags": ["t" * 200]}
        too_long = {"name": "n" * 501, "tags": ["ok", "t" * 201]}
        refused = [("OUT_OF_RANGE", "basic_details.name"), ("OUT_OF_RANGE", "basic_details.tags.1")]

        def details(response: httpx.Response) -> list[tuple[str, str]]:
            assert response.status_code == 400, response.text
            return sorted((d["code"], d["target"]) for d in response.json()["error"]["details"])

        assert (
            details(await _create(client, workspace, {**MINIMAL_PUSH, "basic_details": too_long})) == refused
        )
        campaign_id = await _created_id(client, workspace, {**MINIMAL_PUSH, "basic_details": fits})
        headers = workspace.write_headers(campaigns=True)
        patched = await client.patch(
            f"{BASE}/{campaign_id}", json={"basic_details": too_long}, headers=headers
        )
        assert details(patched) == refused
        earlier = {"request_id": str(uuid.uuid4()), "updated_by": "bo@example.com", "basic_details": too_long}
        merged = await client.patch(
            f"/core-services/v1/campaigns/{campaign_id}",
            json=earlier,
            headers=workspace.headers(campaigns=True),
        )
        assert details(merged) == refused
        stored = (await client.get(f"{BASE}/{campaign_id}", headers=workspace.headers(campaigns=True))).json()
        assert stored["data"]["basic_details"]["name"] == fits["name"]
        assert stored["data"]["basic_details"]["tags"] == fits["tags"]


class TestVariationCount:
    async def test_a_count_of_variations_past_100_is_out_of_range_at_once(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # 15,575,900 variations (Schemathesis's): C1 listed each missing one per locale, and the
        # server was killed for its memory before it answered.
        content = {
            "locales": ["fr-FR"],
            "variation_details": {"distribution_type": "SHERPA", "no_of_variations": 15575900},
            "content": {"default": {"variation_1": {}}, "fr-FR": {"variation_1": {}}},
        }
        response = await _create(client, workspace, {**MINIMAL_PUSH, "campaign_content": content})
        assert response.status_code == 400, response.text
        details = response.json()["error"]["details"]
        assert ("OUT_OF_RANGE", "campaign_content.variation_details.no_of_variations") in {
            (d["code"], d["target"]) for d in details
        }
        assert len(details) < 10
        content["variation_details"]["no_of_variations"] = 100  # the most a campaign may have
        response = await _create(client, workspace, {**MINIMAL_PUSH, "campaign_content": content})
        assert "no_of_variations" not in response.text


class TestNumbersNoColumnHolds:
    """Whole numbers past 64 bits: judged as the doubles they equal, never stored as integers the
    answers cannot write back (a throttle of 1e30 was stored, and every read of the campaign then
    answered 500)."""

    @pytest.mark.parametrize("raw", [b"1e30", b"18446744073709551616", b"100000000000000000000"])
    async def test_an_integer_field_past_64_bits_is_out_of_range(
        self, client: httpx.AsyncClient, workspace: Tenant, raw: bytes
    ) -> None:
        body = json.dumps({**MINIMAL_PUSH, "created_by": "nope"}).encode()[:-1]
        body += b', "delivery_controls": {"campaign_throttle_rpm": ' + raw + b"}}"
        headers = {**workspace.write_headers(campaigns=True), "Content-Type": "application/json"}
        response = await client.post(BASE, content=body, headers=headers)
        assert response.status_code == 400, response.text
        assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == [
            ("INVALID_TYPE", "created_by"),
            ("OUT_OF_RANGE", "delivery_controls.campaign_throttle_rpm"),
        ]

    async def test_a_free_form_value_past_64_bits_is_kept_as_the_double_it_equals(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        email = {"subject": "s", "attachments": [{"size": 0}]}
        body = json.dumps({**MINIMAL_EMAIL, "campaign_content": {"content": {"email": email}}}).encode()
        body = body.replace(b'"size": 0', b'"size": 1180591620717411303424')
        headers = {**workspace.write_headers(campaigns=True), "Content-Type": "application/json"}
        response = await client.post(BASE, content=body, headers=headers)
        assert response.status_code == 201, response.text
        stored = await h.get(client, workspace, response.json()["data"]["id"])
        assert stored["campaign_content"]["content"]["email"]["attachments"] == [{"size": 2.0**70}]


class TestLimits:
    async def test_request_limit_is_5_per_second(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        tenant = await make_tenant(app)
        statuses = [
            (await _create(client, tenant, {**MINIMAL_PUSH, "created_by": "x"})).status_code for _ in range(6)
        ]
        assert statuses == [400] * 5 + [429]

    async def test_sixth_success_in_a_minute_is_429_but_failures_do_not_count(
        self, app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
    ) -> None:
        tenant = await make_tenant(app)
        for _ in range(5):
            assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 201
            assert (await _create(client, tenant, {**MINIMAL_PUSH, "created_by": "x"})).status_code == 400
            clock.advance(seconds=1)
        refused = await _create(client, tenant, MINIMAL_PUSH)
        assert refused.status_code == 429
        # The first success (5 s ago) leaves the one-minute window 55 s from now.
        assert refused.headers["Retry-After"] == "55"
        assert refused.headers["X-RateLimit-Remaining"] == "0"
        clock.advance(seconds=54)
        assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 429
        clock.advance(seconds=1)
        assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 201

    async def test_a_request_refusal_waits_for_the_success_quota_too(
        self, app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
    ) -> None:
        # Five creates in a second fill both the per-second request window and the minute's
        # successes: the sixth is refused by the first, and may come back only when the second frees.
        tenant = await make_tenant(app)
        for _ in range(5):
            assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 201
        refused = await _create(client, tenant, MINIMAL_PUSH)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "60"
        clock.advance(seconds=60)
        assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 201

    async def test_a_success_quota_refusal_waits_for_the_request_windows_too(
        self, app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
    ) -> None:
        # The refused create took the last request slot of the hour: the next passes in an hour.
        tenant = await make_tenant(
            app, rate_limits={"campaign_create": "2/hour", "campaign_create_success": "1/minute"}
        )
        assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 201
        clock.advance(seconds=1)
        refused = await _create(client, tenant, MINIMAL_PUSH)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "3599"

    async def test_a_success_describes_the_window_nearest_exhaustion(
        self, app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
    ) -> None:
        # One create a second: the per-second request window always has 4 left, the minute's
        # successes one fewer each time. The headers follow the successes.
        tenant = await make_tenant(app)
        start = int(clock.now().timestamp())
        seen = []
        for _ in range(5):
            created = await _create(client, tenant, MINIMAL_PUSH)
            assert created.status_code == 201
            seen.append((created.headers["X-RateLimit-Limit"], created.headers["X-RateLimit-Remaining"]))
            clock.advance(seconds=1)
        assert seen == [("5", "4"), ("5", "3"), ("5", "2"), ("5", "1"), ("5", "0")]
        # The last success's minute frees its first slot 60 s after the first success.
        assert int(created.headers["X-RateLimit-Reset"]) == start + 60

    async def test_replays_and_refused_requests_take_no_success_slot(
        self, app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
    ) -> None:
        # The success slot is taken once the body passed its checks, and given back on a replay.
        tenant = await make_tenant(app, rate_limits={"campaign_create": "1000/second"})
        headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        assert (await client.post(BASE, json=MINIMAL_PUSH, headers=headers)).status_code == 201
        for _ in range(5):
            replay = await client.post(BASE, json=MINIMAL_PUSH, headers=headers)
            assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (201, "true")
            other_body = await client.post(
                BASE, json={**MINIMAL_PUSH, "created_by": "b@example.com"}, headers=headers
            )
            assert other_body.status_code == 409  # the key names another request
            invalid = await client.post(BASE, json={**MINIMAL_PUSH, "created_by": "x"}, headers=headers)
            assert invalid.status_code == 409  # the key answers before the body's 400
        for _ in range(4):
            assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 201
        assert (await _create(client, tenant, MINIMAL_PUSH)).status_code == 429

    async def test_failures_in_flight_never_crowd_out_a_success(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        # Only a create that passed its checks takes a success slot: twenty invalid creates sent
        # together with five valid ones leave all five their slots.
        tenant = await make_tenant(app, rate_limits={"campaign_create": "1000/second"})
        invalid = {**MINIMAL_PUSH, "created_by": "x"}
        bodies = [invalid] * 10 + [MINIMAL_PUSH] * 5 + [invalid] * 10
        responses = await asyncio.gather(*(_create(client, tenant, body) for body in bodies))
        statuses = [response.status_code for response in responses]
        assert statuses == [400] * 10 + [201] * 5 + [400] * 10

    async def test_success_quota_is_exact_under_concurrency(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        tenant = await make_tenant(app, rate_limits={"campaign_create": "1000/second"})
        responses = await asyncio.gather(*(_create(client, tenant, MINIMAL_PUSH) for _ in range(50)))
        statuses = [response.status_code for response in responses]
        assert statuses.count(201) == 5
        assert statuses.count(429) == 45


class TestGet:
    async def test_get_returns_the_stored_campaign_with_etag(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, PAYLOADS["push_one_time_android_ios"])
        response = await client.get(f"{BASE}/{campaign_id}", headers=workspace.headers(campaigns=True))
        assert response.status_code == 200
        data = response.json()["data"]
        assert data["id"] == data["campaign_id"] == campaign_id
        assert data["status"] == "DRAFT"
        assert data["version_number"] == 1
        assert data["created_at"] == "2026-01-15 12:00:00.000000"
        assert response.headers["ETag"]

    async def test_unknown_and_malformed_ids_are_404(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        for campaign_id in ("0" * 24, "nope"):
            response = await client.get(f"{BASE}/{campaign_id}", headers=workspace.headers(campaigns=True))
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "NOT_FOUND"

    async def test_an_unknown_query_parameter_is_400_unknown_field(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        response = await client.get(
            f"{BASE}/{campaign_id}?versoin_number=1", headers=workspace.headers(campaigns=True)
        )
        assert response.status_code == 400
        assert response.json()["error"]["details"][0] == {
            "code": "UNKNOWN_FIELD",
            "target": "versoin_number",
            "message": "'versoin_number' is not a recognised field here.",
        }

    @pytest.mark.parametrize(
        ("number", "code"), [("1_0", "INVALID_TYPE"), ("+1", "INVALID_TYPE"), ("0", "OUT_OF_RANGE")]
    )
    async def test_version_number_is_digits_only(
        self, client: httpx.AsyncClient, workspace: Tenant, number: str, code: str
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        response = await client.get(
            f"{BASE}/{campaign_id}",
            params={"version_number": number},
            headers=workspace.headers(campaigns=True),
        )
        assert response.status_code == 400
        assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [
            (code, "version_number")
        ]

    async def test_another_workspace_gets_404(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        stranger = await make_tenant(app, rate_limits=OPEN_LIMITS)
        assert (
            await client.get(f"{BASE}/{campaign_id}", headers=stranger.headers(campaigns=True))
        ).status_code == 404
        patch = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"updated_by": "e@example.com"},
            headers=stranger.write_headers(campaigns=True),
        )
        assert patch.status_code == 404
        validate = await client.post(
            f"{BASE}/{campaign_id}/validate", headers=stranger.headers(campaigns=True)
        )
        assert validate.status_code == 404


@pytest.mark.parametrize("name", sorted(PAYLOADS))
async def test_full_payload_round_trip(client: httpx.AsyncClient, workspace: Tenant, name: str) -> None:
    """create → get → patch → validate: nothing sent is lost or altered."""
    payload = copy.deepcopy(PAYLOADS[name])
    campaign_id = await _created_id(client, workspace, payload)
    headers = workspace.headers(campaigns=True)
    stored = (await client.get(f"{BASE}/{campaign_id}", headers=headers)).json()["data"]
    for key, value in payload.items():
        if key not in ("request_id",):
            assert stored[key] == value, key

    patch = {key: value for key, value in payload.items() if key not in ("created_by", "request_id")}
    patch["updated_by"] = "editor@example.com"
    patched = await client.patch(
        f"{BASE}/{campaign_id}", json=patch, headers=workspace.write_headers(campaigns=True)
    )
    assert patched.status_code == 200, patched.text
    again = (await client.get(f"{BASE}/{campaign_id}", headers=headers)).json()["data"]
    assert again["updated_by"] == "editor@example.com"
    for key, value in payload.items():
        if key not in ("request_id", "created_by"):
            assert again[key] == value, key

    validated = await client.post(f"{BASE}/{campaign_id}/validate", headers=headers)
    assert validated.status_code == 200
    assert validated.json()["data"] == {"valid": True, "errors": []}


class TestUpdate:
    async def test_sent_component_replaces_the_stored_one_whole(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(
            client,
            workspace,
            {**MINIMAL_PUSH, "utm_params": {"utm_source": "a", "utm_medium": "b", "utm_term": "t"}},
        )
        response = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"utm_params": {"utm_source": "c", "utm_medium": "d"}},
            headers=workspace.write_headers(campaigns=True),
        )
        assert response.status_code == 200
        assert response.json()["data"] == {"id": campaign_id}
        stored = (
            await client.get(f"{BASE}/{campaign_id}", headers=workspace.headers(campaigns=True))
        ).json()["data"]
        assert stored["utm_params"] == {"utm_source": "c", "utm_medium": "d"}

    async def test_invalid_patch_changes_nothing(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        headers = workspace.headers(campaigns=True)
        before = await client.get(f"{BASE}/{campaign_id}", headers=headers)
        response = await client.patch(
            f"{BASE}/{campaign_id}",
            json={
                "utm_params": {"utm_source": "a", "utm_medium": "b"},
                "control_group_details": {"is_campaign_control_group_enabled": True},
            },
            headers=workspace.write_headers(campaigns=True),
        )
        assert response.status_code == 400
        after = await client.get(f"{BASE}/{campaign_id}", headers=headers)
        assert after.json()["data"] == before.json()["data"]
        assert after.headers["ETag"] == before.headers["ETag"]

    async def test_channel_cannot_change(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        response = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"channel": "EMAIL"},
            headers=workspace.write_headers(campaigns=True),
        )
        assert response.status_code == 400
        # One violation, one detail.
        assert response.json()["error"]["details"] == [
            {
                "code": "INVALID_ENUM_VALUE",
                "target": "channel",
                "message": "The channel of a campaign cannot change from PUSH.",
            }
        ]

    async def test_a_template_type_changed_in_basic_details_needs_the_new_types_fields(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Spec rule 2. The Android content has no type of its own: basic_details' is its type, and
        # changing it there was accepted without the carousel the new type shows.
        android = "campaign_content.content.push.android"
        draft = variant(
            PAYLOADS["push_periodic"],
            {"basic_details.template_type": "BASIC"},
            drop=(f"{android}.template_type",),
        )
        campaign_id = await _created_id(client, workspace, draft)
        before = await h.get(client, workspace, campaign_id)
        carousel = {**draft["basic_details"], "template_type": "SIMPLE_IMAGE_CAROUSEL"}
        c3 = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"basic_details": carousel},
            headers=workspace.write_headers(campaigns=True),
        )
        l1 = await h.v1_patch(
            client,
            workspace,
            campaign_id,
            {"basic_details": {"template_type": "SIMPLE_IMAGE_CAROUSEL"}},
            publish=False,
        )
        for response in (c3, l1):
            assert response.status_code == 400, response.text
            assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [
                ("REQUIRED_FIELD_MISSING", f"{android}.carousel_content")
            ]
        assert await h.get(client, workspace, campaign_id) == before
        # With the slides in the same request, the change is made.
        slides = [
            {"image_url": "https://cdn.example.com/1.png"},
            {"image_url": "https://cdn.example.com/2.png"},
        ]
        content = variant(draft["campaign_content"], {"content.push.android.carousel_content": slides})
        both = {"basic_details": carousel, "campaign_content": content}
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=both, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 200, response.text

    @pytest.mark.parametrize("channel", ["SMS", "WHATSAPP"])
    @pytest.mark.parametrize(
        "body",
        [
            {"updated_by": "ana@example.com"},
            {"utm_params": {"utm_source": "a", "utm_medium": "b"}},
            {"basic_details": {"name": "Renamed"}},
            {"campaign_content": {"content": {}}},
            {"scheduling_details": {"scheduling_type": "ASAP"}},
        ],
    )
    async def test_an_imported_channel_v5_cannot_update_is_400_whatever_the_body(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, channel: str, body: dict[str, Any]
    ) -> None:
        [campaign_id] = await h.seed(app, workspace, h.line(channel=channel, status="DRAFT"))
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=body, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 400, response.text
        details = response.json()["error"]["details"]
        assert {"code": "INVALID_ENUM_VALUE", "target": "channel"} in [
            {"code": d["code"], "target": d["target"]} for d in details
        ]

    async def test_if_match_mismatch_is_412(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        url = f"{BASE}/{campaign_id}"
        etag = (await client.get(url, headers=workspace.headers(campaigns=True))).headers["ETag"]
        body = {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        first = await client.patch(
            url, json=body, headers={**workspace.write_headers(campaigns=True), "If-Match": etag}
        )
        assert first.status_code == 200
        stale = await client.patch(
            url, json=body, headers={**workspace.write_headers(campaigns=True), "If-Match": etag}
        )
        assert stale.status_code == 412

    @pytest.mark.parametrize(
        ("header", "status"),
        [
            ('"stale", {etag}', 200),  # a list holds when one of its tags is the current one
            ("W/{etag}", 412),  # a weak tag never matches (strong comparison)
            ('"stale", "older"', 412),
        ],
    )
    async def test_if_match_takes_a_list_of_entity_tags(
        self, client: httpx.AsyncClient, workspace: Tenant, header: str, status: int
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        url = f"{BASE}/{campaign_id}"
        etag = (await client.get(url, headers=workspace.headers(campaigns=True))).headers["ETag"]
        body = {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        headers = {**workspace.write_headers(campaigns=True), "If-Match": header.format(etag=etag)}
        response = await client.patch(url, json=body, headers=headers)
        assert response.status_code == status, response.text

    async def test_update_needs_create_manage_scope(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        viewer = await add_key(app, workspace, [Scope.CAMPAIGNS_VIEW])
        response = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"updated_by": "a@example.com"},
            headers=viewer.write_headers(campaigns=True),
        )
        assert response.status_code == 403

    async def test_update_is_idempotent(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        headers = workspace.write_headers(campaigns=True)
        body = {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        first = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        second = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        assert second.headers["Idempotent-Replayed"] == "true"
        assert is_replay_of(second, first)

    async def test_a_reused_key_answers_before_the_body_and_the_campaign_are_looked_at(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # The key's claim goes with the read of the campaign's row (one statement on PostgreSQL):
        # it still answers first, as when the guard claimed it on its own.
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        headers = workspace.write_headers(campaigns=True)
        body = {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        assert (await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)).status_code == 200
        for url, content in (
            (f"{BASE}/{campaign_id}", b"{not json"),
            (f"{BASE}/{'f' * 24}", b'{"utm_params": null}'),  # no such campaign
            (f"{BASE}/not-an-id", b'{"utm_params": null}'),
        ):
            response = await client.patch(
                url, content=content, headers={**headers, "Content-Type": "application/json"}
            )
            assert response.status_code == 409, (url, response.text)
            assert response.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
        stored = await client.get(f"{BASE}/{campaign_id}", headers=workspace.headers(campaigns=True))
        assert stored.headers["ETag"] == etag_of(campaign_id, 2)  # updated once, by the first request

    async def test_a_key_in_flight_is_refused_at_once_then_free(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        engine = app.state.herald.database.engine
        if engine.dialect.name != "postgresql":
            pytest.skip("SQLite has one writer: a duplicate waits for the first, then replays it")
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        key = str(uuid.uuid4())
        headers = workspace.headers(campaigns=True, idempotency_key=key)
        body = {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        claim = idempotency.Claim(workspace.workspace_id, workspace.key_id, key, fingerprint="")
        async with engine.connect() as first:  # a request holding the key, in its transaction
            await first.execute(select(func.pg_advisory_xact_lock(idempotency._lock_id(claim))))
            busy = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
            assert busy.status_code == 409
            assert busy.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
            await first.rollback()
        done = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        assert done.status_code == 200
        assert "Idempotent-Replayed" not in done.headers
        assert done.headers["ETag"] == etag_of(campaign_id, 2)  # the refused one wrote nothing

    async def test_an_expired_key_claimed_again_updates_the_current_row(
        self, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        # A record past its 24 h is forgotten by the claim; the row is then read on its own.
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        headers = workspace.write_headers(campaigns=True)
        body = {"utm_params": {"utm_source": "a", "utm_medium": "b"}}
        first = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        clock.advance(hours=24)
        again = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        assert (first.status_code, again.status_code) == (200, 200)
        assert "Idempotent-Replayed" not in again.headers
        assert again.headers["ETag"] != first.headers["ETag"]  # a second write: the next revision
        replayed = await client.patch(f"{BASE}/{campaign_id}", json=body, headers=headers)
        assert replayed.headers["Idempotent-Replayed"] == "true"
        assert replayed.headers["ETag"] == again.headers["ETag"]


class TestEditabilityByState:
    SEGMENT = {"is_all_user_campaign": True}

    @pytest.mark.parametrize(
        ("status", "body", "locked"),
        [
            (
                "SCHEDULED",
                {"scheduling_details": {"delivery_type": "ASAP"}},
                ["scheduling_details.delivery_type"],
            ),
            ("ACTIVE", {"segmentation_details": SEGMENT}, ["segmentation_details"]),
            (
                "ACTIVE",
                {"scheduling_details": {"delivery_type": "ASAP"}},
                ["scheduling_details.delivery_type", "scheduling_details.start_time"],
            ),
            (
                "PAUSED",
                {"conversion_goal_details": {"attribution_window_in_hours": 5}},
                ["conversion_goal_details"],
            ),
            ("STOPPED", {"utm_params": {"utm_source": "a", "utm_medium": "b"}}, ["utm_params"]),
            ("ARCHIVED", {"utm_params": {"utm_source": "a", "utm_medium": "b"}}, ["utm_params"]),
        ],
    )
    async def test_forbidden_changes_are_409_not_editable(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        status: str,
        body: dict[str, Any],
        locked: list[str],
    ) -> None:
        created = {
            **MINIMAL_PUSH,
            "scheduling_details": {"delivery_type": "AT_FIXED_TIME", "start_time": "2026-02-01T10:00:00Z"},
        }
        campaign_id = await _created_id(client, workspace, created)
        await _set_status(app, campaign_id, status)
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=body, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["code"] == "INVALID_STATE"
        assert [(d["code"], d["target"]) for d in error["details"]] == [("NOT_EDITABLE", t) for t in locked]

    @pytest.mark.parametrize(
        ("status", "body"),
        [
            ("DRAFT", {"segmentation_details": SEGMENT}),
            ("SCHEDULED", {"segmentation_details": SEGMENT}),
            ("ACTIVE", {"utm_params": {"utm_source": "a", "utm_medium": "b"}}),
            ("ACTIVE", {"basic_details": {"name": "renamed", "platforms": ["ANDROID", "IOS"]}}),
        ],
    )
    async def test_allowed_changes_apply(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, status: str, body: dict[str, Any]
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        await _set_status(app, campaign_id, status)
        response = await client.patch(
            f"{BASE}/{campaign_id}", json=body, headers=workspace.write_headers(campaigns=True)
        )
        assert response.status_code == 200, response.text


_LOCATION_DETAILS: dict[str, Any] = PAYLOADS["push_location_triggered"]["basic_details"]


class TestWhatFiresALiveCampaign:
    """`basic_details.geofences` and `.business_event` fire their campaigns as `trigger_condition`
    fires the others, and are locked with it while the campaign is live."""

    @pytest.mark.parametrize("status", ["ACTIVE", "PAUSED"])
    @pytest.mark.parametrize(
        ("payload", "field", "value"),
        [
            (
                "push_location_triggered",
                "geofences",
                [{**_LOCATION_DETAILS["geofences"][1], "latitude": "10.0", "triggered_at": "EXIT"}],
            ),
            ("email_business_event", "business_event", "other_event"),
        ],
    )
    async def test_changing_it_is_409_not_editable(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        status: str,
        payload: str,
        field: str,
        value: Any,
    ) -> None:
        campaign_id = await _created_id(client, workspace, PAYLOADS[payload])
        await _set_status(app, campaign_id, status)
        before = await h.get(client, workspace, campaign_id)
        details = {**before["basic_details"], field: value}
        c3 = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"basic_details": details},
            headers=workspace.write_headers(campaigns=True),
        )
        l1 = await h.v1_patch(
            client, workspace, campaign_id, {"basic_details": {field: value}}, publish=False
        )
        removed = {key: item for key, item in before["basic_details"].items() if key != field}
        cleared = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"basic_details": removed},
            headers=workspace.write_headers(campaigns=True),
        )
        for response in (c3, l1, cleared):
            assert response.status_code == 409, response.text
            error = response.json()["error"]
            assert error["code"] == "INVALID_STATE"
            assert [(d["code"], d["target"]) for d in error["details"]] == [
                ("NOT_EDITABLE", f"basic_details.{field}")
            ]
        assert await h.get(client, workspace, campaign_id) == before

    @pytest.mark.parametrize(
        ("status", "change"),
        [
            ("ACTIVE", {"name": "Store walk-in (renamed)", "tags": ["stores"]}),
            ("SCHEDULED", {"geofences": [{**_LOCATION_DETAILS["geofences"][1], "radius": "900"}]}),
        ],
    )
    async def test_the_rest_of_basic_details_and_a_scheduled_campaign_stay_editable(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, status: str, change: dict[str, Any]
    ) -> None:
        campaign_id = await _created_id(client, workspace, PAYLOADS["push_location_triggered"])
        await _set_status(app, campaign_id, status)
        details = {**_LOCATION_DETAILS, **change}
        response = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"basic_details": details},
            headers=workspace.write_headers(campaigns=True),
        )
        assert response.status_code == 200, response.text
        assert (await h.get(client, workspace, campaign_id))["basic_details"] == details


class TestBtsWindowEnd:
    """`bts_details.window_end_time` is a date-time after the start, or a time of day."""

    WINDOW_END = "scheduling_details.bts_details.window_end_time"

    @staticmethod
    def _with_window_end(value: str) -> dict[str, Any]:
        body = copy.deepcopy(PAYLOADS["email_one_time_promotional"])
        body["scheduling_details"]["bts_details"]["window_end_time"] = value
        return body

    @pytest.mark.parametrize(
        ("value", "code"), [("garbage", "INVALID_TYPE"), ("2030-04-01T05:00:00Z", "OUT_OF_RANGE")]
    )
    async def test_create_and_update_refuse_it(
        self, client: httpx.AsyncClient, workspace: Tenant, value: str, code: str
    ) -> None:
        created = await _create(client, workspace, self._with_window_end(value))
        assert created.status_code == 400
        assert (code, self.WINDOW_END) in {
            (d["code"], d["target"]) for d in created.json()["error"]["details"]
        }
        campaign_id = await _created_id(client, workspace, PAYLOADS["email_one_time_promotional"])
        scheduling = self._with_window_end(value)["scheduling_details"]
        patched = await client.patch(
            f"{BASE}/{campaign_id}",
            json={"scheduling_details": scheduling},
            headers=workspace.write_headers(campaigns=True),
        )
        assert patched.status_code == 400
        assert (code, self.WINDOW_END) in {
            (d["code"], d["target"]) for d in patched.json()["error"]["details"]
        }

    async def test_validate_and_publish_refuse_a_stored_unreadable_one(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Stored before the rule (or written around it): reported, not defaulted at send.
        campaign_id = await _created_id(client, workspace, PAYLOADS["email_one_time_promotional"])
        async with app.state.herald.database.writer() as session:
            row = (await session.scalars(select(Campaign).where(Campaign.campaign_id == campaign_id))).one()
            components = copy.deepcopy(row.components)
            components["scheduling_details"]["bts_details"]["window_end_time"] = "garbage"
            row.components = components
            await session.commit()
        validated = await client.post(
            f"{BASE}/{campaign_id}/validate", headers=workspace.headers(campaigns=True)
        )
        assert validated.status_code == 200
        assert validated.json()["data"]["valid"] is False
        assert self.WINDOW_END in {error["field"] for error in validated.json()["data"]["errors"]}
        published = await h.v1_patch(client, workspace, campaign_id)
        assert published.status_code == 422
        assert (await h.get(client, workspace, campaign_id))["status"] == "DRAFT"


class TestValidate:
    async def test_incomplete_draft_is_200_valid_false(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_EMAIL)
        response = await client.post(
            f"{BASE}/{campaign_id}/validate", headers=workspace.headers(campaigns=True)
        )
        assert response.status_code == 200
        data = response.json()["data"]
        assert data["valid"] is False
        assert data["errors"]
        assert set(data["errors"][0]) == {"field", "issue", "code"}

    async def test_validate_never_writes(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, PAYLOADS["email_one_time_promotional"])

        async def snapshot() -> tuple[Any, ...]:
            async with app.state.herald.database.reader() as session:
                row = (
                    await session.scalars(select(Campaign).where(Campaign.campaign_id == campaign_id))
                ).one()
                return tuple(getattr(row, column.key) for column in Campaign.__table__.columns)

        before = await snapshot()
        app.state.herald.clock.advance(timedelta(minutes=5))
        for _ in range(2):
            response = await client.post(
                f"{BASE}/{campaign_id}/validate",
                json={"request_id": "v"},
                headers=workspace.headers(campaigns=True),
            )
            assert response.status_code == 200
        assert await snapshot() == before

    async def test_validate_body_rejects_other_fields(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        campaign_id = await _created_id(client, workspace, MINIMAL_PUSH)
        for body, expected in (
            ({"status": "PUBLISH"}, [("UNKNOWN_FIELD", "status")]),
            ({"request_id": 7, "x": 1}, [("INVALID_TYPE", "request_id"), ("UNKNOWN_FIELD", "x")]),
            ([], [("INVALID_TYPE", "")]),
        ):
            response = await client.post(
                f"{BASE}/{campaign_id}/validate", json=body, headers=workspace.headers(campaigns=True)
            )
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["code"] == "VALIDATION_FAILED", body
            assert sorted((d["code"], d["target"]) for d in error["details"]) == expected, body
