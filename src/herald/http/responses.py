"""Response bodies every surface shares: success envelopes, error envelopes, gateway bodies."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from herald.errors import HeraldError, error_body
from herald.http import base_url
from herald.problems import Problem

GATEWAY_503_HTML = (
    b"<html><head><title>503 Service Unavailable</title></head><body>"
    b"<h1>503 Service Unavailable</h1><p>The request could not be routed. Retry with exponential "
    b"back-off.</p></body></html>"
)


def request_id(request: Request) -> str:
    return str(request.state.request_id)


def response_id(request: Request) -> str:
    return f"resp_{request_id(request)}"


# `GET /healthz`'s answer: the request middleware sends it without entering the router (a health
# probe is polled often and checks nothing); the route in `herald.ops.probes` documents it.
HEALTH_PATH = "/healthz"
HEALTHY = b'{"status":"ok"}'


def json_response(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


def body_request_id(raw: bytes | None) -> str:
    """The `request_id` a client put in a JSON body, for echoing in error envelopes."""
    if not raw or b'"request_id"' not in raw:
        return ""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    value = parsed.get("request_id") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else ""


def error_response(
    request_id_value: str,
    doc_base: str,
    *,
    status: int,
    code: str,
    message: str,
    target: str | None = None,
    details: list[Problem] | None = None,
    headers: dict[str, str] | None = None,
    raw_body: bytes | None = None,
) -> Response:
    body = error_json(
        request_id_value,
        doc_base,
        code=code,
        message=message,
        target=target,
        details=details,
        raw_body=raw_body,
    )
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_json(
    request_id_value: str,
    doc_base: str,
    *,
    code: str,
    message: str,
    target: str | None = None,
    details: list[Problem] | None = None,
    raw_body: bytes | None = None,
) -> bytes:
    """The error envelope's JSON (the middleware sends its own refusals as these bytes)."""
    body = error_body(
        f"resp_{request_id_value}",
        code=code,
        message=message,
        doc_base=doc_base,
        target=target,
        details=details or [],
        request_id=body_request_id(raw_body),
    )
    return orjson.dumps(body)


def herald_error_response(request: Request, exc: HeraldError) -> Response:
    return error_response(
        request_id(request),
        base_url.of_request(request.app.state.herald.settings.base_url, request.scope),
        status=exc.status,
        code=exc.code,
        message=exc.message,
        target=exc.target,
        details=exc.details,
        headers=exc.headers,
        raw_body=getattr(request.state, "body", None),
    )


# A 401 names the scheme that would be taken (RFC 9110 §11.6.1): Basic, the workspace id and key.
WWW_AUTHENTICATE = 'Basic realm="Herald", charset="UTF-8"'


def gateway_response(status: int, code: str, target: str, message: str) -> Response:
    """The gateway's 401/403 body: JSON text sent as text/plain (clients of the real gateway expect it)."""
    body = orjson.dumps({"code": code, "target": target, "message": message})
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if status == 401 else None
    return Response(body, status_code=status, media_type="text/plain", headers=headers)
