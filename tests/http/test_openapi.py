"""The OpenAPI document describes what every guarded operation can send and answer."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.config import Settings
from herald.main import create_app
from herald.workspaces.scopes import Scope
from tests.factories import Tenant, make_tenant


def _guarded(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if path.startswith(("/v5", "/v1", "/core-services"))
    ]


async def test_every_operation_declares_shared_headers_and_answers(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    operations = _guarded(document)
    assert operations
    for method, path, operation in operations:
        names = {parameter["name"] for parameter in operation["parameters"]}
        assert "X-SVC-Request-Id" in names, (method, path)
        # The scope the key needs: for tools (`x-scopes`), and said in the description.
        assert operation["security"] == [{"basicAuth": []}]
        [scope] = operation["x-scopes"]
        assert scope in {item.value for item in Scope}, (method, path)
        assert f"Scope: `{scope}`." in operation["description"], (method, path)
        responses = operation["responses"]
        # The guard's answers, and those `herald serve` gives at the socket.
        assert {"400", "401", "403", "408", "417", "429", "431", "501", "503"} <= set(responses), (
            method,
            path,
        )
        # 503: the gateway's HTML page, or the error envelope when a dependency is unavailable.
        assert set(responses["503"]["content"]) == {"text/html", "application/json"}
        assert "422" not in responses or "HTTPValidationError" not in str(responses["422"])
        for status, response in responses.items():
            assert "X-SVC-Request-Id" in response["headers"]
            if status.startswith("2") or status == "429":
                assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} <= set(
                    response["headers"]
                )
        assert "Retry-After" in responses["429"]["headers"]
        # JSON text sent as text/plain: a string whose content is a GatewayError.
        gateway = responses["401"]["content"]["text/plain"]["schema"]
        assert gateway["type"] == "string"
        assert gateway["contentMediaType"] == "application/json"
        assert gateway["contentSchema"] == {"$ref": "#/components/schemas/GatewayError"}
        # The gateway answers text/plain only (every 403 was also documented as a JSON envelope);
        # O3 and O5 answer EXPIRED_OFFERING and ARCHIVED_OFFERING in the envelope too.
        assert set(responses["401"]["content"]) == {"text/plain"}
        offer_gates = {"text/plain", "application/json"} if "{offer_id}" in path else {"text/plain"}
        assert set(responses["403"]["content"]) == offer_gates, (method, path)
        assert "WWW-Authenticate" in responses["401"]["headers"]
        # Every status of every operation says what its body is (204 has none).
        for status, response in responses.items():
            if status != "204":
                assert all(media.get("schema") for media in response["content"].values()), (path, status)
                assert {} not in [media["schema"] for media in response["content"].values()], (path, status)


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("get", "/v5/offers", "offers:read"),
        ("post", "/v5/offers", "offers:write"),
        ("get", "/v5/campaigns/{campaign_id}", "campaigns:view"),
        ("post", "/v5/campaigns", "campaigns:create_manage"),
        ("patch", "/v5/campaigns/{campaign_id}", "campaigns:create_manage"),
        ("post", "/v1/event/{workspace_id}", "data:write"),
    ],
)
async def test_each_operation_names_the_scope_contract_section_2_gives_it(
    client: httpx.AsyncClient, method: str, path: str, scope: str
) -> None:
    document = (await client.get("/openapi.json")).json()
    assert document["paths"][path][method]["x-scopes"] == [scope]


async def test_the_earlier_apis_update_documents_its_replays(client: httpx.AsyncClient) -> None:
    # Its body's request_id de-duplicates: a repeat's answer carries Idempotent-Replayed.
    document = (await client.get("/openapi.json")).json()
    responses = document["paths"]["/core-services/v1/campaigns/{campaign_id}"]["patch"]["responses"]
    for status in ("204", "409", "422"):
        replayed = responses[status]["headers"]["Idempotent-Replayed"]["description"]
        assert "the same `request_id` in its body" in replayed, status
        assert "reads no Idempotency-Key" in replayed, status
    create = document["paths"]["/v5/campaigns"]["post"]["responses"]["201"]["headers"]
    assert "the same Idempotency-Key" in create["Idempotent-Replayed"]["description"]


async def test_campaign_operations_require_the_app_key_header(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    create = document["paths"]["/v5/campaigns"]["post"]
    required = {parameter["name"]: parameter["required"] for parameter in create["parameters"]}
    assert required["SVC-APPKEY"] is True
    assert required["Idempotency-Key"] is True
    assert (
        create["requestBody"]["content"]["application/json"]["schema"]["discriminator"]["propertyName"]
        == "channel"
    )


# Headers any HTTP answer may carry that an API description leaves to HTTP itself.
_TRANSPORT_HEADERS = {"content-type", "content-length", "date", "server"}


def _undocumented(document: dict[str, Any], path: str, method: str, response: httpx.Response) -> set[str]:
    documented = document["paths"][path][method]["responses"][str(response.status_code)]["headers"]
    return {name.lower() for name in response.headers} - {n.lower() for n in documented} - _TRANSPORT_HEADERS


async def test_every_header_of_a_campaign_answer_and_its_replay_is_documented(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    document = (await client.get("/openapi.json")).json()
    write = tenant.write_headers(campaigns=True)
    body = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}
    created = await client.post("/v5/campaigns", json=body, headers=write)
    replayed = await client.post("/v5/campaigns", json=body, headers=write)
    assert replayed.headers["Idempotent-Replayed"] == "true"
    campaign_path = f"/v5/campaigns/{created.json()['data']['id']}"
    got = await client.get(campaign_path, headers=tenant.headers(campaigns=True))
    assert got.headers["ETag"]
    patch = {"updated_by": "a@example.com", "basic_details": {"name": "N"}}
    patched = await client.patch(campaign_path, json=patch, headers=tenant.write_headers(campaigns=True))
    assert patched.status_code == 200, patched.text
    for path, method, response in (
        ("/v5/campaigns", "post", created),
        ("/v5/campaigns", "post", replayed),
        ("/v5/campaigns/{campaign_id}", "get", got),
        ("/v5/campaigns/{campaign_id}", "patch", patched),
    ):
        assert not _undocumented(document, path, method, response), (method, path, response.status_code)


_RATE_LIMIT = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


async def test_headers_on_every_answer_of_a_status_are_required(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    for path, item in document["paths"].items():
        guarded = path.startswith(("/v5", "/v1", "/core-services"))
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                headers = response["headers"]
                where = (method, path, status)
                assert headers["X-SVC-Request-Id"]["required"] is True, where  # probes' answers too
                if guarded and (status.startswith("2") or status == "429"):
                    assert all(headers[name]["required"] is True for name in _RATE_LIMIT), where
                if status == "429":
                    assert headers["Retry-After"]["required"] is True, where
                if "Idempotent-Replayed" in headers:  # on replays only
                    assert "required" not in headers["Idempotent-Replayed"], where
    campaign = document["paths"]["/v5/campaigns/{campaign_id}"]
    for method in ("get", "patch"):
        assert campaign[method]["responses"]["200"]["headers"]["ETag"]["required"] is True


def _missing(document: dict[str, Any], path: str, method: str, response: httpx.Response) -> set[str]:
    """The headers the document says the answer always carries that it does not."""
    documented = document["paths"][path][method]["responses"][str(response.status_code)]["headers"]
    required = {name for name, header in documented.items() if header.get("required")}
    return {name for name in required if name not in response.headers}


async def test_every_answer_carries_the_headers_the_document_requires(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    document = (await client.get("/openapi.json")).json()
    body = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}
    write = tenant.write_headers(campaigns=True)
    created = await client.post("/v5/campaigns", json=body, headers=write)
    campaign_path = f"/v5/campaigns/{created.json()['data']['id']}"
    patch = {"updated_by": "a@example.com", "basic_details": {"name": "N"}}
    edit = tenant.write_headers(campaigns=True)
    patched = await client.patch(campaign_path, json=patch, headers=edit)
    limited = await make_tenant(app, rate_limits={"offers_read": "1/minute"})
    answers = [
        ("/v5/campaigns", "post", created),
        ("/v5/campaigns", "post", await client.post("/v5/campaigns", json=body, headers=write)),
        (
            "/v5/campaigns/{campaign_id}",
            "get",
            await client.get(campaign_path, headers=tenant.headers(campaigns=True)),
        ),
        ("/v5/campaigns/{campaign_id}", "patch", patched),
        ("/v5/campaigns/{campaign_id}", "patch", await client.patch(campaign_path, json=patch, headers=edit)),
        ("/v5/offers", "get", await client.get("/v5/offers", headers=limited.headers())),
        ("/v5/offers", "get", await client.get("/v5/offers", headers=limited.headers())),
        ("/v5/offers", "get", await client.get("/v5/offers")),
        ("/healthz", "get", await client.get("/healthz")),
        ("/readyz", "get", await client.get("/readyz")),
    ]
    assert [answer.status_code for _, _, answer in answers] == [
        201,
        201,
        200,
        200,
        200,
        200,
        429,
        401,
        200,
        200,
    ]
    assert answers[4][2].headers["Idempotent-Replayed"] == "true"  # a replayed C3 keeps its ETag
    for path, method, answer in answers:
        assert not _missing(document, path, method, answer), (method, path, answer.status_code)


@pytest.mark.parametrize("token", ["ACME"])
def test_header_names_follow_the_configured_token(settings: Settings, token: str) -> None:
    app: FastAPI = create_app(dataclasses.replace(settings, header_token=token))
    text = str(app.openapi())
    assert f"X-{token}-Request-Id" in text
    assert f"{token}-APPKEY" in text
    assert "X-SVC-Request-Id" not in text


# Pydantic's own spellings, which are not JSON Schema keywords: a schema carrying them states no bound.
NOT_JSON_SCHEMA = {"ge", "gt", "le", "lt", "min_length", "max_length", "multiple_of"}


def _keywords(node: Any, inside_properties: bool = False) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if not inside_properties:
                found.add(key)
            found |= _keywords(value, inside_properties=key == "properties" and not inside_properties)
    elif isinstance(node, list):
        for item in node:
            found |= _keywords(item)
    return found


async def test_schemas_state_bounds_in_json_schema_keywords(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    assert _keywords(document) & NOT_JSON_SCHEMA == set()


async def test_uuid_headers_are_strings_with_a_pattern(client: httpx.AsyncClient) -> None:
    # Not `format: uuid`: generated clients would ask for a UUID object and fail to send it.
    document = (await client.get("/openapi.json")).json()
    for _method, _path, operation in _guarded(document):
        for parameter in operation["parameters"]:
            if parameter["name"] in ("X-SVC-Request-Id", "Idempotency-Key"):
                assert parameter["schema"]["type"] == "string"
                assert parameter["schema"]["format"] == "uuid4"  # not `uuid`: no UUID objects
                assert parameter["schema"]["pattern"].startswith("^")


OPERATION_IDS = {
    ("get", "/v5/offers"): "listOffers",
    ("post", "/v5/offers"): "createOffer",
    ("patch", "/v5/offers/{offer_id}"): "updateOffer",
    ("get", "/v5/offers/templates"): "listOfferTemplates",
    ("post", "/v5/offers/{offer_id}/archive"): "archiveOffer",
    ("post", "/v5/campaigns"): "createCampaign",
    ("get", "/v5/campaigns/{campaign_id}"): "getCampaign",
    ("patch", "/v5/campaigns/{campaign_id}"): "updateCampaign",
    ("post", "/v5/campaigns/{campaign_id}/validate"): "validateCampaign",
    ("patch", "/v5/campaigns/{campaign_id}/status"): "updateCampaignStatus",
    ("post", "/v5/campaigns/search"): "searchCampaigns",
    ("post", "/v5/campaigns/meta"): "getCampaignMeta",
    ("post", "/v5/campaigns/test"): "testCampaign",
    ("post", "/v5/personalization/preview"): "previewPersonalization",
    ("patch", "/core-services/v1/campaigns/{campaign_id}"): "updateCampaignV1",
    ("post", "/v1/customer/{workspace_id}"): "ingestCustomer",
    ("post", "/v1/event/{workspace_id}"): "ingestEvents",
    ("post", "/v1/transition/{workspace_id}"): "ingestTransition",
    ("post", "/v1/business-event/{workspace_id}"): "raiseBusinessEvent",
    ("get", "/v5/campaigns/{campaign_id}/stats"): "getCampaignStats",
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
    ("get", "/metrics"): "getMetrics",
}


async def test_operations_have_readable_ids_descriptions_and_defined_tags(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    ids = {
        (method, path): operation["operationId"]
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert ids == OPERATION_IDS
    tags = {tag["name"]: tag["description"] for tag in document["tags"]}
    for path, item in document["paths"].items():
        for operation in item.values():
            assert operation["description"].strip(), path
            assert set(operation["tags"]) <= set(tags), path
    assert all(tags.values())
    assert document["info"]["description"]


async def test_servers_name_the_address_the_document_was_read_from(settings: Settings) -> None:
    app = create_app(dataclasses.replace(settings, base_url=None))
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://herald.test:9123") as reader:
            document = (await reader.get("/openapi.json")).json()
    finally:
        await app.state.herald.aclose()
    assert document["servers"] == [{"url": "http://herald.test:9123"}]


async def test_servers_name_the_configured_base_url(settings: Settings) -> None:
    app = create_app(dataclasses.replace(settings, base_url="https://api.example.org/"))
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9") as reader:
            document = (await reader.get("/openapi.json")).json()
    finally:
        await app.state.herald.aclose()
    assert document["servers"] == [{"url": "https://api.example.org"}]


async def test_interruption_level_is_two_enums_without_clashing_names(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    level = schemas["IosSpecificPriority"]["properties"]["interruption_level"]["anyOf"][0]
    spec, upper = (variant["enum"] for variant in level["anyOf"])
    assert spec == ["Passive", "Active", "Time sensitive", "Critical"]
    assert upper == ["PASSIVE", "ACTIVE", "TIME_SENSITIVE", "CRITICAL"]
    # What a generator makes of each enum's values as identifiers stays unique within the enum.
    for values in (spec, upper):
        names = [value.upper().replace(" ", "_") for value in values]
        assert len(set(names)) == len(names)


async def test_the_two_content_forms_are_described_as_disjoint(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    for name in ("PushCampaignContent", "EmailCampaignContent"):
        flat, keyed = schemas[name]["properties"]["content"]["anyOf"]
        assert flat["$ref"].endswith("ChannelContent")
        # What the API reads as the flat form (a channel's key: `push`, `email`, or `sms`, which a
        # preview takes) is never the keyed form.
        assert keyed["propertyNames"] == {"not": {"enum": ["email", "push", "sms"]}}


def _body_validator(document: dict[str, Any], method: str, path: str) -> Any:
    import jsonschema_rs

    schema = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.Draft202012Validator({**schema, "components": document["components"]})


async def test_the_earlier_api_update_is_described_as_a_merge_of_what_is_sent(
    client: httpx.AsyncClient,
) -> None:
    """L1 merges each sent component into the stored one, so its body requires no field of a component
    (a generated client can send just what changes); C3 replaces components and keeps them whole."""
    document = (await client.get("/openapi.json")).json()
    l1 = _body_validator(document, "patch", "/core-services/v1/campaigns/{campaign_id}")
    c3 = _body_validator(document, "patch", "/v5/campaigns/{campaign_id}")
    partial = {"utm_params": {"utm_campaign": "spring"}, "campaign_content": {"content": {"push": {}}}}
    sender = {"request_id": "r-1", "updated_by": "editor@example.com"}
    assert l1.is_valid({**sender, "channel": "PUSH", **partial})
    assert not l1.is_valid({"channel": "PUSH", **partial})  # request_id and updated_by stay required
    assert not l1.is_valid({**sender, "channel": "PUSH", "utm_params": {"utm_source": 5}})
    assert not c3.is_valid({"channel": "PUSH", **partial})


def _resolved(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = document["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _property(document: dict[str, Any], schema: str, *path: str) -> dict[str, Any]:
    node = _resolved(document, {"$ref": f"#/components/schemas/{schema}"})
    for name in path:
        node = _resolved(document, node["properties"][name])
        node = next((_resolved(document, v) for v in node.get("anyOf", []) if v != {"type": "null"}), node)
    return node


async def test_the_document_holds_the_enums_the_server_enforces(client: httpx.AsyncClient) -> None:
    # A body valid by the document was refused: relevance_score 0.7, an Email INTELLIGENT_DELAY.
    document = (await client.get("/openapi.json")).json()
    score = _property(document, "IosSpecificPriority", "relevance_score")
    assert (score["minimum"], score["maximum"], score["multipleOf"]) == (0, 1, 0.5)  # 0, 0.5 or 1
    email = _property(document, "EmailCampaignCreate", "trigger_condition")
    assert "intelligent_delay_optimization" not in email["properties"]
    assert _property(document, "EmailCampaignCreate", "trigger_condition", "trigger_delay_type")["enum"] == [
        "DELAY",
        "ASAP",
    ]
    push = _property(document, "PushCampaignCreate", "trigger_condition", "trigger_delay_type")
    assert "INTELLIGENT_DELAY" in push["enum"]


@pytest.mark.parametrize(
    ("schema", "kind"),
    [
        ("OfferListResponse", "offer"),
        ("OfferCreatedResponse", "offer"),
        ("OfferChangedResponse", "offer"),
        ("TemplateListResponse", "template"),
    ],
)
async def test_the_offer_envelopes_type_is_required_and_fixed(
    client: httpx.AsyncClient, schema: str, kind: str
) -> None:
    # The spec: `type` | enum | `offer`. Required.
    document = (await client.get("/openapi.json")).json()
    envelope = document["components"]["schemas"][schema]
    assert "type" in envelope["required"]
    assert envelope["properties"]["type"]["const"] == kind


async def test_an_offer_update_may_not_clear_what_a_create_requires(client: httpx.AsyncClient) -> None:
    # O3 answers REQUIRED_FIELD_MISSING to `{"name": null}` (tests/offers): the document said null
    # was allowed, so a client generated from it sent it.
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    update, create = schemas["OfferUpdate"]["properties"], schemas["OfferCreate"]
    nullable = {name for name, field in update.items() if {"type": "null"} in field.get("anyOf", [])}
    assert nullable  # (what a create does not require may be cleared)
    assert not nullable & set(create["required"])
    scheduling = schemas["Scheduling"]["properties"]
    for name in schemas["SchedulingCreate"]["required"]:
        assert {"type": "null"} not in scheduling[name].get("anyOf", [])
