"""The request's JSON body, as every JSON route reads it: the bytes the middleware read
(`request.state.body`), none or blank refused as the malformed request it is (400 BAD_REQUEST,
not a body field missing), then parsed."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from herald.errors import BadRequest


def raw_body(request: Request) -> bytes:
    """The body's bytes; BadRequest when there are none (or only blanks)."""
    raw: bytes = getattr(request.state, "body", b"") or b""
    if not raw.strip():
        raise BadRequest("A JSON body is required.")
    return raw


def json_body(request: Request) -> Any:
    """The body as JSON; BadRequest when there is none or it is not JSON."""
    try:
        return orjson.loads(raw_body(request))
    except orjson.JSONDecodeError:
        raise BadRequest("The request body is not valid JSON.") from None
