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
