"""POST /v1/customer/{workspace_id}: upsert a user, as a client sees it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from tests.audience.conftest import Ingest, details, stored_user, stored_users
from tests.factories import Tenant


class TestCreate:
    async def test_new_customer_is_created(self, ingest: Ingest, workspace: Tenant) -> None:
        response = await ingest.customer("u1", {"first_name": "Ana"})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["type"] == "customer"
        assert body["response_id"].startswith("resp_")
        assert body["data"] == {"customer_id": "u1", "result": "created"}
        assert "X-RateLimit-Remaining" in response.headers

    async def test_one_of_concurrent_first_writes_says_it_created_the_user(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        # Each request may read the user as unknown before any of them commits; only the write
        # that made it says "created", and every attribute sent is merged into the one row.
        answers = await asyncio.gather(*(ingest.customer("racer", {f"a{n}": n}) for n in range(10)))
        assert [answer.status_code for answer in answers] == [200] * 10
        results = sorted(answer.json()["data"]["result"] for answer in answers)
        assert results == ["created"] + ["updated"] * 9
        user = await stored_user(app, workspace.workspace_id, "racer")
        assert user is not None
        assert user.attributes == {f"a{n}": n for n in range(10)}

    async def test_standard_attributes_fill_columns_and_others_are_custom(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        attributes = {
            "email": "ana@example.com",
            "mobile": "+34 600 000 000",
            "first_name": "Ana",
            "last_name": "Pérez",
            "gaid": "38400000-8cf0-11bd-b23e-10b96e40000d",
            "push_id": "fcm:token",
            "timezone": "Europe/Madrid",
            "email_opt_out": True,
            "push_opt_out": False,
            "sms_opt_out": True,
            "plan": "gold",
            "ltv": 120.5,
            "orders": 3,
            "vip": True,
            "interests": ["shoes", "bags"],
        }
        assert (await ingest.customer("u1", attributes)).status_code == 200
        user = await stored_user(app, workspace.workspace_id, "u1")
        assert user is not None
        assert (user.email, user.mobile, user.first_name, user.last_name) == (
            "ana@example.com",
            "+34 600 000 000",
            "Ana",
            "Pérez",
        )
        assert (user.gaid, user.push_id, user.timezone) == (
            "38400000-8cf0-11bd-b23e-10b96e40000d",
            "fcm:token",
            "Europe/Madrid",
        )
        assert (user.email_opt_out, user.push_opt_out, user.sms_opt_out) == (True, False, True)
        assert user.attributes == {
            "plan": "gold",
            "ltv": 120.5,
            "orders": 3,
            "vip": True,
            "interests": ["shoes", "bags"],
        }

    async def test_datetimes_are_stored_as_utc_text(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        attributes = {
            "signed_up": "2025-06-01T10:30:00+02:00",
            "last_seen": "2025-06-01 08:00:00.123456",
            "trial_end": "2025-06-01T08:00Z",
            "visits": ["2025-01-01T00:00:00-05:00", "plain text"],
            "birthday": "1990-05-01",  # a date without a time of day is text
        }
        assert (await ingest.customer("u1", attributes)).status_code == 200
        user = await stored_user(app, workspace.workspace_id, "u1")
        assert user is not None
        assert user.attributes == {
            "signed_up": "2025-06-01T08:30:00Z",
            "last_seen": "2025-06-01T08:00:00Z",
            "trial_end": "2025-06-01T08:00:00Z",
            "visits": ["2025-01-01T05:00:00Z", "plain text"],
            "birthday": "1990-05-01",
        }

    async def test_attributes_may_be_left_out(self, app: FastAPI, ingest: Ingest, workspace: Tenant) -> None:
        response = await ingest.post("customer", {"type": "customer", "customer_id": "bare"})
        assert response.status_code == 200
        user = await stored_user(app, workspace.workspace_id, "bare")
        assert user is not None
        assert user.attributes == {}
        assert user.email_opt_out is False


class TestMerge:
    async def test_sent_keys_replace_and_others_stay(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant, clock: FrozenClock
    ) -> None:
        await ingest.customer(
            "u1", {"email": "a@example.com", "first_name": "Ana", "plan": "gold", "ltv": 10}
        )
        created_at = clock.now()
        clock.advance(minutes=10)
        response = await ingest.customer("u1", {"first_name": "Anna", "ltv": 12, "city": "Madrid"})
        assert response.json()["data"] == {"customer_id": "u1", "result": "updated"}
        user = await stored_user(app, workspace.workspace_id, "u1")
        assert user is not None
        assert user.email == "a@example.com"
        assert user.first_name == "Anna"
        assert user.attributes == {"plan": "gold", "ltv": 12, "city": "Madrid"}
        assert user.created_at == created_at
        assert user.updated_at == clock.now()

    async def test_null_unsets_an_attribute(self, app: FastAPI, ingest: Ingest, workspace: Tenant) -> None:
        await ingest.customer(
            "u1", {"email": "a@example.com", "push_opt_out": True, "plan": "gold", "ltv": 10}
        )
        await ingest.customer("u1", {"email": None, "push_opt_out": None, "plan": None})
        user = await stored_user(app, workspace.workspace_id, "u1")
        assert user is not None
        assert user.email is None
        assert user.push_opt_out is False
        assert user.attributes == {"ltv": 10}

    async def test_a_value_may_change_type(self, app: FastAPI, ingest: Ingest, workspace: Tenant) -> None:
        await ingest.customer("u1", {"score": "high"})
        await ingest.customer("u1", {"score": [1, 2]})
        user = await stored_user(app, workspace.workspace_id, "u1")
        assert user is not None
        assert user.attributes == {"score": [1, 2]}


class TestUpdateExistingOnly:
    async def test_unknown_customer_is_skipped_and_not_created(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        response = await ingest.customer("ghost", {"plan": "gold"}, update_existing_only=True)
        assert response.status_code == 200
        assert response.json()["data"] == {"customer_id": "ghost", "result": "skipped"}
        assert await stored_users(app, workspace.workspace_id) == {}

    async def test_known_customer_is_updated(self, app: FastAPI, ingest: Ingest, workspace: Tenant) -> None:
        await ingest.customer("u1", {"plan": "free"})
        response = await ingest.customer("u1", {"plan": "gold"}, update_existing_only=True)
        assert response.json()["data"]["result"] == "updated"
        user = await stored_user(app, workspace.workspace_id, "u1")
        assert user is not None
        assert user.attributes == {"plan": "gold"}

    async def test_false_creates(self, ingest: Ingest) -> None:
        response = await ingest.customer("u1", {}, update_existing_only=False)
        assert response.json()["data"]["result"] == "created"


INVALID_BODIES: list[tuple[str, dict[str, Any], tuple[str, str]]] = [
    ("no type", {"customer_id": "u1"}, ("REQUIRED_FIELD_MISSING", "type")),
    ("wrong type", {"type": "event", "customer_id": "u1"}, ("INVALID_ENUM_VALUE", "type")),
    ("no customer_id", {"type": "customer"}, ("REQUIRED_FIELD_MISSING", "customer_id")),
    ("empty customer_id", {"type": "customer", "customer_id": ""}, ("OUT_OF_RANGE", "customer_id")),
    ("numeric customer_id", {"type": "customer", "customer_id": 7}, ("INVALID_TYPE", "customer_id")),
    ("long customer_id", {"type": "customer", "customer_id": "x" * 201}, ("OUT_OF_RANGE", "customer_id")),
    ("newline in customer_id", {"type": "customer", "customer_id": "a\nb"}, ("INVALID_TYPE", "customer_id")),
    (
        "C1 escape in customer_id",
        {"type": "customer", "customer_id": "a\x9b31m"},
        ("INVALID_TYPE", "customer_id"),
    ),
    ("NEL in customer_id", {"type": "customer", "customer_id": "a\x85b"}, ("INVALID_TYPE", "customer_id")),
    ("blank customer_id", {"type": "customer", "customer_id": "  "}, ("INVALID_TYPE", "customer_id")),
    (
        "attributes array",
        {"type": "customer", "customer_id": "u", "attributes": []},
        ("INVALID_TYPE", "attributes"),
    ),
    ("unknown field", {"type": "customer", "customer_id": "u", "device": "x"}, ("UNKNOWN_FIELD", "device")),
    (
        "flag as string",
        {"type": "customer", "customer_id": "u", "update_existing_only": "yes"},
        ("INVALID_TYPE", "update_existing_only"),
    ),
]


class TestValidation:
    @pytest.mark.parametrize(("case", "body", "expected"), INVALID_BODIES, ids=[c[0] for c in INVALID_BODIES])
    async def test_bad_body_is_400_at_the_path(
        self, ingest: Ingest, case: str, body: dict[str, Any], expected: tuple[str, str]
    ) -> None:
        response = await ingest.post("customer", body)
        assert response.status_code == 400, case
        assert response.json()["error"]["code"] == "VALIDATION_FAILED"
        assert expected in details(response)

    @pytest.mark.parametrize(
        ("attributes", "expected"),
        [
            ({"email": "not-an-address"}, ("INVALID_TYPE", "attributes.email")),
            ({"email": 5}, ("INVALID_TYPE", "attributes.email")),
            ({"mobile": "call me"}, ("INVALID_TYPE", "attributes.mobile")),
            ({"first_name": "x" * 201}, ("OUT_OF_RANGE", "attributes.first_name")),
            ({"timezone": "Mars/Olympus"}, ("INVALID_ENUM_VALUE", "attributes.timezone")),
            ({"email_opt_out": "true"}, ("INVALID_TYPE", "attributes.email_opt_out")),
            ({"sms_opt_out": 1}, ("INVALID_TYPE", "attributes.sms_opt_out")),
            ({"n" * 129: 1}, ("OUT_OF_RANGE", "attributes." + "n" * 129)),
            ({" ": 1}, ("INVALID_TYPE", "attributes. ")),
            ({"tab\there": 1}, ("INVALID_TYPE", "attributes.tab\there")),
            ({"customer_id": "other"}, ("INVALID_TYPE", "attributes.customer_id")),
            ({"address": {"city": "Madrid"}}, ("INVALID_TYPE", "attributes.address")),
            ({"tags": ["a", ["b"]]}, ("INVALID_TYPE", "attributes.tags.1")),
            ({"tags": ["a", None]}, ("INVALID_TYPE", "attributes.tags.1")),
            ({"tags": list(range(1001))}, ("OUT_OF_RANGE", "attributes.tags")),
            ({"note": "x" * 10_001}, ("OUT_OF_RANGE", "attributes.note")),
            ({"when": "2025-02-30T10:00:00Z"}, ("INVALID_TYPE", "attributes.when")),
            ({f"a{i}": i for i in range(501)}, ("OUT_OF_RANGE", "attributes")),
            ({"push_id": "tb", "platform": "BLACKBERRY"}, ("INVALID_ENUM_VALUE", "attributes.platform")),
            ({"platform": "TV"}, ("INVALID_ENUM_VALUE", "attributes.platform")),
            ({"platform": ["IOS"]}, ("INVALID_ENUM_VALUE", "attributes.platform")),
            # A dotless i: Python upper-cases it to IOS.
            ({"platform": "\u0131os"}, ("INVALID_ENUM_VALUE", "attributes.platform")),
        ],
    )
    async def test_bad_attribute_is_400_at_its_path(
        self, ingest: Ingest, attributes: dict[str, Any], expected: tuple[str, str]
    ) -> None:
        response = await ingest.customer("u1", attributes)
        assert response.status_code == 400, response.text
        assert expected in details(response)

    async def test_an_unknown_push_platform_is_refused_and_nothing_is_stored(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        # It was stored, and a live ANDROID+IOS campaign then sent its push_id as an Android message.
        response = await ingest.customer("tb", {"push_id": "tb", "platform": "BLACKBERRY"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "VALIDATION_FAILED"
        assert response.json()["error"]["details"][0]["message"] == (
            "'platform' must be one of ANDROID, IOS, WEB (or null)."
        )
        assert await stored_users(app, workspace.workspace_id) == {}

    @pytest.mark.parametrize("platform", ["ANDROID", "IOS", "WEB", "ios", None])
    async def test_a_push_platform_is_taken_in_any_case(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant, platform: str | None
    ) -> None:
        response = await ingest.customer("u1", {"push_id": "t1", "platform": platform})
        assert response.status_code == 200, response.text

    async def test_a_whole_number_past_64_bits_is_kept_as_the_double_it_equals(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        # JSON has one number type: 2**64 is the number 1.8446744073709552e19 is, read as such
        # on every surface (`json_numbers.wide_as_doubles`), and stored as any double is.
        response = await ingest.customer("u1", {"big": 2**64})
        assert response.status_code == 200, response.text
        stored = (await stored_users(app, workspace.workspace_id))["u1"]
        assert stored.attributes["big"] == float(2**64)
        assert type(stored.attributes["big"]) is float

    async def test_every_problem_is_reported_and_nothing_is_written(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        response = await ingest.customer(
            "u1", {"email": "nope", "timezone": "Nowhere", "plan": "gold", "tags": [{}]}
        )
        assert response.status_code == 400
        assert details(response) == {
            ("INVALID_TYPE", "attributes.email"),
            ("INVALID_ENUM_VALUE", "attributes.timezone"),
            ("INVALID_TYPE", "attributes.tags.0"),
        }
        assert await stored_users(app, workspace.workspace_id) == {}

    async def test_empty_body_is_bad_request(self, ingest: Ingest, workspace: Tenant) -> None:
        response = await ingest.client.post(
            f"/v1/customer/{workspace.workspace_id}",
            content=b"",
            headers={**workspace.headers(), "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_body_that_is_not_an_object_is_400(self, ingest: Ingest) -> None:
        response = await ingest.post("customer", [1, 2])
        assert response.status_code == 400
        assert ("INVALID_TYPE", "") in details(response)

    async def test_invalid_json_is_bad_request(self, ingest: Ingest, workspace: Tenant) -> None:
        response = await ingest.client.post(
            f"/v1/customer/{workspace.workspace_id}",
            content=b'{"type": "customer",',
            headers={**workspace.headers(), "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"


async def test_datetime_normalisation_is_idempotent(
    app: FastAPI, ingest: Ingest, workspace: Tenant, clock: FrozenClock
) -> None:
    await ingest.customer("u1", {"seen": "2025-01-01T00:00:00Z"})
    clock.advance(timedelta(seconds=1))
    await ingest.customer("u1", {"seen": "2025-01-01T00:00:00Z"})
    user = await stored_user(app, workspace.workspace_id, "u1")
    assert user is not None
    assert user.attributes == {"seen": "2025-01-01T00:00:00Z"}
