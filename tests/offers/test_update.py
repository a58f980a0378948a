"""O3 `PATCH /v5/offers/{offer_id}`: partial changes, status gates, validation, 404/403, idempotency."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from herald.clock import FrozenClock
from herald.offers.models import Offer, OfferTag
from herald.offers.rules.scheduling import zulu
from herald.services import Services
from tests.factories import Tenant, is_replay_of
from tests.offers.builders import OFFERS, create_id, details, import_offers, offer_body, seed_catalog

EDITOR = "editor@example.com"


async def _patch(client: httpx.AsyncClient, tenant: Tenant, offer_id: str, body: Any) -> httpx.Response:
    return await client.patch(f"{OFFERS}/{offer_id}", json=body, headers=tenant.write_headers())


async def _stored(app: FastAPI, offer_id: str) -> Offer:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        found = (
            await session.scalars(select(Offer).where(Offer.id == offer_id.removeprefix("offer_")))
        ).one()
    return found


async def _tag_links(app: FastAPI, offer_id: str) -> list[str]:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        query = select(OfferTag.tag_id).where(OfferTag.offer_id == offer_id.removeprefix("offer_"))
        return sorted((await session.scalars(query)).all())


@pytest.fixture
async def scheduled(client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock) -> str:
    """An SMV offering starting in an hour, running 30 days."""
    return await create_id(client, tenant, offer_body(clock.now()))


@pytest.fixture
async def active(client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock) -> str:
    """The same offering, but already running."""
    return await create_id(client, tenant, offer_body(clock.now(), "Running_Offer", starts_in=timedelta(0)))


class TestUpdated:
    async def test_update_answers_200_with_id_status_and_updated_at(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, scheduled: str
    ) -> None:
        clock.advance(minutes=5)
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, "priority": 50})
        assert response.status_code == 200, response.text
        assert response.json()["type"] == "offer"
        assert response.json()["data"] == {
            "id": scheduled,
            "status": "scheduled",
            "updated_at": "2026-01-15T12:05:00Z",
        }

    async def test_only_sent_fields_change(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        before = await _stored(app, scheduled)
        response = await _patch(
            client, tenant, scheduled, {"updated_by": EDITOR, "description": "New words."}
        )
        assert response.status_code == 200
        after = await _stored(app, scheduled)
        assert after.document == {**before.document, "description": "New words."}
        assert (after.name, after.priority, after.updated_by) == (before.name, before.priority, EDITOR)

    async def test_null_removes_an_optional_field(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, "description": None})
        assert response.status_code == 200
        assert "description" not in (await _stored(app, scheduled)).document

    @pytest.mark.parametrize(
        ("body", "target"),
        [({"name": None}, "name"), ({"scheduling": {"expiry_datetime": None}}, "scheduling.expiry_datetime")],
    )
    async def test_null_cannot_remove_what_a_create_requires(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str, body: dict[str, Any], target: str
    ) -> None:
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, **body})
        assert response.status_code == 400, response.text
        assert [(d["code"], d["target"]) for d in response.json()["error"]["details"]] == [
            ("REQUIRED_FIELD_MISSING", target)
        ]

    async def test_tags_are_replaced(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await seed_catalog(app, tenant)
        offer_id = await create_id(client, tenant, offer_body(clock.now(), tags=["seasonal01"]))
        assert await _tag_links(app, offer_id) == ["seasonal01"]
        response = await _patch(client, tenant, offer_id, {"updated_by": EDITOR, "tags": []})
        assert response.status_code == 200
        assert await _tag_links(app, offer_id) == []
        listed = (
            await client.get(OFFERS, params={"tags": "tag_seasonal01"}, headers=tenant.headers())
        ).json()
        assert listed["pagination"]["total_count"] == 0

    async def test_rename_frees_the_old_name(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, scheduled: str
    ) -> None:
        assert (
            await _patch(client, tenant, scheduled, {"updated_by": EDITOR, "name": "Renamed_Offer"})
        ).status_code == 200
        await create_id(client, tenant, offer_body(clock.now()))  # the old name, Winter_Sale_20

    async def test_moving_the_start_of_a_scheduled_offer_changes_its_status(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, scheduled: str
    ) -> None:
        start = {"scheduling": {"start_datetime": zulu(clock.now())}}
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, **start})
        assert response.status_code == 200
        assert response.json()["data"]["status"] == "active"

    async def test_drafts_can_be_completed_and_stay_drafts(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        [draft] = await import_offers(
            app, tenant, [{"name": "Draft_Offer", "created_by": "d@example.com", "status": "draft"}]
        )
        body = offer_body(clock.now(), "Draft_Offer")
        del body["created_by"]
        response = await _patch(client, tenant, draft, {"updated_by": EDITOR, **body})
        assert response.status_code == 200, response.text
        assert response.json()["data"]["status"] == "draft"


class TestGates:
    async def test_active_offer_keeps_start_conversion_and_variation_shape(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, active: str
    ) -> None:
        change = {
            "updated_by": EDITOR,
            "scheduling": {"start_datetime": zulu(clock.now() + timedelta(hours=1))},
            "conversion": {"primary": {"goal_name": "g", "action": "buy"}},
            "variation_meta": {
                "type": "SMV",
                "variantsPerLocale": ["A", "B"],
                "smv_distribution": {"split": {"A": 50, "B": 50}},
                "control_group": {"is_enabled": False, "percentage": 10},
            },
            "priority": 0,
        }
        response = await _patch(client, tenant, active, change)
        assert details(response) == {
            ("IMMUTABLE_FIELD", "scheduling.start_datetime"),
            ("IMMUTABLE_FIELD", "conversion"),
            ("IMMUTABLE_FIELD", "variation_meta.control_group.is_enabled"),
            ("OUT_OF_RANGE", "priority"),
        }

    async def test_active_offer_may_change_percentages_and_expiry(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, active: str
    ) -> None:
        change = {
            "updated_by": EDITOR,
            "scheduling": {"expiry_datetime": zulu(clock.now() + timedelta(days=60))},
            "variation_meta": {
                "type": "SMV",
                "variantsPerLocale": ["A", "B"],
                "smv_distribution": {"split": {"A": 80, "B": 20}},
                "control_group": {"is_enabled": True, "percentage": 25},
            },
            "name": "Still_Running",
        }
        response = await _patch(client, tenant, active, change)
        assert response.status_code == 200, response.text
        assert response.json()["data"]["status"] == "active"

    async def test_resending_unchanged_values_is_not_a_change(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, active: str
    ) -> None:
        body = offer_body(clock.now(), "Running_Offer", starts_in=timedelta(0))
        response = await _patch(client, tenant, active, {"updated_by": EDITOR, **body})
        assert response.status_code == 200, response.text

    async def test_the_creator_changes_as_any_o2_field_does(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        # Contract §4: O3 takes "any O2 field"; no status gate names `created_by` (it was refused in
        # every status, with a message naming the status).
        response = await _patch(
            client, tenant, scheduled, {"updated_by": EDITOR, "created_by": "x@example.com"}
        )
        assert response.status_code == 200, response.text
        listed = await client.get(OFFERS, params={"created_by": "x@example.com"}, headers=tenant.headers())
        assert [item["id"] for item in listed.json()["data"]] == [scheduled]

    async def test_expired_offer_is_403(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, scheduled: str
    ) -> None:
        clock.advance(days=31, hours=1)
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, "priority": 3})
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "EXPIRED_OFFERING"

    async def test_archived_offer_is_403(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        await client.post(f"{OFFERS}/{scheduled}/archive", headers=tenant.write_headers())
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, "priority": 3})
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "ARCHIVED_OFFERING"


class TestValidation:
    async def test_updated_by_is_required(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        assert details(await _patch(client, tenant, scheduled, {"priority": 3})) == {
            ("REQUIRED_FIELD_MISSING", "updated_by")
        }

    async def test_problems_are_collected_and_nothing_changes(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, scheduled: str
    ) -> None:
        await create_id(client, tenant, offer_body(clock.now(), "Other_Offer"))
        before = await _stored(app, scheduled)
        change = {
            "updated_by": "nobody",
            "name": "Other_Offer",
            "tags": ["missing"],
            "scheduling": {"expiry_datetime": zulu(clock.now() + timedelta(minutes=5))},
            "segment_info": None,
            "variation_meta": {
                "type": "SMV",
                "variantsPerLocale": ["A", "B", "C"],
                "smv_distribution": {"split": {"A": 100}},
            },
            "color": "blue",
        }
        response = await _patch(client, tenant, scheduled, change)
        assert details(response) == {
            ("INVALID_TYPE", "updated_by"),
            ("DUPLICATE_OFFER_NAME", "name"),
            ("INVALID_TAG_ID", "tags.0"),
            ("INVALID_SCHEDULING", "scheduling.expiry_datetime"),
            ("REQUIRED_FIELD_MISSING", "segment_info"),
            ("VARIANT_COUNT_MISMATCH", "offer_content.locales.en.variations"),
            ("VARIANT_COUNT_MISMATCH", "offer_content.locales.de.variations"),
            ("SPLIT_KEY_MISMATCH", "variation_meta.smv_distribution.split"),
            ("UNKNOWN_FIELD", "color"),
        }
        after = await _stored(app, scheduled)
        assert (after.name, after.document, after.updated_at) == (
            before.name,
            before.document,
            before.updated_at,
        )

    async def test_a_name_ending_in_a_newline_is_invalid(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        before = await _stored(app, scheduled)
        response = await _patch(client, tenant, scheduled, {"updated_by": EDITOR, "name": "Abcdef_nl\n"})
        assert details(response) == {("INVALID_OFFER_NAME", "name")}
        assert (await _stored(app, scheduled)).name == before.name

    @pytest.mark.parametrize("raw", [b'"priority"', b"[]", b"null"])
    async def test_body_that_is_not_an_object_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str, raw: bytes
    ) -> None:
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.patch(f"{OFFERS}/{scheduled}", content=raw, headers=headers)
        assert details(response) == {("INVALID_TYPE", "body")}

    async def test_no_body_is_a_malformed_request(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.patch(f"{OFFERS}/{scheduled}", headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"


class TestNotFound:
    @pytest.mark.parametrize(
        "offer_id", ["offer_" + "a" * 24, "offer_xyz", "65f1c0ffee0123456789abcd", "offer_" + "A" * 24]
    )
    async def test_unknown_or_malformed_id_is_404(
        self, client: httpx.AsyncClient, tenant: Tenant, offer_id: str
    ) -> None:
        response = await _patch(client, tenant, offer_id, {"updated_by": EDITOR})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "OFFER_NOT_FOUND"

    async def test_offer_of_another_workspace_is_404_and_untouched(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant, scheduled: str
    ) -> None:
        response = await _patch(client, other_tenant, scheduled, {"updated_by": EDITOR, "priority": 99})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "OFFER_NOT_FOUND"
        assert (await _stored(app, scheduled)).priority == 10


class TestIdempotency:
    async def test_repeat_replays_and_changes_once(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, scheduled: str
    ) -> None:
        headers = tenant.headers(idempotency_key=str(uuid.uuid4()))
        body = {"updated_by": EDITOR, "priority": 42}
        first = await client.patch(f"{OFFERS}/{scheduled}", json=body, headers=headers)
        clock.advance(minutes=1)
        again = await client.patch(f"{OFFERS}/{scheduled}", json=body, headers=headers)
        assert first.status_code == again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert is_replay_of(again, first)  # updated_at of the first, not a second update

    async def test_same_key_on_another_offer_is_409(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str, active: str
    ) -> None:
        headers = tenant.headers(idempotency_key=str(uuid.uuid4()))
        body = {"updated_by": EDITOR, "priority": 42}
        assert (await client.patch(f"{OFFERS}/{scheduled}", json=body, headers=headers)).status_code == 200
        response = await client.patch(f"{OFFERS}/{active}", json=body, headers=headers)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"

    async def test_missing_key_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant, scheduled: str
    ) -> None:
        response = await client.patch(
            f"{OFFERS}/{scheduled}", json={"updated_by": EDITOR}, headers=tenant.headers()
        )
        assert details(response) == {("MISSING_IDEMPOTENCY_KEY", "Idempotency-Key")}
