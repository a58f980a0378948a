"""OpenAPI descriptions of the error answers routes share."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, GetPydanticSchema
from pydantic_core import core_schema

from herald.http.responses import WWW_AUTHENTICATE


class ErrorDetail(BaseModel):
    code: str
    target: str
    message: str


class ErrorObject(BaseModel):
    code: str
    message: str
    doc_url: str
    target: str | None = None
    details: list[ErrorDetail]
    request_id: str


class ErrorEnvelope(BaseModel):
    response_id: str
    error: ErrorObject


class GatewayError(BaseModel):
    """The gateway's 401/403 body: JSON text of this object, sent as `text/plain`."""

    code: str = Field(examples=["ER001"], description="`ER001` (401) or `ER007` (403).")
    target: str = Field(examples=["Authentication Invalid"])
    message: str


# The body is text (the media type says so, and clients must not expect JSON parsing from it) whose
# content is JSON of `GatewayError`: a string with contentMediaType/contentSchema says exactly that.
GATEWAY_BODY: dict[str, Any] = {
    "type": "string",
    "contentMediaType": "application/json",
    "contentSchema": {"$ref": "#/components/schemas/GatewayError"},
    "description": "JSON text of a GatewayError object, sent as text/plain.",
}


_DESCRIPTIONS = {
    400: "Validation failed or the request could not be read.",
    401: "Credentials missing or invalid (gateway body ER001, text/plain).",
    403: "Insufficient scope (gateway body ER007, text/plain).",
    404: "Not found in this workspace.",
    409: "Conflict (idempotency, state or duplicate).",
    412: "If-Match does not match.",
    413: "Body too large.",
    422: "The change cannot be applied in this state.",
    408: "`herald serve` did not receive the request's head or body in time (REQUEST_TIMEOUT).",
    415: "A `Content-Encoding` other than identity (UNSUPPORTED_MEDIA_TYPE).",
    417: "An `Expect` other than 100-continue (EXPECTATION_FAILED).",
    429: "Rate limited; see Retry-After.",
    431: "The request line and headers are larger than the server takes (REQUEST_HEADERS_TOO_LARGE).",
    501: "A method this server implements nowhere, or a transfer coding other than chunked (NOT_IMPLEMENTED).",
    503: "The gateway cannot route the request (a control character in a header: HTML body), or a "
    "dependency (the database, Redis, the clock file) is unavailable: the error envelope, "
    "SERVICE_UNAVAILABLE.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"description": _DESCRIPTIONS[status]}
        if status in (401, 403):
            entry["content"] = {"text/plain": {"schema": GATEWAY_BODY}}
            if status == 401:
                entry["headers"] = {
                    "WWW-Authenticate": {
                        "description": f"The scheme to authenticate with: `{WWW_AUTHENTICATE}`.",
                        "schema": {"type": "string"},
                    }
                }
        elif status == 503:
            entry["content"] = {
                "text/html": {"schema": {"type": "string", "description": "The gateway's HTML page."}},
                "application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}},
            }
        else:
            entry["model"] = ErrorEnvelope
        responses[status] = entry
    return responses


def documented_as(model: type[BaseModel]) -> Any:
    """Annotate a body parameter so the OpenAPI shows `model` while FastAPI accepts any JSON: the
    route validates the body itself, to report parse and rule problems together in one 400."""
    return GetPydanticSchema(
        lambda _type, _handler: core_schema.any_schema(),
        lambda _schema, handler: handler(model.__pydantic_core_schema__),
    )
