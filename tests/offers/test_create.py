"""O2 `POST /v5/offers`: shape, every validation code over HTTP, idempotency, races, tenancy."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from herald.offers import repository
from herald.workspaces.scopes import Scope
from tests.factories import Tenant, add_key, is_replay_of
from tests.offers.builders import (
    OFFERS,
    TEMPLATE_ID,
    create,
    create_id,
    details,
    flat_body,
    offer_body,
    seed_catalog,
)

OFFER_ID = re.compile(r"^offer_[0-9a-f]{24}$")


async def _total(client: httpx.AsyncClient, tenant: Tenant) -> int:
    response = await client.get(OFFERS, headers=tenant.headers())
    return int(response.json()["pagination"]["total_count"])


class TestCreated:
    async def test_create_answers_201_with_id_status_and_created_at(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        body = await create(client, tenant, offer_body(clock.now()))
        assert body["type"] == "offer"
        assert body["response_id"].startswith("resp_")
        assert set(body["data"]) == {"id", "status", "created_at"}
        assert OFFER_ID.match(body["data"]["id"])
        assert body["data"]["status"] == "scheduled"
        assert body["data"]["created_at"] == "2026-01-15T12:00:00Z"

    async def test_offer_starting_now_is_active(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        body = await create(client, tenant, flat_body(clock.now(), starts_in=timedelta(0)))
        assert body["data"]["status"] == "active"

    async def test_created_offer_is_listed_with_its_tags(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await seed_catalog(app, tenant)
        offer_id = await create_id(
            client, tenant, offer_body(clock.now(), tags=["seasonal01", "tag_seasonal01"])
        )
        listed = (await client.get(OFFERS, headers=tenant.headers())).json()["data"]
        assert listed == [
            {
                "id": offer_id,
                "name": "Winter_Sale_20",
                "status": "scheduled",
                "tags": ["tag_seasonal01"],
                "created_at": "2026-01-15T12:00:00Z",
                "created_by": "owner@example.com",
            }
        ]

    async def test_rate_limit_headers_are_on_the_201(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        response = await client.post(OFFERS, json=flat_body(clock.now()), headers=tenant.write_headers())
        assert response.status_code == 201
        assert response.headers["X-RateLimit-Limit"] == "100"
        assert response.headers["X-RateLimit-Remaining"] == "99"

    async def test_read_only_key_is_403_er007(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        reader = await add_key(app, tenant, [Scope.OFFERS_READ])
        response = await client.post(OFFERS, json=flat_body(clock.now()), headers=reader.write_headers())
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("text/plain")


class TestValidation:
    async def test_every_problem_is_reported_in_one_400(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await seed_catalog(app, tenant)
        now = clock.now()
        await create(client, tenant, flat_body(now, "Taken_Name"))
        body = offer_body(
            now,
            "Taken_Name",
            priority=0,
            tags=["tag_missing"],
            colour="red",
            conversion={
                "primary": {
                    "goal_name": "g",
                    "action": "buy",
                    "is_revenue_tracking": True,
                    "revenue_amount": "order_value",
                },
                "secondary": [{"goal_name": "g", "action": "buy", "revenue_currency": "EURO"}],
            },
        )
        body["scheduling"] = {
            "start_datetime": "2026-01-01T00:00:00Z",
            "expiry_datetime": "2026-03-01T00:00:00Z",
            "timezone": "Atlantis/Capital",
        }
        body["variation_meta"]["smv_distribution"]["split"] = {"A": 60, "C": 60}
        body["offer_content"]["locales"]["de"]["variations"]["A"]["content_1"] = {
            "type": "template",
            "value": {"headline": "Hi"},
            "meta": {"templateId": TEMPLATE_ID},
        }
        body["offer_content"]["locales"]["en"]["variations"]["A"]["content_1"] = {
            "type": "template",
            "value": {},
            "meta": {"templateId": "no_such_template"},
        }
        response = await client.post(OFFERS, json=body, headers=tenant.write_headers())
        assert details(response) == {
            ("DUPLICATE_OFFER_NAME", "name"),
            ("OUT_OF_RANGE", "priority"),
            ("INVALID_TAG_ID", "tags.0"),
            ("UNKNOWN_FIELD", "colour"),
            ("INVALID_TIMEZONE", "scheduling.timezone"),
            ("INVALID_SCHEDULING", "scheduling.start_datetime"),
            ("INVALID_SPLIT", "variation_meta.smv_distribution.split"),
            ("SPLIT_KEY_MISMATCH", "variation_meta.smv_distribution.split"),
            ("MISSING_TEMPLATE_FIELD", "offer_content.locales.de.variations.A.content_1.value.image_url"),
            ("INVALID_TEMPLATE_ID", "offer_content.locales.en.variations.A.content_1.meta.templateId"),
            ("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.revenue_currency"),
            ("INVALID_CURRENCY_CODE", "conversion.secondary.0.revenue_currency"),
            ("REVENUE_FIELDS_INCOMPLETE", "conversion.secondary.0.is_revenue_tracking"),
        }
        assert response.json()["error"]["message"] == "The request has 13 validation errors."
        assert await _total(client, tenant) == 1

    @pytest.mark.parametrize(
        ("overrides", "expected"),
        [
            ({"name": "no"}, ("INVALID_OFFER_NAME", "name")),
            ({"name": "Abcdef_nl\n"}, ("INVALID_OFFER_NAME", "name")),  # a whole match, not up to a newline
            ({"delivery": "now"}, ("INVALID_ENUM_VALUE", "delivery")),
            ({"created_by": "nobody"}, ("INVALID_TYPE", "created_by")),
            (
                {
                    "scheduling": {
                        "start_datetime": "2026-02-01T00:00:00+02:00",
                        "expiry_datetime": "2026-03-01T00:00:00Z",
                    }
                },
                ("INVALID_TYPE", "scheduling.start_datetime"),
            ),
            (
                {
                    "scheduling": {
                        "start_datetime": "2026-01-15T12:00:00Z",
                        "expiry_datetime": "2026-01-15T12:05:00Z",
                    }
                },
                ("INVALID_SCHEDULING", "scheduling.expiry_datetime"),
            ),
            (
                {
                    "scheduling": {
                        "start_datetime": "2026-02-01T00:00:00Z",
                        "expiry_datetime": "2026-02-01T00:00:00Z",
                    }
                },
                ("INVALID_SCHEDULING", "scheduling.expiry_datetime"),
            ),
            (
                {"variation_meta": {"type": "SMV", "variantsPerLocale": ["A"]}},
                ("VARIANT_COUNT_MISMATCH", "offer_content.locales.en.variations"),
            ),
            (
                {
                    "segment_info": {
                        "filters": {"excluded_filters": {"filter_operator": "xor", "filters": []}}
                    }
                },
                ("INVALID_ENUM_VALUE", "segment_info.filters.excluded_filters.filter_operator"),
            ),
        ],
    )
    async def test_code_over_http(
        self,
        client: httpx.AsyncClient,
        tenant: Tenant,
        clock: FrozenClock,
        overrides: dict[str, Any],
        expected: tuple[str, str],
    ) -> None:
        response = await client.post(
            OFFERS, json=offer_body(clock.now(), **overrides), headers=tenant.write_headers()
        )
        assert expected in details(response)

    async def test_empty_object_lists_every_required_field(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post(OFFERS, json={}, headers=tenant.write_headers())
        assert details(response) == {
            ("REQUIRED_FIELD_MISSING", name)
            for name in (
                "name",
                "priority",
                "delivery",
                "created_by",
                "scheduling",
                "segment_info",
                "offer_content",
                "variation_meta",
            )
        }

    async def test_a_whole_number_past_64_bits_is_out_of_range_beside_the_other_problems(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        body = orjson.dumps(offer_body(clock.now(), priority=7, description="d" * 600))
        body = body.replace(b'"priority":7', b'"priority":100000000000000000000')
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.post(OFFERS, content=body, headers=headers)
        assert details(response) == {("OUT_OF_RANGE", "priority"), ("OUT_OF_RANGE", "description")}

    async def test_no_body_is_a_malformed_request(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.post(OFFERS, headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    @pytest.mark.parametrize("body", [[1, 2], None, "x", 3])
    async def test_body_that_is_not_an_object_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant, body: object
    ) -> None:
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.post(OFFERS, content=orjson.dumps(body), headers=headers)
        assert details(response) == {("INVALID_TYPE", "body")}

    async def test_malformed_json_is_400_bad_request(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.post(OFFERS, content=b'{"name": ', headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_archived_names_can_be_used_again(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        first = await create_id(client, tenant, flat_body(clock.now()))
        archived = await client.post(f"{OFFERS}/{first}/archive", headers=tenant.write_headers())
        assert archived.status_code == 200
        await create(client, tenant, flat_body(clock.now()))

    async def test_names_are_per_workspace(
        self, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant, clock: FrozenClock
    ) -> None:
        await create(client, tenant, flat_body(clock.now()))
        await create(client, other_tenant, flat_body(clock.now()))

    async def test_tags_and_templates_of_another_workspace_are_unknown(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        tenant: Tenant,
        other_tenant: Tenant,
        clock: FrozenClock,
    ) -> None:
        await seed_catalog(app, other_tenant)
        body = flat_body(
            clock.now(),
            tags=["seasonal01"],
            offer_content={
                "content_1": {
                    "type": "template",
                    "value": {"headline": "h", "image_url": "u"},
                    "meta": {"templateId": TEMPLATE_ID},
                }
            },
        )
        response = await client.post(OFFERS, json=body, headers=tenant.write_headers())
        assert details(response) == {
            ("INVALID_TAG_ID", "tags.0"),
            ("INVALID_TEMPLATE_ID", "offer_content.content_1.meta.templateId"),
        }

    async def test_name_taken_between_check_and_write_is_still_duplicate(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await create(client, tenant, flat_body(clock.now()))

        async def nothing_taken(*_args: object, **_kwargs: object) -> frozenset[str]:
            return frozenset()  # as if a concurrent create committed right after our check

        monkeypatch.setattr(repository, "live_names", nothing_taken)
        response = await client.post(OFFERS, json=flat_body(clock.now()), headers=tenant.write_headers())
        assert details(response) == {("DUPLICATE_OFFER_NAME", "name")}
        assert await _total(client, tenant) == 1


class TestIdempotency:
    async def test_missing_key_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        response = await client.post(OFFERS, json=flat_body(clock.now()), headers=tenant.headers())
        assert details(response) == {("MISSING_IDEMPOTENCY_KEY", "Idempotency-Key")}

    @pytest.mark.parametrize("key", ["not-a-uuid", str(uuid.uuid1()), "12345678-1234-1234-1234-123456789012"])
    async def test_key_that_is_not_uuid4_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, key: str
    ) -> None:
        response = await client.post(
            OFFERS, json=flat_body(clock.now()), headers=tenant.headers(idempotency_key=key)
        )
        assert details(response) == {("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key")}

    async def test_repeat_replays_the_same_201(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        headers = tenant.write_headers()
        first = await client.post(OFFERS, json=flat_body(clock.now()), headers=headers)
        again = await client.post(OFFERS, json=flat_body(clock.now()), headers=headers)
        assert (first.status_code, again.status_code) == (201, 201)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert "Idempotent-Replayed" not in first.headers
        assert is_replay_of(again, first)
        assert await _total(client, tenant) == 1

    async def test_same_key_other_body_is_409_conflict(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        headers = tenant.write_headers()
        await client.post(OFFERS, json=flat_body(clock.now()), headers=headers)
        response = await client.post(OFFERS, json=flat_body(clock.now(), "Other_Name"), headers=headers)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
        assert await _total(client, tenant) == 1

    async def test_a_refused_create_does_not_use_up_the_key(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        headers = tenant.write_headers()
        refused = await client.post(OFFERS, json=flat_body(clock.now(), "bad"), headers=headers)
        assert refused.status_code == 400
        fixed = await client.post(OFFERS, json=flat_body(clock.now()), headers=headers)
        assert fixed.status_code == 201
        assert "Idempotent-Replayed" not in fixed.headers

    async def test_fifty_concurrent_creates_with_one_key_make_one_offer(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        headers = tenant.write_headers()
        body = flat_body(clock.now())
        responses = await asyncio.gather(
            *(client.post(OFFERS, json=body, headers=headers) for _ in range(50))
        )
        created = [r for r in responses if r.status_code == 201]
        originals = [r for r in created if "Idempotent-Replayed" not in r.headers]
        busy = [r for r in responses if r.status_code == 409]
        assert len(originals) == 1
        assert len(created) + len(busy) == 50
        assert all(is_replay_of(r, originals[0]) for r in created)
        assert all(r.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY" for r in busy)
        assert await _total(client, tenant) == 1
