"""The OpenAPI document, completed with what every guarded operation shares.

FastAPI describes routes from their signatures; the headers and answers that the middleware and the
guard add to every operation (auth, request ids, rate-limit headers, gateway errors) are added here.
"""

from __future__ import annotations

from typing import Any

from herald.config import Settings
from herald.http.docs import error_responses
from herald.http.operation import REQUIRED_MARK

_INT = {"type": "integer"}
# What `herald.http.guards.parse_uuid4` accepts, in its canonical (hyphenated) spelling.
UUID4 = {
    "type": "string",
    "format": "uuid",
    "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$",
}
UUID4_HEADERS = frozenset({"X-SVC-Request-Id", "Idempotency-Key"})
RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit": {
        "description": "Requests allowed in the window nearest exhaustion.",
        "schema": _INT,
    },
    "X-RateLimit-Remaining": {"description": "Requests left in that window.", "schema": _INT},
    "X-RateLimit-Reset": {"description": "UTC epoch seconds when that window frees a slot.", "schema": _INT},
}
RETRY_AFTER = {"Retry-After": {"description": "Seconds after which the request is admitted.", "schema": _INT}}
BODY_METHODS = frozenset({"post", "put", "patch"})


def _rename_token(document: Any, token: str) -> Any:
    """Header names carry the deployment's token (`HERALD_HEADER_TOKEN`) instead of the default."""
    if token == "SVC":
        return document
    if isinstance(document, dict):
        return {_rename_token(key, token): _rename_token(value, token) for key, value in document.items()}
    if isinstance(document, list):
        return [_rename_token(item, token) for item in document]
    if isinstance(document, str):
        return document.replace("X-SVC-Request-Id", f"X-{token}-Request-Id").replace(
            "SVC-APPKEY", f"{token}-APPKEY"
        )
    return document


def _is_guarded(operation: dict[str, Any]) -> bool:
    return any(parameter.get("name") == "X-SVC-Request-Id" for parameter in operation.get("parameters", []))


def _complete_operation(method: str, operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter.get("in") != "header":
            continue
        if str(parameter.get("description", "")).startswith(REQUIRED_MARK):
            parameter["required"] = True
        if parameter.get("name") in UUID4_HEADERS:
            parameter["schema"] = dict(UUID4)
    operation["security"] = [{"basicAuth": []}]
    responses: dict[str, Any] = operation.setdefault("responses", {})
    # FastAPI's default 422 describes its own validation errors; Herald answers those with 400.
    default_422 = responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if default_422.get("$ref", "").endswith("/HTTPValidationError"):
        del responses["422"]
    shared = [400, 401, 403, 429, 503] + ([413] if method in BODY_METHODS else [])
    for status, entry in error_responses(*shared).items():
        if str(status) not in responses:
            if "model" in entry:
                entry = {
                    "description": entry["description"],
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}
                    },
                }
            responses[str(status)] = entry
    for status, response in responses.items():
        headers = response.setdefault("headers", {})
        headers["X-SVC-Request-Id"] = {"description": "The request's trace id.", "schema": dict(UUID4)}
        if status.startswith("2") or status == "429":
            headers.update(RATE_LIMIT_HEADERS)
        if status == "429":
            headers.update(RETRY_AFTER)


def enrich(document: dict[str, Any], settings: Settings) -> dict[str, Any]:
    components = document.setdefault("components", {})
    components.setdefault("securitySchemes", {})["basicAuth"] = {
        "type": "http",
        "scheme": "basic",
        "description": "Username: workspace id. Password: an API key issued by `herald keys create`.",
    }
    for path_item in document.get("paths", {}).values():
        for method, operation in path_item.items():
            if isinstance(operation, dict) and _is_guarded(operation):
                _complete_operation(method, operation)
    schemas = components.get("schemas", {})
    if "HTTPValidationError" not in str(document.get("paths", {})):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    renamed: dict[str, Any] = _rename_token(document, settings.header_token)
    return renamed
