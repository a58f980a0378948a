"""The outermost request middleware: one log line and the metrics of every request.

It makes the request's state (`scope["state"]`) the logging context of everything the request does
(`herald.ops.logs`), and after the answer it reads what the inner layers left there: the request id
(`herald.http.middleware`), the authenticated workspace and a refusing rate-limit bucket
(`herald.http.operation`). The route template is the route the router matched (`scope["route"]`),
never the raw path, so the labels stay few.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald.ops import metrics
from herald.ops.logs import request_state

log = logging.getLogger("herald.access")

UNMATCHED = "unmatched"  # no route: 404s, and 405s answered before routing
# The status `herald.http.server` answered a request with itself, the app still reading its body
# (a late or malformed body): what the client got, where the app gave no answer.
ANSWERED_AT_SOCKET = "answered_at_socket"
# The status recorded for a request whose client closed the connection before its body was whole
# (nginx's convention): no answer went out, and nothing failed on the server.
CLIENT_CLOSED_REQUEST = 499
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_REPLAYED = b"idempotent-replayed"


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, *, count: bool) -> None:
        self.app = app
        self.count = count
        # Label children by (method, route, status): looked up once, then reused.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        token = request_state.set(state)
        started = perf_counter()
        status = 500
        replayed = False
        recorded = False

        async def observe(message: Message) -> None:
            nonlocal status, replayed, recorded
            if message["type"] == "http.response.start":
                status = message["status"]
                replayed = any(name == _REPLAYED for name, _ in message.get("headers", ()))
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                # Recorded before the last bytes go out: once a client has its answer, the line
                # and the counts are there.
                recorded = True
                self._record(scope, state, status, perf_counter() - started, replayed)
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            if not recorded:  # no complete answer (the client left, or the app failed)
                status = state.get(ANSWERED_AT_SOCKET, status)
                self._record(scope, state, status, perf_counter() - started, replayed)
            request_state.reset(token)

    def _record(
        self, scope: Scope, state: dict[str, Any], status: int, seconds: float, replayed: bool
    ) -> None:
        method: str = scope["method"] if scope["method"] in _METHODS else "OTHER"
        route = getattr(scope.get("route"), "path", None) or UNMATCHED
        if self.count:
            children = self._children.get((method, route, status))
            if children is None:
                children = (
                    metrics.REQUESTS.labels(method, route, str(status)),
                    metrics.LATENCY.labels(method, route),
                )
                self._children[(method, route, status)] = children
            children[0].inc()
            children[1].observe(seconds)
            if status == 429:
                metrics.RATE_LIMITED.labels(state.get("rate_limited_bucket") or "unknown").inc()
            if replayed:
                metrics.REPLAYS.labels(method, route).inc()
        if log.isEnabledFor(logging.INFO):
            log.info(
                "request",
                extra={
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                },
            )
