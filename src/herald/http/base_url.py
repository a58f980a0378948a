"""The public base URL of this deployment, as links in answers (`doc_url`, OpenAPI `servers`) use it.

`HERALD_BASE_URL` when set (a deployment behind a proxy names its public address); otherwise the
scheme and host the request itself came to, so a link names the port that actually serves.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.datastructures import URL
from starlette.types import Scope

# The base of the request being answered, for error bodies built where only the request id is at
# hand (the middleware's own refusals); set once per request by the middleware.
_CURRENT: ContextVar[str | None] = ContextVar("herald_base_url", default=None)


def of_request(configured: str | None, scope: Scope) -> str:
    if configured:
        return configured.rstrip("/")
    url = URL(scope=scope)
    return f"{url.scheme}://{url.netloc}"


def bind(configured: str | None, scope: Scope) -> None:
    _CURRENT.set(of_request(configured, scope))


def current(configured: str | None) -> str:
    """The bound request's base; outside a request, the setting (or the local default)."""
    return _CURRENT.get() or (configured or "http://127.0.0.1:8000").rstrip("/")
