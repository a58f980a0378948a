"""The OpenAPI document describes what every guarded operation can send and answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.config import Settings
from herald.main import create_app


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
        assert operation["security"] == [{"basicAuth": []}]
        responses = operation["responses"]
        assert {"400", "401", "403", "429", "503"} <= set(responses), (method, path)
        assert "422" not in responses or "HTTPValidationError" not in str(responses["422"])
        for status, response in responses.items():
            assert "X-SVC-Request-Id" in response["headers"]
            if status.startswith("2") or status == "429":
                assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} <= set(
                    response["headers"]
                )
        assert "Retry-After" in responses["429"]["headers"]
        assert responses["401"]["content"] == {"text/plain": {"schema": {"type": "string"}}}


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


@pytest.mark.parametrize("token", ["ACME"])
def test_header_names_follow_the_configured_token(settings: Settings, token: str) -> None:
    app: FastAPI = create_app(settings.model_copy(update={"header_token": token}))
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


async def test_uuid_headers_declare_their_format(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    for _method, _path, operation in _guarded(document):
        for parameter in operation["parameters"]:
            if parameter["name"] in ("X-SVC-Request-Id", "Idempotency-Key"):
                assert parameter["schema"]["format"] == "uuid"
                assert parameter["schema"]["pattern"].startswith("^")


async def test_the_two_content_forms_are_described_as_disjoint(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    for name in ("PushCampaignContent", "EmailCampaignContent"):
        flat, keyed = schemas[name]["properties"]["content"]["anyOf"]
        assert flat["$ref"].endswith("ChannelContent")
        # What the API reads as the flat form (a `push` or `email` key) is never the keyed form.
        assert keyed["propertyNames"] == {"not": {"enum": ["email", "push"]}}
