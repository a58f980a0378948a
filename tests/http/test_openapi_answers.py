"""Real answers conform to the served OpenAPI document: each campaign success body (C1-C7, C9) and the
offers' validate against the schema the document gives their operation and status (JSON Schema 2020-12,
references resolved within the document). C8's answer is checked by the generated-client flow."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema_rs
from fastapi import FastAPI

from herald.clock import FrozenClock
from tests.campaigns.lifecycle_helpers import action, create, line, publish, seed, workspace
from tests.campaigns.payloads import PAYLOADS
from tests.factories import Tenant
from tests.offers.builders import OFFERS, TAG_ID, offer_body, seed_catalog


class Document:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def check(self, method: str, path: str, response: httpx.Response) -> None:
        answer = self.document["paths"][path][method]["responses"][str(response.status_code)]
        schema = answer["content"]["application/json"]["schema"]
        validator = jsonschema_rs.Draft202012Validator(
            {**schema, "components": self.document["components"]}, validate_formats=True
        )
        errors = [
            f"{error.instance_path}: {error.message}" for error in validator.iter_errors(response.json())
        ]
        assert errors == [], (method, path, response.status_code, errors[:5])


async def _document(client: httpx.AsyncClient) -> Document:
    return Document((await client.get("/openapi.json")).json())


async def test_campaign_answers_conform_to_the_document(app: FastAPI, client: httpx.AsyncClient) -> None:
    document = await _document(client)
    tenant = await workspace(app)
    read, write = tenant.headers(campaigns=True), tenant.write_headers
    ids = []
    for name, body in PAYLOADS.items():
        created = await client.post("/v5/campaigns", json=body, headers=write(campaigns=True))
        assert created.status_code == 201, (name, created.text)
        document.check("post", "/v5/campaigns", created)
        ids.append(created.json()["data"]["id"])
    [sms] = await seed(
        app, tenant, line(sender_name="Shop", campaign_content={"content": {"sms": {"message": "Hi"}}})
    )
    for campaign_id in [*ids, sms]:
        got = await client.get(f"/v5/campaigns/{campaign_id}", headers=read)
        assert got.status_code == 200, got.text
        document.check("get", "/v5/campaigns/{campaign_id}", got)
        checked = await client.post(f"/v5/campaigns/{campaign_id}/validate", headers=read)
        document.check("post", "/v5/campaigns/{campaign_id}/validate", checked)
    patched = await client.patch(
        f"/v5/campaigns/{ids[0]}",
        json={"basic_details": PAYLOADS["push_one_time_android_ios"]["basic_details"]},
        headers=write(campaigns=True),
    )
    assert patched.status_code == 200, patched.text
    document.check("patch", "/v5/campaigns/{campaign_id}", patched)
    every_status = {"limit": 15, "page": 1, "campaign_fields": {"status": ["DRAFT", "ACTIVE", "SCHEDULED"]}}
    for path in ("/v5/campaigns/search", "/v5/campaigns/meta"):
        found = await client.post(path, json=every_status, headers=write(campaigns=True))
        assert found.status_code == 200, found.text
        assert found.json()["data"]["campaigns"]
        document.check("post", path, found)


async def test_status_and_offer_answers_conform(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    document = await _document(client)
    campaigns = await workspace(app)
    campaign_id = await create(client, campaigns, PAYLOADS["push_periodic"])
    await publish(client, campaigns, campaign_id)
    paused = await action(client, campaigns, campaign_id, "PAUSE")
    assert paused.status_code == 200, paused.text
    document.check("patch", "/v5/campaigns/{campaign_id}/status", paused)
    listed = await client.get("/v5/offers", headers=tenant.headers())
    document.check("get", "/v5/offers", listed)
    templates = await client.get("/v5/offers/templates", headers=tenant.headers())
    document.check("get", "/v5/offers/templates", templates)
    missing = await client.get(
        "/v5/campaigns/0123456789abcdef01234567", headers=campaigns.headers(campaigns=True)
    )
    assert missing.status_code == 404
    document.check("get", "/v5/campaigns/{campaign_id}", missing)


async def test_offer_answers_with_their_fields_conform(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
) -> None:
    # Summaries with every field and with some (`fields`): none is null, none besides the six.
    document = await _document(client)
    await seed_catalog(app, tenant)
    body = offer_body(clock.now(), tags=[f"tag_{TAG_ID}"])
    created = await client.post(OFFERS, json=body, headers=tenant.write_headers())
    assert created.status_code == 201, created.text
    document.check("post", OFFERS, created)
    offer_path = f"{OFFERS}/{created.json()['data']['id']}"
    for fields in (None, "id,status,created_at", "tags"):
        listed = await client.get(
            OFFERS, params={"fields": fields} if fields else {}, headers=tenant.headers()
        )
        assert listed.json()["data"], listed.text
        document.check("get", OFFERS, listed)
    changed = await client.patch(
        offer_path, json={"updated_by": "owner@example.com", "priority": 5}, headers=tenant.write_headers()
    )
    assert changed.status_code == 200, changed.text
    document.check("patch", "/v5/offers/{offer_id}", changed)
    archived = await client.post(f"{offer_path}/archive", headers=tenant.write_headers())
    assert archived.status_code == 200, archived.text
    document.check("post", "/v5/offers/{offer_id}/archive", archived)


async def test_a_published_campaigns_times_conform(app: FastAPI, client: httpx.AsyncClient) -> None:
    # Contract §3's formats as patterns: the campaign's timestamps, its meta row's start and
    # reachability times.
    document = await _document(client)
    tenant = await workspace(app)
    campaign_id = await create(client, tenant, PAYLOADS["push_one_time_android_ios"])
    await publish(client, tenant, campaign_id)
    got = await client.get(f"/v5/campaigns/{campaign_id}", headers=tenant.headers(campaigns=True))
    document.check("get", "/v5/campaigns/{campaign_id}", got)
    body = {"limit": 15, "page": 1, "campaign_fields": {"status": ["SCHEDULED"]}}
    meta = await client.post("/v5/campaigns/meta", json=body, headers=tenant.write_headers(campaigns=True))
    [row] = meta.json()["data"]["campaigns"]
    assert row["campaign_start_time"], row
    assert row["reachability_details"], row
    document.check("post", "/v5/campaigns/meta", meta)
