"""POST /v1/event/{workspace_id}: record a user's actions, as a client sees it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from herald.ids import is_object_id
from tests.audience.conftest import Ingest, details, stored_events, stored_user, stored_users
from tests.factories import Tenant

NOW = datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)  # the frozen clock's start


class TestRecord:
    async def test_actions_are_stored_as_events(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        await ingest.customer("u1", {"first_name": "Ana"})
        response = await ingest.event(
            "u1",
            {"action": "viewed", "attributes": {"sku": "A1", "price": 9.5}, "platform": "ANDROID"},
            {"action": "purchased", "attributes": {"sku": "A1"}, "app_version": "5.2.0"},
        )
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert response.json()["type"] == "event"
        assert data["customer_id"] == "u1"
        assert data["accepted"] == 2
        assert data["user_created"] is False
        assert all(is_object_id(event_id) for event_id in data["event_ids"])
        events = await stored_events(app, workspace.workspace_id)
        assert [(e.id, e.action, e.attributes, e.platform, e.app_version) for e in events] == [
            (data["event_ids"][0], "viewed", {"sku": "A1", "price": 9.5}, "ANDROID", None),
            (data["event_ids"][1], "purchased", {"sku": "A1"}, None, "5.2.0"),
        ]
        assert all(e.occurred_at == NOW and e.received_at == NOW for e in events)

    async def test_one_of_concurrent_first_events_says_it_created_the_user(self, ingest: Ingest) -> None:
        # Each request sees no user and inserts one; only the insert that wrote it says so.
        answers = await asyncio.gather(*(ingest.event("racer", {"action": "app_open"}) for _ in range(10)))
        assert [answer.status_code for answer in answers] == [200] * 10
        assert sum(answer.json()["data"]["user_created"] for answer in answers) == 1

    async def test_unknown_customer_is_created(self, app: FastAPI, ingest: Ingest, workspace: Tenant) -> None:
        response = await ingest.event("newcomer", {"action": "app_open"})
        assert response.json()["data"]["user_created"] is True
        user = await stored_user(app, workspace.workspace_id, "newcomer")
        assert user is not None
        assert user.attributes == {}
        assert user.created_at == NOW

    async def test_event_attributes_follow_the_attribute_rules(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        await ingest.event(
            "u1",
            {
                "action": "booked",
                "attributes": {"at": "2026-02-01T10:00:00+01:00", "seats": [1, 2], "note": None},
            },
        )
        [event] = await stored_events(app, workspace.workspace_id)
        assert event.attributes == {"at": "2026-02-01T09:00:00Z", "seats": [1, 2]}

    @pytest.mark.parametrize(
        ("current_time", "expected"),
        [
            (1_768_000_000, datetime(2026, 1, 9, 23, 6, 40, tzinfo=UTC)),
            (1_768_000_000.5, datetime(2026, 1, 9, 23, 6, 40, 500000, tzinfo=UTC)),
            ("2026-01-10T08:00:00Z", datetime(2026, 1, 10, 8, 0, tzinfo=UTC)),
            ("2026-01-10T09:00:00+01:00", datetime(2026, 1, 10, 8, 0, tzinfo=UTC)),
            ("2026-01-10T08:00:00", datetime(2026, 1, 10, 8, 0, tzinfo=UTC)),
            ("2026-01-15T12:05:00Z", datetime(2026, 1, 15, 12, 5, tzinfo=UTC)),  # at the tolerance
        ],
    )
    async def test_current_time_sets_when_it_happened(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant, current_time: Any, expected: datetime
    ) -> None:
        response = await ingest.event("u1", {"action": "a", "current_time": current_time})
        assert response.status_code == 200, response.text
        [event] = await stored_events(app, workspace.workspace_id)
        assert event.occurred_at == expected
        assert event.received_at == NOW

    async def test_user_time_and_offset_are_accepted(self, ingest: Ingest) -> None:
        response = await ingest.event(
            "u1", {"action": "a", "user_time": "2026-01-15T17:30:00", "user_timezone_offset": 19800}
        )
        assert response.status_code == 200


class TestFutureDated:
    async def test_more_than_five_minutes_ahead_is_refused(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        ahead = (NOW + timedelta(minutes=5, seconds=1)).isoformat()
        response = await ingest.event("u1", {"action": "ok"}, {"action": "later", "current_time": ahead})
        assert response.status_code == 400
        assert details(response) == {("OUT_OF_RANGE", "actions.1.current_time")}
        assert "future" in response.json()["error"]["message"]
        assert await stored_events(app, workspace.workspace_id) == []
        assert await stored_users(app, workspace.workspace_id) == {}

    async def test_epoch_seconds_ahead_are_refused_too(self, ingest: Ingest) -> None:
        ahead = int((NOW + timedelta(hours=1)).timestamp())
        response = await ingest.event("u1", {"action": "a", "current_time": ahead})
        assert details(response) == {("OUT_OF_RANGE", "actions.0.current_time")}

    async def test_the_same_time_is_accepted_once_the_clock_has_caught_up(
        self, ingest: Ingest, clock: FrozenClock
    ) -> None:
        at = (NOW + timedelta(minutes=30)).isoformat()
        assert (await ingest.event("u1", {"action": "a", "current_time": at})).status_code == 400
        clock.advance(minutes=26)
        assert (await ingest.event("u1", {"action": "a", "current_time": at})).status_code == 200


class TestValidation:
    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ({"type": "event", "customer_id": "u1"}, ("REQUIRED_FIELD_MISSING", "actions")),
            ({"type": "event", "customer_id": "u1", "actions": []}, ("OUT_OF_RANGE", "actions")),
            ({"type": "event", "actions": [{"action": "a"}]}, ("REQUIRED_FIELD_MISSING", "customer_id")),
            (
                {"type": "customer", "customer_id": "u1", "actions": [{"action": "a"}]},
                ("INVALID_ENUM_VALUE", "type"),
            ),
            (
                {"type": "event", "customer_id": "u1", "actions": [{}]},
                ("REQUIRED_FIELD_MISSING", "actions.0.action"),
            ),
            (
                {"type": "event", "customer_id": "u1", "actions": [{"action": ""}]},
                ("OUT_OF_RANGE", "actions.0.action"),
            ),
            (
                {"type": "event", "customer_id": "u1", "actions": [{"action": "a", "extra": 1}]},
                ("UNKNOWN_FIELD", "actions.0.extra"),
            ),
            (
                {"type": "event", "customer_id": "u1", "actions": [{"action": "a\x85"}]},
                ("INVALID_TYPE", "actions.0.action"),
            ),
            (
                {"type": "event", "customer_id": "u1", "actions": "a"},
                ("INVALID_TYPE", "actions"),
            ),
        ],
    )
    async def test_bad_body_is_400_at_the_path(
        self, ingest: Ingest, body: dict[str, Any], expected: tuple[str, str]
    ) -> None:
        response = await ingest.post("event", body)
        assert response.status_code == 400, response.text
        assert expected in details(response)

    @pytest.mark.parametrize(
        ("action", "expected"),
        [
            ({"current_time": "yesterday"}, ("INVALID_TYPE", "actions.0.current_time")),
            ({"current_time": True}, ("INVALID_TYPE", "actions.0.current_time")),
            ({"current_time": -1}, ("OUT_OF_RANGE", "actions.0.current_time")),
            # Spelt either way, a time before the epoch is out of range.
            ({"current_time": "0001-01-01T00:00:00Z"}, ("OUT_OF_RANGE", "actions.0.current_time")),
            ({"current_time": "1969-12-31T23:59:59Z"}, ("OUT_OF_RANGE", "actions.0.current_time")),
            ({"user_time": "1969-12-31T23:59:59"}, ("OUT_OF_RANGE", "actions.0.user_time")),
            # A date-time whose offset takes it past the calendar's ends is one, out of range.
            ({"current_time": "0001-01-01T00:00:00+14:00"}, ("OUT_OF_RANGE", "actions.0.current_time")),
            ({"current_time": "9999-12-31T23:59:59-14:00"}, ("OUT_OF_RANGE", "actions.0.current_time")),
            (
                {"attributes": {"at": "9999-12-31T23:59:59-01:00"}},
                ("OUT_OF_RANGE", "actions.0.attributes.at"),
            ),
            ({"attributes": {"at": "2026-02-30T10:00:00Z"}}, ("INVALID_TYPE", "actions.0.attributes.at")),
            ({"current_time": 10**13}, ("OUT_OF_RANGE", "actions.0.current_time")),
            ({"user_time": "soon"}, ("INVALID_TYPE", "actions.0.user_time")),
            ({"user_timezone_offset": 60000}, ("OUT_OF_RANGE", "actions.0.user_timezone_offset")),
            ({"user_timezone_offset": "+05:30"}, ("INVALID_TYPE", "actions.0.user_timezone_offset")),
            ({"platform": "x" * 33}, ("OUT_OF_RANGE", "actions.0.platform")),
            ({"app_version": 5}, ("INVALID_TYPE", "actions.0.app_version")),
            ({"attributes": {"obj": {"a": 1}}}, ("INVALID_TYPE", "actions.0.attributes.obj")),
            ({"attributes": {"": 1}}, ("INVALID_TYPE", "actions.0.attributes")),
            ({"attributes": []}, ("INVALID_TYPE", "actions.0.attributes")),
        ],
    )
    async def test_bad_action_is_400_at_its_path(
        self, ingest: Ingest, action: dict[str, Any], expected: tuple[str, str]
    ) -> None:
        response = await ingest.event("u1", {"action": "a", **action})
        assert response.status_code == 400, response.text
        assert expected in details(response)

    async def test_problems_of_every_action_are_reported(self, ingest: Ingest) -> None:
        response = await ingest.event(
            "u1",
            {"action": "a", "current_time": "nope"},
            {"action": "b"},
            {"action": "c", "attributes": {"x": [[]]}},
        )
        assert details(response) == {
            ("INVALID_TYPE", "actions.0.current_time"),
            ("INVALID_TYPE", "actions.2.attributes.x.0"),
        }

    async def test_too_many_actions_is_out_of_range(self, ingest: Ingest) -> None:
        response = await ingest.event("u1", *[{"action": "a"}] * 1001)
        assert ("OUT_OF_RANGE", "actions") in details(response)
