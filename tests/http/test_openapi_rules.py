"""The served document states the request rules the server enforces, so that generated clients know
them: for each rule, a request the document refuses the server refuses too, and one it admits the
server admits (the rules a JSON Schema keyword cannot state are in the description)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import jsonschema_rs
import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from herald.http.limits import BUCKETS
from tests.factories import Tenant, make_tenant
from tests.offers.builders import OFFERS, offer_body

Send = Callable[[dict[str, Any]], Awaitable[httpx.Response]]
OPEN_LIMITS = dict.fromkeys(BUCKETS, "1000000/second")
PUSH = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "c@example.com"}
GOAL = {"goal_name": "Purchase", "action": "buy", "is_revenue_tracking": True, "revenue_amount": "value"}


async def _document(client: httpx.AsyncClient) -> dict[str, Any]:
    document: dict[str, Any] = (await client.get("/openapi.json")).json()
    return document


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Any:
    # Formats validated too: `format: email` and `format: date` are rules here, not annotations.
    return jsonschema_rs.Draft202012Validator(
        {**schema, "components": document["components"]}, validate_formats=True
    )


def _body_validator(document: dict[str, Any], method: str, path: str) -> Any:
    body = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return _validator(document, body)


async def _agree(validator: Any, send: Send, cases: list[tuple[str, dict[str, Any], bool]]) -> None:
    """Each case's body is admitted by the document exactly when the server admits it."""
    for label, body, admitted in cases:
        assert validator.is_valid(body) is admitted, (label, "document")
        response = await send(body)
        assert (response.status_code < 300) is admitted, (label, response.status_code, response.text)


def _property(document: dict[str, Any], schema: str, *path: str) -> dict[str, Any]:
    """The schema of a property (through references, and the non-null variant of a nullable one)."""
    schemas = document["components"]["schemas"]
    node: dict[str, Any] = schemas[schema]
    for name in path:
        node = node["properties"][name]
        node = next((variant for variant in node.get("anyOf", []) if variant != {"type": "null"}), node)
        while "$ref" in node:
            node = schemas[node["$ref"].rsplit("/", 1)[1]]
    return node


async def test_an_offer_body_is_refused_by_the_document_where_the_server_refuses_it(
    client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
) -> None:
    document = await _document(client)
    now = clock.now()

    def body(number: int, **overrides: Any) -> dict[str, Any]:
        return offer_body(now, f"Documented_Rules_{number}", **overrides)

    def starting(start: str) -> dict[str, str]:
        return {"start_datetime": start, "expiry_datetime": "2099-01-01T00:00:00Z"}

    async def send(sent: dict[str, Any]) -> httpx.Response:
        return await client.post(OFFERS, json=sent, headers=tenant.write_headers())

    await _agree(
        _body_validator(document, "post", OFFERS),
        send,
        [
            ("valid", body(1), True),
            ("name of 4 characters", offer_body(now, "Abcd"), False),
            ("name with a dash", offer_body(now, "bad-name"), False),
            ("name of 101 characters", offer_body(now, "a" * 101), False),
            ("created_by not an address", body(2, created_by="nobody"), False),
            ("start with an offset", body(3, scheduling=starting("2098-01-01T10:00:00+02:00")), False),
            ("start without a zone", body(4, scheduling=starting("2098-01-01T10:00:00")), False),
            ("start on February 30th", body(5, scheduling=starting("2098-02-30T10:00:00Z")), False),
            ("start with microseconds", body(6, scheduling=starting("2098-01-01T10:00:00.123456Z")), True),
            ("unknown currency", body(7, conversion={"primary": {**GOAL, "revenue_currency": "XX1"}}), False),
            (
                "lower-case currency",
                body(8, conversion={"primary": {**GOAL, "revenue_currency": "eur"}}),
                False,
            ),
            ("currency", body(9, conversion={"primary": {**GOAL, "revenue_currency": "EUR"}}), True),
        ],
    )
    assert "IANA" in _property(document, "Scheduling", "timezone")["description"]


