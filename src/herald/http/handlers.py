"""Exception handlers: every failure a route can raise becomes the one error envelope."""

from __future__ import annotations

import orjson
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from herald.errors import BadRequest, HeraldError, MethodNotAllowed, NotFound, ValidationFailed
from herald.http.auth import GatewayRefusal
from herald.http.idempotency import Replay
from herald.http.responses import gateway_response, herald_error_response, response_id
from herald.pydantic_errors import problems_from_request

_JSON_ERRORS = frozenset({"json_invalid", "json_type"})


async def _herald_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HeraldError)
    if isinstance(exc, Replay):
        headers = {**exc.stored_headers, "Idempotent-Replayed": "true"}
        return Response(_answering(request, exc.body), status_code=exc.status_code, headers=headers)
    return herald_error_response(request, exc)


def _answering(request: Request, stored: bytes) -> bytes:
    """A replayed body as the answer to this request: the stored answer (contract §7), its
    `response_id` this request's (§3: `resp_` and the request id of the answer it is in, which the
    response's request-id header carries)."""
    if not stored.startswith(b"{"):
        return stored
    try:
        document = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return stored
    if not isinstance(document, dict) or "response_id" not in document:
        return stored
    document["response_id"] = response_id(request)
    return orjson.dumps(document)


async def _gateway_refusal(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayRefusal)
    return gateway_response(exc.status, exc.code, exc.target, exc.message)


async def _request_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(error.get("type") in _JSON_ERRORS for error in errors):
        return herald_error_response(request, BadRequest("The request body is not valid JSON."))
    return herald_error_response(request, ValidationFailed(problems_from_request(errors, exc.body)))


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    error: HeraldError
    if exc.status_code == 404:
        error = NotFound("No such resource or route.")
    elif exc.status_code == 405:
        error = MethodNotAllowed(headers=dict(exc.headers or {}))
    elif exc.status_code == 400:
        error = BadRequest(str(exc.detail))
    else:
        error = HeraldError(str(exc.detail))
        error.status, error.code = exc.status_code, "HTTP_ERROR"
    return herald_error_response(request, error)


def install(app: FastAPI) -> None:
    app.add_exception_handler(HeraldError, _herald_error)
    app.add_exception_handler(GatewayRefusal, _gateway_refusal)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
