"""The request's JSON body, as every JSON route reads it: the bytes the middleware read
(`request.state.body`), none or blank refused as the malformed request it is (400 BAD_REQUEST,
not a body field missing), then parsed."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from herald.errors import BadRequest
from herald.json_numbers import wide_as_doubles


def has_body(request: Request) -> bool:
    """Whether the request carries a body (anything but blanks): on a route whose body is
    optional, `null` is a body that is not an object, not an absent one."""
    raw: bytes = getattr(request.state, "body", b"") or b""
    return bool(raw.strip())


def raw_body(request: Request) -> bytes:
    """The body's bytes; BadRequest when there are none (or only blanks)."""
    if not has_body(request):
        raise BadRequest("A JSON body is required.")
    raw: bytes = request.state.body
    return raw


def json_body(request: Request) -> Any:
    """The body as JSON; BadRequest when there is none or it is not JSON."""
    raw = raw_body(request)
    try:
        return wide_as_doubles(orjson.loads(raw), raw)
    except orjson.JSONDecodeError:
        raise BadRequest("The request body is not valid JSON.") from None