async def test_a_campaign_body_is_refused_by_the_document_where_the_server_refuses_it(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    document = await _document(client)
    tenant = await make_tenant(app, rate_limits=OPEN_LIMITS)
    named = {
        "utm_source": "news",
        "utm_medium": "email",
        "utm_campaign": "c",
        "utm_term": "t",
        "utm_content": "x",
    }

    async def send(sent: dict[str, Any]) -> httpx.Response:
        return await client.post("/v5/campaigns", json=sent, headers=tenant.write_headers(campaigns=True))

    def custom(count: int) -> dict[str, str]:
        return {f"utm_custom_{index}": "v" for index in range(count)}

    await _agree(
        _body_validator(document, "post", "/v5/campaigns"),
        send,
        [
            ("valid", PUSH, True),
            ("created_by not an address", {**PUSH, "created_by": "nobody"}, False),
            ("utm key without the prefix", {**PUSH, "utm_params": {**named, "source2": "x"}}, False),
            ("five custom utm keys", {**PUSH, "utm_params": {**named, **custom(5)}}, True),
            ("six custom utm keys", {**PUSH, "utm_params": {**named, **custom(6)}}, False),
        ],
    )
    utm = document["components"]["schemas"]["UtmParams"]
    assert "5 custom keys" in utm["description"]  # with fewer named keys: JSON Schema cannot count
    assert "IANA" in _property(document, "SchedulingDetails", "timezone")["description"]
    test_send = _property(document, "CampaignTestMeta", "identifier_values")
    assert "With `EMAIL`, each is an e-mail address" in test_send["description"]


async def test_a_users_email_is_refused_by_the_document_where_ingestion_refuses_it(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    document = await _document(client)
    path = "/v1/customer/{workspace_id}"

    async def send(sent: dict[str, Any]) -> httpx.Response:
        return await client.post(f"/v1/customer/{tenant.workspace_id}", json=sent, headers=tenant.headers())

    def customer(email: str) -> dict[str, Any]:
        return {"type": "customer", "customer_id": "ana", "attributes": {"email": email}}

    await _agree(
        _body_validator(document, "post", path),
        send,
        [
            ("an address", customer("ana@example.com"), True),
            ("a local relay's address", customer("ana@localhost"), True),
            ("no @", customer("nope"), False),
            ("two @", customer("a@b@example.com"), False),
            ("a space", customer("ana maria@example.com"), False),
            ("a no-break space", customer("ana\u00a0maria@example.com"), False),
            # Empty labels: no server takes such a domain, every send to it would fail.
            ("a trailing dot", customer("ana@example.com."), False),
            ("a leading dot", customer("ana@.example.com"), False),
            ("two dots in a row", customer("ana@example..com"), False),
        ],
    )


@pytest.mark.parametrize(
    ("name", "value", "admitted"),
    [
        ("status_in", "active", True),
        ("status_in", " scheduled , ,draft,", True),
        ("status_in", "ACTIVE", False),
        ("status_in", "active draft", False),
        ("status_in", "", False),
        ("fields", "id,created_at", True),
        ("fields", "id,", True),
        ("fields", "", False),
        ("fields", "id,secret", False),
        ("created_date_gte", "2026-01-15", True),
        ("created_date_gte", "2026-01-15T00:00:00Z", False),
        ("created_date_lte", "2026-02-30", False),
    ],
)
async def test_offer_list_parameters_are_refused_by_the_document_where_the_server_refuses_them(
    client: httpx.AsyncClient, tenant: Tenant, name: str, value: str, admitted: bool
) -> None:
    document = await _document(client)
    [parameter] = [p for p in document["paths"][OFFERS]["get"]["parameters"] if p["name"] == name]
    variant = next(v for v in parameter["schema"]["anyOf"] if v != {"type": "null"})
    assert _validator(document, variant).is_valid(value) is admitted
    response = await client.get(OFFERS, params={name: value}, headers=tenant.headers())
    assert (response.status_code == 200) is admitted, response.text
