"""Idempotency-Key semantics (contract §7), proven on small routes mounted only in these tests.

The routes write a workspace tag inside the request's unit of work, so "exactly one effect" and
"nothing written on failure" can be checked by counting tags.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from sqlalchemy import func, select
from starlette.requests import Request
from starlette.responses import Response

from herald.clock import FrozenClock
from herald.config import Settings
from herald.errors import Unprocessable, ValidationFailed
from herald.http.auth import Caller
from herald.http.operation import Operation, guarded, services_of, unit_of_work
from herald.http.ratelimit import RateLimitStore
from herald.http.responses import json_response, response_id
from herald.main import create_app
from herald.problems import Problem
from herald.workspaces import service as workspaces_service
from herald.workspaces.models import Tag
from herald.workspaces.scopes import Scope
from tests.factories import Tenant, is_replay_of, make_tenant

WRITE = Operation("T1", Scope.CAMPAIGNS_CREATE_MANAGE, "campaign_ops", campaigns=True, idempotency="required")
# Like the test sends: the handler commits its own work, the key is claimed in a transaction of its own.
OWN_SESSIONS = Operation(
    "T3",
    Scope.CAMPAIGNS_CREATE_MANAGE,
    "campaign_ops",
    campaigns=True,
    idempotency="required",
    request_transaction=False,
)
OPTIONAL = Operation("T2", Scope.CAMPAIGNS_VIEW, "campaign_ops", campaigns=True, idempotency="optional")
PATH = "/test/tags"
OWN_PATH = "/test/tags-own-sessions"
N_CONCURRENT = 50


@dataclass
class InFlight:
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _router() -> APIRouter:
    router = APIRouter()

    @router.post(PATH, status_code=201)
    async def create_tag(request: Request, caller: Annotated[Caller, guarded(WRITE)]) -> Response:
        payload = await request.json()
        session = unit_of_work(request).session()
        tag = await workspaces_service.create_tag(
            session, services_of(request).clock.now(), caller.workspace_id, payload["name"]
        )
        if payload.get("then") == "422":
            raise Unprocessable("refused after writing")
        if payload.get("then") == "400":
            raise ValidationFailed([Problem("INVALID_TYPE", "name", "refused after writing")])
        if payload.get("then") == "crash":
            raise RuntimeError("boom")
        if payload.get("then") == "wait":  # stay in flight until the test lets go
            held: InFlight = request.app.state.in_flight
            held.entered.set()
            await held.release.wait()
        return json_response({"response_id": response_id(request), "data": {"id": tag.id}}, status=201)

    @router.post(OWN_PATH, status_code=201)
    async def create_tag_in_own_session(
        request: Request, caller: Annotated[Caller, guarded(OWN_SESSIONS)]
    ) -> Response:
        payload = await request.json()
        services = services_of(request)
        async with services.database.writer() as session:
            tag = await workspaces_service.create_tag(
                session, services.clock.now(), caller.workspace_id, payload["name"]
            )
            await session.commit()
        return json_response({"response_id": response_id(request), "data": {"id": tag.id}}, status=201)

    @router.post("/test/optional")
    async def optional(request: Request, caller: Annotated[Caller, guarded(OPTIONAL)]) -> Response:
        return json_response({"response_id": response_id(request), "data": {"ok": True}})

    return router


@pytest.fixture
async def app_with_routes(app: FastAPI) -> FastAPI:
    app.router.routes.extend(_router().routes)  # as `herald.main` adds its routers' routes
    return app


async def _tag_count(app: FastAPI, workspace_id: str) -> int:
    async with app.state.herald.database.reader() as session:
        count = await session.scalar(
            select(func.count()).select_from(Tag).where(Tag.workspace_id == workspace_id)
        )
    return int(count or 0)


def _headers(tenant: Tenant, key: str | None) -> dict[str, str]:
    return tenant.headers(campaigns=True, idempotency_key=key)


class TestKeyHeader:
    async def test_missing_key_is_400(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, None))
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "MISSING_IDEMPOTENCY_KEY"
        assert response.json()["error"]["details"][0]["target"] == "Idempotency-Key"

    async def test_every_fault_of_the_head_and_query_is_in_one_answer_and_costs_no_quota(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        # Contract §3: all violations in one response. The key's was reported alone, after the
        # request id's or the query's had been fixed, and after the rate limit had taken its slot.
        headers = {**_headers(tenant, None), "X-SVC-Request-Id": "not-a-uuid"}
        response = await client.post(PATH + "?note=%00", json={"name": "a"}, headers=headers)
        assert response.status_code == 400
        details = {(d["code"], d["target"]) for d in response.json()["error"]["details"]}
        assert details == {
            ("INVALID_TYPE", "X-SVC-Request-Id"),
            ("INVALID_TYPE", "note"),
            ("MISSING_IDEMPOTENCY_KEY", "Idempotency-Key"),
        }
        assert "X-RateLimit-Remaining" not in response.headers
        fine = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, str(uuid.uuid4())))
        assert fine.status_code == 201, fine.text
        limit = int(fine.headers["X-RateLimit-Limit"])
        assert int(fine.headers["X-RateLimit-Remaining"]) == limit - 1

    async def test_key_that_is_not_uuid4_is_400(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, "not-a-uuid"))
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "INVALID_IDEMPOTENCY_KEY"

    async def test_uuid1_is_not_accepted(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, str(uuid.uuid1())))
        assert response.status_code == 400

    @pytest.mark.parametrize(
        "key",
        [
            "0123456789ab4def8123456789abcdef",  # 32 bare digits
            "{01234567-89ab-4def-8123-456789abcdef}",
            "urn:0123456789ab4def8123456789abcdef",
        ],
    )
    async def test_only_the_hyphenated_form_the_document_states_is_a_key(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant, key: str
    ) -> None:
        response = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "INVALID_IDEMPOTENCY_KEY"

    async def test_a_key_in_upper_case_is_the_same_key(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        first = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        again = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key.upper()))
        assert first.status_code == again.status_code == 201, again.text
        assert again.headers["Idempotent-Replayed"] == "true"

    async def test_optional_key_may_be_absent(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post("/test/optional", json={}, headers=_headers(tenant, None))
        assert response.status_code == 200


class TestCampaignAuth:
    async def test_app_key_header_is_required(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        headers = tenant.headers(idempotency_key=str(uuid.uuid4()))
        response = await client.post(PATH, json={"name": "a"}, headers=headers)
        assert response.status_code == 401

    async def test_app_key_must_equal_basic_username(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
    ) -> None:
        headers = {**_headers(tenant, str(uuid.uuid4())), "SVC-APPKEY": other_tenant.workspace_id}
        response = await client.post(PATH, json={"name": "a"}, headers=headers)
        assert response.status_code == 401
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 0


class TestReplay:
    async def test_same_request_is_replayed_with_one_effect(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        first = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        second = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        assert first.status_code == second.status_code == 201
        assert is_replay_of(second, first)
        assert second.headers["Idempotent-Replayed"] == "true"
        assert "Idempotent-Replayed" not in first.headers
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1

    async def test_the_same_json_written_otherwise_is_the_same_request(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        headers = {**_headers(tenant, key), "Content-Type": "application/json"}
        first = await client.post(
            PATH, content=b'{"name": "a", "note": {"x": 1, "y": [1, 2]}}', headers=headers
        )
        again = await client.post(
            PATH, content=b'{\n  "note": {"y": [1,2], "x": 1},\n  "name":"a"\n}', headers=headers
        )
        assert (first.status_code, again.status_code) == (201, 201)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1

    async def test_different_body_is_409_conflict(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        response = await client.post(PATH, json={"name": "b"}, headers=_headers(tenant, key))
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1

    async def test_same_key_in_another_workspace_is_independent(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        response = await client.post(PATH, json={"name": "a"}, headers=_headers(other_tenant, key))
        assert response.status_code == 201
        assert "Idempotent-Replayed" not in response.headers

    async def test_key_expires_after_24_hours(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        key = str(uuid.uuid4())
        await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        clock.advance(hours=23, minutes=59)
        assert (await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))).headers.get(
            "Idempotent-Replayed"
        ) == "true"
        clock.advance(minutes=1)
        fresh = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        assert fresh.status_code == 201
        assert "Idempotent-Replayed" not in fresh.headers
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 2


class TestFailures:
    async def test_422_rolls_back_and_is_replayed(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        first = await client.post(PATH, json={"name": "a", "then": "422"}, headers=_headers(tenant, key))
        assert first.status_code == 422
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 0
        again = await client.post(PATH, json={"name": "a", "then": "422"}, headers=_headers(tenant, key))
        assert again.status_code == 422
        assert again.headers["Idempotent-Replayed"] == "true"

    async def test_more_refusals_at_once_than_the_pool_has_connections_are_each_kept(
        self, settings: Settings, clock: FrozenClock, limiter: RateLimitStore
    ) -> None:
        """Each refusal's record is written while its request's transaction still holds a
        connection (and, on PostgreSQL, the key): from the same pool, refusals as many as its
        connections each waited for a second one, until the pool's timeout."""
        app = create_app(dataclasses.replace(settings, db_pool_size=2), clock=clock, limiter=limiter)
        app.router.routes.extend(_router().routes)
        try:
            tenant = await make_tenant(app, rate_limits={"campaign_ops": "1000/second"})
            keys = [str(uuid.uuid4()) for _ in range(6)]
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://t"
            ) as client:

                async def refused(key: str) -> httpx.Response:
                    body = {"name": key[:8], "then": "422"}
                    return await client.post(PATH, json=body, headers=_headers(tenant, key))

                first = await asyncio.wait_for(asyncio.gather(*map(refused, keys)), 20)
                assert [answer.status_code for answer in first] == [422] * len(keys)
                again = await asyncio.gather(*map(refused, keys))
            assert [answer.headers.get("Idempotent-Replayed") for answer in again] == ["true"] * len(keys)
        finally:
            await app.state.herald.aclose()

    async def test_400_rolls_back_and_frees_the_key(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        first = await client.post(PATH, json={"name": "a", "then": "400"}, headers=_headers(tenant, key))
        assert first.status_code == 400
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 0
        # The client fixes the body and retries with the same key.
        fixed = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        assert fixed.status_code == 201
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1

    async def test_crash_is_500_envelope_without_effect_and_frees_the_key(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        crashed = await client.post(PATH, json={"name": "a", "then": "crash"}, headers=_headers(tenant, key))
        assert crashed.status_code == 500
        body = crashed.json()
        assert body["error"]["code"] == "INTERNAL_ERROR"
        assert "boom" not in crashed.text
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 0
        retried = await client.post(PATH, json={"name": "a"}, headers=_headers(tenant, key))
        assert retried.status_code == 201


class TestConcurrency:
    async def test_fifty_concurrent_duplicates_have_exactly_one_effect(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient
    ) -> None:
        tenant = await make_tenant(app_with_routes, rate_limits={"campaign_ops": "1000/second"})
        key = str(uuid.uuid4())
        responses = await asyncio.gather(
            *(
                client.post(PATH, json={"name": "same"}, headers=_headers(tenant, key))
                for _ in range(N_CONCURRENT)
            )
        )
        statuses = sorted(response.status_code for response in responses)
        assert set(statuses) <= {201, 409}
        fresh = [r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r.headers]
        assert len(fresh) == 1
        for response in responses:
            if response.status_code == 409:
                assert response.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
            else:
                assert response.json()["data"] == fresh[0].json()["data"]
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1

    async def test_a_duplicate_of_a_request_in_flight_never_runs_it_twice(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        held = app_with_routes.state.in_flight = InFlight()
        key = str(uuid.uuid4())
        body = {"name": "a", "then": "wait"}
        first = asyncio.create_task(client.post(PATH, json=body, headers=_headers(tenant, key)))
        await held.entered.wait()  # the first has written its tag and holds the key
        second = asyncio.create_task(client.post(PATH, json=body, headers=_headers(tenant, key)))
        if app_with_routes.state.herald.database.engine.dialect.name == "postgresql":
            # Its transaction holds the key's lock: the duplicate is told so at once (contract §7).
            busy = await second
            assert busy.status_code == 409
            assert busy.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
            held.release.set()
            assert (await first).status_code == 201
        else:
            # SQLite has one writer: the duplicate waits for the first to finish, then replays it.
            held.release.set()
            original, replayed = await first, await second
            assert original.status_code == replayed.status_code == 201
            assert replayed.headers["Idempotent-Replayed"] == "true"
            assert is_replay_of(replayed, original)
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1

    async def test_a_lease_runs_on_real_time_whatever_the_sandboxs_clock_says(
        self,
        app_with_routes: FastAPI,
        client: httpx.AsyncClient,
        tenant: Tenant,
        clock: FrozenClock,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # A sandbox's clock moved forward past the lease while the key's first request was still
        # in flight let a repeat through: a test send went out twice for one key.
        from herald.http import idempotency

        services = app_with_routes.state.herald
        real = FrozenClock(clock.now())
        monkeypatch.setattr(services, "lease_clock", real)
        key = str(uuid.uuid4())
        body = b'{"name":"a"}'
        claim = idempotency.Claim(
            tenant.workspace_id,
            tenant.key_id,
            key,
            idempotency.fingerprint("POST", OWN_PATH, body),
            lease_now=real.now(),
        )
        await idempotency.claim(services.database.writer, claim, clock.now())  # in flight
        headers = {**_headers(tenant, key), "Content-Type": "application/json"}
        clock.advance(idempotency.LEASE * 2)  # the sandbox's time jumps; a second passes
        real.advance(seconds=1)
        refused = await client.post(OWN_PATH, content=body, headers=headers)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
        real.advance(idempotency.LEASE)  # its process died: the lease ran out in real time
        assert (await client.post(OWN_PATH, content=body, headers=headers)).status_code == 201

    async def test_abandoned_claim_is_taken_over_after_its_lease(
        self, app_with_routes: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        from herald.http import idempotency

        key = str(uuid.uuid4())
        body = b'{"name":"a"}'
        claim = idempotency.Claim(
            tenant.workspace_id, tenant.key_id, key, idempotency.fingerprint("POST", OWN_PATH, body)
        )
        # A process claimed the key and died before finishing.
        await idempotency.claim(app_with_routes.state.herald.database.writer, claim, clock.now())
        headers = {**_headers(tenant, key), "Content-Type": "application/json"}
        assert (await client.post(OWN_PATH, content=body, headers=headers)).status_code == 409
        clock.advance(idempotency.LEASE + timedelta(seconds=1))
        taken_over = await client.post(OWN_PATH, content=body, headers=headers)
        assert taken_over.status_code == 201
        replayed = await client.post(OWN_PATH, content=body, headers=headers)
        assert replayed.headers["Idempotent-Replayed"] == "true"
        assert is_replay_of(replayed, taken_over)
        assert await _tag_count(app_with_routes, tenant.workspace_id) == 1


async def test_a_refusal_under_a_key_whose_record_expired_is_answered(
    app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    """The key's expired record is forgotten by the request's own transaction; its refusal (409)
    was then recorded beside that transaction, on a connection of its own, whose insert waited for
    it: on PostgreSQL the request never got an answer (the campaign row stayed locked)."""
    from tests.campaigns import lifecycle_helpers as h
    from tests.campaigns.payloads import PAYLOADS

    tenant = await h.workspace(app)
    campaign_id = await h.create(client, tenant, PAYLOADS["push_one_time_android_ios"])
    key = str(uuid.uuid4())
    headers = tenant.headers(campaigns=True, idempotency_key=key)
    details = PAYLOADS["push_one_time_android_ios"]["basic_details"]
    renamed = {"updated_by": "m@example.com", "basic_details": {**details, "name": "Renamed"}}
    assert (
        await client.patch(f"/v5/campaigns/{campaign_id}", json=renamed, headers=headers)
    ).status_code == 200
    await h.publish(client, tenant, campaign_id)
    assert (await h.action(client, tenant, campaign_id, "STOP")).status_code == 200
    clock.advance(hours=25)  # the key's record is past its 24 hours
    again = {"updated_by": "m@example.com", "basic_details": {**details, "name": "Again"}}
    refused = await asyncio.wait_for(
        client.patch(f"/v5/campaigns/{campaign_id}", json=again, headers=headers), timeout=30
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "INVALID_STATE"
    replayed = await client.patch(f"/v5/campaigns/{campaign_id}", json=again, headers=headers)
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.status_code == 409
