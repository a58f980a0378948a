"""POST /v1/transition/{workspace_id}: customers and events in bulk, all or nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI

from tests.audience.conftest import Ingest, details, stored_events, stored_users
from tests.factories import Tenant


def customer(customer_id: str, attributes: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "customer", "customer_id": customer_id, "attributes": attributes or {}, **extra}


def event(customer_id: str, *actions: dict[str, Any]) -> dict[str, Any]:
    return {"type": "event", "customer_id": customer_id, "actions": list(actions) or [{"action": "app_open"}]}


class TestApply:
    async def test_mixed_elements_are_applied_and_counted(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        await ingest.customer("old", {"plan": "free"})
        response = await ingest.transition(
            customer("new", {"plan": "gold"}),
            customer("old", {"plan": "gold"}),
            customer("ghost", {"plan": "gold"}, update_existing_only=True),
            event("new", {"action": "a"}, {"action": "b"}),
            event("stranger"),
        )
        assert response.status_code == 200, response.text
        assert response.json()["type"] == "transition"
        assert response.json()["data"] == {
            "elements": 5,
            "customers": {"created": 1, "updated": 1, "skipped": 1, "skipped_customer_ids": ["ghost"]},
            "events": {"accepted": 3, "users_created": 1},
        }
        users = await stored_users(app, workspace.workspace_id)
        assert set(users) == {"new", "old", "stranger"}
        assert users["old"].attributes == {"plan": "gold"}
        assert len(await stored_events(app, workspace.workspace_id)) == 3

    async def test_elements_apply_in_order(self, app: FastAPI, ingest: Ingest, workspace: Tenant) -> None:
        response = await ingest.transition(
            customer("u1", {"plan": "free", "city": "Madrid"}),
            customer("u1", {"plan": "gold", "email": "u1@example.com"}),
            customer("u1", {"city": None}),
            event("u2"),  # creates u2 ...
            customer("u2", {"plan": "trial"}, update_existing_only=True),  # ... so this updates it
        )
        assert response.json()["data"]["customers"] == {
            "created": 1,
            "updated": 3,
            "skipped": 0,
            "skipped_customer_ids": [],
        }
        users = await stored_users(app, workspace.workspace_id)
        assert users["u1"].attributes == {"plan": "gold"}
        assert users["u1"].email == "u1@example.com"
        assert users["u2"].attributes == {"plan": "trial"}

    async def test_a_full_transition_of_1000_elements_is_accepted(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        elements = [event(f"c{i // 2}") if i % 2 else customer(f"c{i // 2}", {"n": i}) for i in range(1000)]
        response = await ingest.transition(*elements)
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert data["customers"]["created"] == 500
        assert data["events"] == {"accepted": 500, "users_created": 0}
        users = await stored_users(app, workspace.workspace_id)
        assert len(users) == 500
        assert users["c7"].attributes == {"n": 14}


class TestConcurrentBatches:
    """Batches sharing users at once: each applies whole, none fails for another (SQLite's writers take
    turns; on PostgreSQL they run side by side, and took the shared users' row locks in opposite
    orders: deadlocks answered 500), and a user is counted created by the one batch that made it."""

    @staticmethod
    async def _all_at_once(ingest: Ingest, batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        answers = await asyncio.gather(*(ingest.transition(*batch) for batch in batches))
        assert [answer.status_code for answer in answers] == [200] * len(batches), [
            answer.text for answer in answers if answer.status_code != 200
        ]
        return [answer.json()["data"] for answer in answers]

    async def test_customers_in_opposite_orders_all_apply_and_are_created_once(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        ids = [f"shared{n:02}" for n in range(50)]
        batches = [
            [customer(customer_id, {f"k{i}": i}) for customer_id in (ids if i % 2 else ids[::-1])]
            for i in range(12)
        ]
        answers = await self._all_at_once(ingest, batches)
        assert sum(answer["customers"]["created"] for answer in answers) == 50
        assert sum(answer["customers"]["updated"] for answer in answers) == 50 * 11
        users = await stored_users(app, workspace.workspace_id)
        assert set(users) == set(ids)
        assert all(user.attributes == {f"k{i}": i for i in range(12)} for user in users.values())

    async def test_events_in_opposite_orders_create_each_user_once(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        ids = [f"shared{n:02}" for n in range(50)]
        batches = [[event(customer_id) for customer_id in (ids if i % 2 else ids[::-1])] for i in range(12)]
        answers = await self._all_at_once(ingest, batches)
        assert sum(answer["events"]["users_created"] for answer in answers) == 50
        assert set(await stored_users(app, workspace.workspace_id)) == set(ids)
        assert len(await stored_events(app, workspace.workspace_id)) == 50 * 12

    async def test_customers_and_events_of_existing_users_in_opposite_orders(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        ids = [f"shared{n:02}" for n in range(50)]
        await ingest.transition(
            *[customer(customer_id, {"push_id": f"t-{customer_id}"}) for customer_id in ids]
        )
        batches = [
            [
                *(customer(c, {"v": i, "platform": "ANDROID"}) for c in (ids if i % 2 else ids[::-1])),
                *(event(c) for c in (ids[::-1] if i % 2 else ids)),
            ]
            for i in range(12)
        ]
        answers = await self._all_at_once(ingest, batches)
        assert {answer["customers"]["updated"] for answer in answers} == {50}
        assert (
            sum(answer["customers"]["created"] + answer["events"]["users_created"] for answer in answers) == 0
        )


class TestAllOrNothing:
    async def test_one_bad_element_fails_all_with_every_problem(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        response = await ingest.transition(
            customer("fine", {"plan": "gold"}),
            customer("bad", {"timezone": "Atlantis/Capital"}),
            event("fine", {"action": "a"}, {"action": "b", "current_time": "2099-01-01T00:00:00Z"}),
            {"type": "segment"},
            {"customer_id": "x"},
            "text",
            event("fine", {"action": "c", "attributes": {"nested": {"no": 1}}}),
            customer("tb", {"push_id": "tb", "platform": "BLACKBERRY"}),
        )
        assert response.status_code == 400
        assert details(response) == {
            ("INVALID_ENUM_VALUE", "elements.1.attributes.timezone"),
            ("OUT_OF_RANGE", "elements.2.actions.1.current_time"),
            ("INVALID_ENUM_VALUE", "elements.3.type"),
            ("REQUIRED_FIELD_MISSING", "elements.4.type"),
            ("INVALID_TYPE", "elements.5"),
            ("INVALID_TYPE", "elements.6.actions.0.attributes.nested"),
            ("INVALID_ENUM_VALUE", "elements.7.attributes.platform"),
        }
        assert await stored_users(app, workspace.workspace_id) == {}
        assert await stored_events(app, workspace.workspace_id) == []

    async def test_more_than_1000_elements_is_out_of_range(self, ingest: Ingest) -> None:
        response = await ingest.transition(*[customer(f"c{i}") for i in range(1001)])
        assert response.status_code == 400
        assert details(response) == {("OUT_OF_RANGE", "elements")}

    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ({"type": "transition", "elements": []}, ("OUT_OF_RANGE", "elements")),
            ({"type": "transition"}, ("REQUIRED_FIELD_MISSING", "elements")),
            ({"type": "transition", "elements": {}}, ("INVALID_TYPE", "elements")),
            ({"elements": [customer("a")]}, ("REQUIRED_FIELD_MISSING", "type")),
            ({"type": "customer", "elements": [customer("a")]}, ("INVALID_ENUM_VALUE", "type")),
            ({"type": "transition", "elements": [customer("a")], "x": 1}, ("UNKNOWN_FIELD", "x")),
            ("transition", ("INVALID_TYPE", "")),
        ],
    )
    async def test_bad_envelope_is_400(self, ingest: Ingest, body: Any, expected: tuple[str, str]) -> None:
        response = await ingest.post("transition", body)
        assert response.status_code == 400
        assert expected in details(response)
