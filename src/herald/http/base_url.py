"""The public base URL of this deployment, as links in answers (`doc_url`, OpenAPI `servers`) use it.

`HERALD_BASE_URL` when set (a deployment behind a proxy names its public address); otherwise the
scheme and host the request itself came to, so a link names the port that actually serves.
"""

from __future__ import annotations

from contextvars import ContextVar
from functools import lru_cache

from starlette.datastructures import URL
from starlette.types import Scope

# The request being answered, for error bodies built where only the request id is at hand (the
# middleware's own refusals); set once per request by the middleware. Its base is worked out only
# when an answer names it: most answers (a page, a probe) never do.
_CURRENT: ContextVar[Scope | None] = ContextVar("herald_request_scope", default=None)


def of_request(configured: str | None, scope: Scope) -> str:
    if configured:
        return configured.rstrip("/")
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    server = scope.get("server")
    key = (scope.get("scheme", "http"), host, tuple(server) if server is not None else None)
    # Only ordinary host names are remembered: a client sending ever new long ones fills no cache.
    return _base(*key) if host is None or len(host) <= 255 else _base.__wrapped__(*key)


@lru_cache(maxsize=256)
def _base(scheme: str, host: bytes | None, server: tuple[str, int | None] | None) -> str:
    # The framework's URL of a scope with this scheme, Host header and server (parsing it is most of
    # the work of naming the base; a deployment is reached under a handful of names).
    scope: Scope = {"type": "http", "scheme": scheme, "server": server, "path": "/", "query_string": b""}
    scope["headers"] = [(b"host", host)] if host is not None else []
    url = URL(scope=scope)
    return f"{url.scheme}://{url.netloc}"


def bind(scope: Scope) -> None:
    _CURRENT.set(scope)


def current(configured: str | None) -> str:
    """The bound request's base; outside a request, the setting (or the local default)."""
    scope = _CURRENT.get()
    if scope is not None:
        return of_request(configured, scope)
    return (configured or "http://127.0.0.1:8000").rstrip("/")
