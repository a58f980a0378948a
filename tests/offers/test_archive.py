"""O5 `POST /v5/offers/{offer_id}/archive`: any non-archived offering becomes archived, for good."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from tests.factories import Tenant, is_replay_of
from tests.offers.builders import OFFERS, create_id, details, flat_body, import_offers


def _archive_url(offer_id: str) -> str:
    return f"{OFFERS}/{offer_id}/archive"


async def _status(client: httpx.AsyncClient, tenant: Tenant, offer_id: str) -> str:
    body = (await client.get(OFFERS, params={"id": offer_id}, headers=tenant.headers())).json()
    return str(body["data"][0]["status"])


class TestArchive:
    async def test_archive_answers_200_and_the_offer_is_archived(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        clock.advance(minutes=2)
        response = await client.post(_archive_url(offer_id), headers=tenant.write_headers())
        assert response.status_code == 200
        assert response.json()["type"] == "offer"
        assert response.json()["data"] == {
            "id": offer_id,
            "status": "archived",
            "updated_at": "2026-01-15T12:02:00Z",
        }
        assert await _status(client, tenant, offer_id) == "archived"

    @pytest.mark.parametrize("raw", [b"null", b"[]", b"1"])
    async def test_a_body_that_is_not_an_object_is_400_and_archives_nothing(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, raw: bytes
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        headers = {**tenant.write_headers(), "Content-Type": "application/json"}
        response = await client.post(_archive_url(offer_id), content=raw, headers=headers)
        assert details(response) == {("INVALID_TYPE", "body")}
        assert await _status(client, tenant, offer_id) != "archived"

    @pytest.mark.parametrize("starts_in", [timedelta(0), timedelta(hours=2)])
    async def test_active_and_scheduled_offers_can_be_archived(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, starts_in: timedelta
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now(), starts_in=starts_in))
        assert (await client.post(_archive_url(offer_id), headers=tenant.write_headers())).status_code == 200

    async def test_expired_offers_can_be_archived(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now(), runs_for=timedelta(hours=1)))
        clock.advance(hours=3)
        assert await _status(client, tenant, offer_id) == "expired"
        assert (await client.post(_archive_url(offer_id), headers=tenant.write_headers())).status_code == 200

    async def test_drafts_can_be_archived(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        [draft] = await import_offers(
            app, tenant, [{"name": "Draft_Offer", "created_by": "d@example.com", "status": "draft"}]
        )
        assert (await client.post(_archive_url(draft), headers=tenant.write_headers())).status_code == 200
        assert await _status(client, tenant, draft) == "archived"

    async def test_updated_by_may_be_sent(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        response = await client.post(
            _archive_url(offer_id), json={"updated_by": "boss@example.com"}, headers=tenant.write_headers()
        )
        assert response.status_code == 200

    async def test_bad_body_is_400_and_nothing_changes(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        response = await client.post(
            _archive_url(offer_id), json={"updated_by": "boss", "reason": "x"}, headers=tenant.write_headers()
        )
        assert details(response) == {("INVALID_TYPE", "updated_by"), ("UNKNOWN_FIELD", "reason")}
        assert await _status(client, tenant, offer_id) == "scheduled"

    async def test_archiving_twice_is_403(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        await client.post(_archive_url(offer_id), headers=tenant.write_headers())
        response = await client.post(_archive_url(offer_id), headers=tenant.write_headers())
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "ARCHIVED_OFFERING"

    async def test_repeat_with_the_same_key_replays_the_200(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        headers = tenant.headers(idempotency_key=str(uuid.uuid4()))
        first = await client.post(_archive_url(offer_id), headers=headers)
        again = await client.post(_archive_url(offer_id), headers=headers)
        assert first.status_code == again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert is_replay_of(again, first)

    async def test_a_retry_with_an_empty_object_for_no_body_replays(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        # The body is optional: no body and `{}` ask the same (a retry of one as the other was 409).
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        headers = tenant.headers(idempotency_key=str(uuid.uuid4()))
        first = await client.post(_archive_url(offer_id), headers=headers)
        again = await client.post(_archive_url(offer_id), json={}, headers=headers)
        assert (first.status_code, again.status_code) == (200, 200), again.text
        assert again.headers["Idempotent-Replayed"] == "true"

    async def test_missing_key_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        response = await client.post(_archive_url(offer_id), headers=tenant.headers())
        assert details(response) == {("MISSING_IDEMPOTENCY_KEY", "Idempotency-Key")}


class TestNotFound:
    async def test_offer_of_another_workspace_is_404_and_untouched(
        self, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        response = await client.post(_archive_url(offer_id), headers=other_tenant.write_headers())
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "OFFER_NOT_FOUND"
        assert await _status(client, tenant, offer_id) == "scheduled"

    @pytest.mark.parametrize("offer_id", ["offer_" + "b" * 24, "offer_", "nothing"])
    async def test_unknown_id_is_404(self, client: httpx.AsyncClient, tenant: Tenant, offer_id: str) -> None:
        response = await client.post(_archive_url(offer_id), headers=tenant.write_headers())
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "OFFER_NOT_FOUND"
