"""Who may ingest where, how often, and with which Idempotency-Key."""

from __future__ import annotations

import uuid

import httpx
from fastapi import FastAPI

from herald.cli.workspaces import ALL_SCOPES
from herald.workspaces.scopes import Scope
from tests.audience.conftest import Ingest, stored_user, stored_users
from tests.factories import Tenant, add_key, is_replay_of, make_tenant

CUSTOMER = {"type": "customer", "customer_id": "u1", "attributes": {"plan": "gold"}}


class TestAuthentication:
    async def test_missing_credentials_is_401(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await client.post(f"/v1/customer/{workspace.workspace_id}", json=CUSTOMER)
        assert response.status_code == 401
        assert response.headers["content-type"].startswith("text/plain")
        assert response.json()["code"] == "ER001"

    async def test_path_must_name_the_callers_workspace(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, other_tenant: Tenant
    ) -> None:
        for kind in ("customer", "event", "transition"):
            response = await client.post(
                f"/v1/{kind}/{workspace.workspace_id}", json=CUSTOMER, headers=other_tenant.headers()
            )
            assert response.status_code == 401, kind
            assert response.json()["code"] == "ER001"
        assert await stored_users(app, workspace.workspace_id) == {}
        assert await stored_users(app, other_tenant.workspace_id) == {}

    async def test_unknown_workspace_in_path_is_401(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await client.post("/v1/customer/NOPE", json=CUSTOMER, headers=workspace.headers())
        assert response.status_code == 401

    async def test_key_without_data_write_is_403(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        reader = await add_key(app, workspace, [Scope.OFFERS_READ, Scope.CAMPAIGNS_CREATE_MANAGE_PUBLISH])
        response = await client.post(
            f"/v1/customer/{workspace.workspace_id}", json=CUSTOMER, headers=reader.headers()
        )
        assert response.status_code == 403
        assert response.json()["code"] == "ER007"

    async def test_data_write_alone_is_enough(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        writer = await make_tenant(app, scopes=[Scope.DATA_WRITE])
        response = await client.post(
            f"/v1/customer/{writer.workspace_id}", json=CUSTOMER, headers=writer.headers()
        )
        assert response.status_code == 200
        offers = await client.get("/v5/offers", headers=writer.headers())
        assert offers.status_code == 403

    def test_the_cli_default_scopes_include_data_write(self) -> None:
        assert "data:write" in ALL_SCOPES.split(",")


class TestIsolation:
    async def test_workspaces_do_not_see_each_others_users(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, other_tenant: Tenant
    ) -> None:
        a, b = Ingest(client, workspace), Ingest(client, other_tenant)
        await a.customer("u1", {"plan": "gold", "email": "a@example.com"})
        # B cannot update A's user: to B it does not exist.
        skipped = await b.customer("u1", {"plan": "free"}, update_existing_only=True)
        assert skipped.json()["data"]["result"] == "skipped"
        created = await b.customer("u1", {"plan": "free"})
        assert created.json()["data"]["result"] == "created"
        event = await b.event("u1", {"action": "a"})
        assert event.json()["data"]["user_created"] is False
        user_a = await stored_user(app, workspace.workspace_id, "u1")
        user_b = await stored_user(app, other_tenant.workspace_id, "u1")
        assert user_a is not None
        assert user_b is not None
        assert (user_a.attributes, user_a.email) == ({"plan": "gold"}, "a@example.com")
        assert (user_b.attributes, user_b.email) == ({"plan": "free"}, None)


class TestRateLimit:
    async def test_workspace_override_applies_across_the_three_routes(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        tenant = await make_tenant(app, rate_limits={"ingest": "2/minute"})
        ingest = Ingest(client, tenant)
        assert (await ingest.customer("u1", {})).status_code == 200
        assert (await ingest.event("u1", {"action": "a"})).status_code == 200
        refused = await ingest.transition({"type": "customer", "customer_id": "u2"})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "RATE_LIMITED"
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.headers["X-RateLimit-Limit"] == "2"
        assert set(await stored_users(app, tenant.workspace_id)) == {"u1"}

    async def test_path_mismatch_costs_no_slot(
        self, app: FastAPI, client: httpx.AsyncClient, other_tenant: Tenant
    ) -> None:
        tenant = await make_tenant(app, rate_limits={"ingest": "1/minute"})
        for _ in range(3):
            await client.post(
                f"/v1/customer/{other_tenant.workspace_id}", json=CUSTOMER, headers=tenant.headers()
            )
        assert (await Ingest(client, tenant).customer("u1", {})).status_code == 200


class TestIdempotency:
    async def test_without_a_key_each_request_applies(
        self, app: FastAPI, ingest: Ingest, workspace: Tenant
    ) -> None:
        first = await ingest.event("u1", {"action": "a"})
        second = await ingest.event("u1", {"action": "a"})
        assert first.json()["data"]["event_ids"] != second.json()["data"]["event_ids"]

    async def test_a_repeated_key_replays_without_applying_again(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        key = str(uuid.uuid4())
        headers = workspace.headers(idempotency_key=key)
        ingest = Ingest(client, workspace)
        body = {"type": "event", "customer_id": "u1", "actions": [{"action": "a"}]}
        first = await ingest.post("event", body, headers)
        again = await ingest.post("event", body, headers)
        assert first.status_code == again.status_code == 200
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert is_replay_of(again, first)
        async with app.state.herald.database.reader() as session:
            from sqlalchemy import func, select

            from herald.audience.models import Event

            count = await session.scalar(
                select(func.count()).select_from(Event).where(Event.workspace_id == workspace.workspace_id)
            )
        assert count == 1

    async def test_a_key_reused_with_another_body_is_409(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        headers = workspace.headers(idempotency_key=str(uuid.uuid4()))
        ingest = Ingest(client, workspace)
        assert (await ingest.post("customer", CUSTOMER, headers)).status_code == 200
        other = await ingest.post("customer", {**CUSTOMER, "customer_id": "u2"}, headers)
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"

    async def test_a_malformed_key_is_400(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await Ingest(client, workspace).post(
            "customer", CUSTOMER, {**workspace.headers(), "Idempotency-Key": "nope"}
        )
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "INVALID_IDEMPOTENCY_KEY"


async def test_openapi_documents_the_ingestion_routes(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    required = {"customer": ["type", "customer_id"], "event": ["type", "customer_id", "actions"]}
    required["transition"] = ["type", "elements"]
    for kind, model in (("customer", "Customer"), ("event", "Event"), ("transition", "Transition")):
        operation = spec["paths"][f"/v1/{kind}/{{workspace_id}}"]["post"]
        assert operation["requestBody"]["required"] is True
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["properties"]["type"]["const"] == kind
        assert body["required"] == required[kind]
        assert body["additionalProperties"] is False
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{model}Response"}
        assert {"400", "401", "403", "429"} <= set(operation["responses"])
    schemas = spec["components"]["schemas"]
    assert "skipped_customer_ids" in schemas["CustomerCounts"]["properties"]
    assert {"CustomerObject", "EventObject", "EventAction"} <= set(schemas)  # the transition's elements
