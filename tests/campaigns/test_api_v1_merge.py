"""L1 updates carry only the fields that change (contract §5 L1), through the HTTP API.

The sent fields of a component are merged into the stored one (objects field by field, arrays
replace, null removes); the merged campaign then meets C3's rules and editability by state. Each
scenario runs with and without `status: "PUBLISH"`.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.campaigns.v1_merge import merge
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import PAYLOADS, variant
from tests.factories import Tenant

ONE_TIME = "push_one_time_android_ios"  # published on the frozen clock's day: SCHEDULED (starts 2030)
ANDROID = "campaign_content.content.push.android"


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


@pytest.fixture(params=[False, True], ids=["update", "publish"])
def publish(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


async def _live(client: httpx.AsyncClient, tenant: Tenant) -> str:
    campaign_id = await h.create(client, tenant, PAYLOADS[ONE_TIME])
    await h.publish(client, tenant, campaign_id)
    return campaign_id


def _components(stored: dict[str, Any]) -> dict[str, Any]:
    """What an update may change: the stored campaign without its identity and provenance."""
    kept = ("id", "version_number", "updated_at", "updated_by", "revision")
    return {key: value for key, value in stored.items() if key not in kept}


class TestMerge:
    async def test_partial_scheduling_details_on_a_live_campaign_is_merged(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await _live(client, ws)
        before = await h.get(client, ws, campaign_id)
        assert before["status"] == "SCHEDULED"
        change = {"scheduling_details": {"expiry_time": "2030-10-25T23:59:00"}}
        response = await h.v1_patch(client, ws, campaign_id, change, publish=publish)
        assert response.status_code == 204, response.text
        after = await h.get(client, ws, campaign_id)
        expected = variant(before, {"scheduling_details.expiry_time": "2030-10-25T23:59:00"})
        assert _components(after) == _components(expected)
        assert after["status"] == "SCHEDULED"

    async def test_nested_objects_merge_field_by_field(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await _live(client, ws)
        before = await h.get(client, ws, campaign_id)
        change = {
            "campaign_content": {"content": {"push": {"android": {"basic_details": {"title": "Last day!"}}}}},
            "advanced": {"platform_level_priority": {"ios_specific_priority": {"relevance_score": 0.5}}},
        }
        response = await h.v1_patch(client, ws, campaign_id, change, publish=publish)
        assert response.status_code == 204, response.text
        after = await h.get(client, ws, campaign_id)
        expected = variant(
            before,
            {
                "campaign_content.content.push.android.basic_details.title": "Last day!",
                "advanced.platform_level_priority.ios_specific_priority.relevance_score": 0.5,
            },
        )
        assert _components(after) == _components(expected)

    async def test_arrays_replace_and_null_removes(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await _live(client, ws)
        before = await h.get(client, ws, campaign_id)
        pairs = [{"key": "source", "value": "l1"}]
        change = {
            "basic_details": {"tags": ["only"], "internal_note": None},
            "campaign_content": {
                "content": {
                    "push": {"android": {"basic_details": {"key_value_pairs": pairs, "summary": None}}}
                }
            },
        }
        response = await h.v1_patch(client, ws, campaign_id, change, publish=publish)
        assert response.status_code == 204, response.text
        after = await h.get(client, ws, campaign_id)
        expected = variant(
            before,
            {"basic_details.tags": ["only"], f"{ANDROID}.basic_details.key_value_pairs": pairs},
            drop=("basic_details.internal_note", f"{ANDROID}.basic_details.summary"),
        )
        assert _components(after) == _components(expected)

    async def test_a_not_editable_field_is_refused_as_c3_refuses_it(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await _live(client, ws)
        before = await h.get(client, ws, campaign_id)
        partial = {"scheduling_details": {"delivery_type": "ASAP"}}
        response = await h.v1_patch(client, ws, campaign_id, partial, publish=publish)
        whole = {"scheduling_details": merge(before["scheduling_details"], partial["scheduling_details"])}
        c3 = await client.patch(
            f"{h.BASE}/{campaign_id}", json=whole, headers=ws.write_headers(campaigns=True)
        )
        assert response.status_code == c3.status_code == 409
        error, c3_error = response.json()["error"], c3.json()["error"]
        assert error["code"] == c3_error["code"] == "INVALID_STATE"
        assert error["details"] == c3_error["details"]
        assert [detail["target"] for detail in error["details"]] == ["scheduling_details.delivery_type"]
        assert await h.get(client, ws, campaign_id) == before

    async def test_a_partial_change_of_a_component_locked_while_live_is_refused(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        await h.publish(client, ws, campaign_id)
        before = await h.get(client, ws, campaign_id)
        assert before["status"] == "ACTIVE"
        change = {"trigger_condition": {"included_filters": {"filter_operator": "or"}}}
        response = await h.v1_patch(client, ws, campaign_id, change, publish=publish)
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == "INVALID_STATE"
        assert [(d["code"], d["target"]) for d in error["details"]] == [("NOT_EDITABLE", "trigger_condition")]
        # Resending a stored value unchanged is no change, as on C3.
        same = {"trigger_condition": {"included_filters": {"filter_operator": "and"}}}
        assert (await h.v1_patch(client, ws, campaign_id, same, publish=publish)).status_code == 204
        assert _components(await h.get(client, ws, campaign_id)) == _components(before)

    async def test_an_invalid_merged_value_is_400_at_its_path(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await _live(client, ws)
        before = await h.get(client, ws, campaign_id)
        change = {
            "scheduling_details": {"expiry_time": "not a time"},
            "campaign_content": {"content": {"push": {"android": {"template_type": "NOPE"}}}},
        }
        response = await h.v1_patch(client, ws, campaign_id, change, publish=publish)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        targets = {detail["target"] for detail in error["details"]}
        assert targets == {"scheduling_details.expiry_time", f"{ANDROID}.template_type"}
        assert await h.get(client, ws, campaign_id) == before

    async def test_a_merged_campaign_that_breaks_a_rule_is_refused(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await _live(client, ws)
        before = await h.get(client, ws, campaign_id)
        # Valid alone, but before the stored start time.
        change = {"scheduling_details": {"expiry_time": "2030-10-19T09:30:00"}}
        response = await h.v1_patch(client, ws, campaign_id, change, publish=publish)
        assert response.status_code == 400, response.text
        details = response.json()["error"]["details"]
        assert [detail["target"] for detail in details] == ["scheduling_details.expiry_time"]
        assert await h.get(client, ws, campaign_id) == before

    async def test_a_draft_component_sent_for_the_first_time_must_be_whole(
        self, client: httpx.AsyncClient, ws: Tenant, publish: bool
    ) -> None:
        campaign_id = await h.create(client, ws, {**PAYLOADS[ONE_TIME], "utm_params": None})
        response = await h.v1_patch(
            client, ws, campaign_id, {"utm_params": {"utm_source": "a"}}, publish=publish
        )
        assert response.status_code == 400
        assert [d["target"] for d in response.json()["error"]["details"]] == ["utm_params.utm_medium"]


class TestMergeRule:
    """The merge itself, as a table of cases."""

    @pytest.mark.parametrize(
        ("stored", "sent", "merged"),
        [
            ({"a": 1, "b": 2}, {"b": 3}, {"a": 1, "b": 3}),
            ({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}, {"a": {"x": 1, "y": 3}}),
            ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
            ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
            ({"a": 1}, {"b": {"c": None, "d": 1}}, {"a": 1, "b": {"d": 1}}),
            ({"a": [1]}, {"a": {"x": 1}}, {"a": {"x": 1}}),
            ({"a": {"x": 1}}, {"a": "text"}, {"a": "text"}),
            (None, {"a": 1}, {"a": 1}),
            ({"a": 1}, {}, {"a": 1}),
        ],
    )
    def test_objects_merge_arrays_replace_null_removes(self, stored: Any, sent: Any, merged: Any) -> None:
        assert merge(stored, sent) == merged
