"""The request middleware: gateway checks, request ids, body limits, and the unit of work.

For every HTTP request it
1. refuses headers with control characters (503, HTML, nothing processed),
2. reads or makes the request id (`X-<token>-Request-Id`) that every response carries (a malformed
   one is refused by the route's guard, after authentication), answers 501 for a method implemented
   nowhere (`guards.KNOWN_METHODS`), and 405 first (a known path, another method;
   `herald.http.route_table`),
3. reads the body once, within the size limit (413), checks content type, UTF-8, NULs, lone
   surrogates, NaN/Infinity and JSON depth (400); a client gone before its body is complete (or given
   up on by `herald.http.server`) gets nothing processed,
4. answers 404 for a path no route has (no router needed),
5. runs the app with the response held back, then commits the request's transaction (and its
   idempotency record) before sending, or rolls everything back when the answer is an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, IntegrityError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald.config import SettingsError
from herald.db_errors import database_unavailable
from herald.errors import MethodNotImplemented
from herald.http import base_url, endpoint, idempotency
from herald.http.context import UnitOfWork, request_state
from herald.http.endpoint import BODY_PROBLEM
from herald.http.guards import (
    CONTENT_TYPE,
    KNOWN_METHODS,
    has_control_characters,
    has_escaped_nul,
    has_lone_surrogate,
    has_non_finite_number,
    header_problem,
    infinite_number_path,
    is_utf8,
    json_content_type_problem,
    json_depth_exceeds,
    nul_path,
    parse_uuid4,
    surrogate_path,
)
from herald.http.limits import headers_for
from herald.http.responses import GATEWAY_503_HTML, HEALTH_PATH, HEALTHY, error_json, error_response
from herald.http.route_table import RouteTable
from herald.ids import uuid4_text
from herald.ops.observe import ANSWERED_AT_SOCKET, CLIENT_CLOSED_REQUEST
from herald.problems import Problem
from herald.services import Services

log = logging.getLogger("herald.http")

_JSON_CONTENT_TYPE = (b"content-type", b"application/json")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client disconnected (or the server gave up on it) before its body was complete."""


class HeraldMiddleware:
    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services
        self.settings = services.settings
        self.request_id_header = services.settings.request_id_header.lower().encode()
        # Headers that carry one value: each given at most once (`guards.header_problem`).
        self.singular_headers = frozenset(
            name.lower().encode()
            for name in (
                "host",
                "authorization",
                services.settings.app_key_header,
                "idempotency-key",
                "content-type",
                services.settings.request_id_header,
            )
        )
        self._route_table: RouteTable | None = None

    def _routes(self, scope: Scope) -> RouteTable:
        # Built at the first request: the app's routes are all added by then. Each route gets
        # Herald's request handler at the same moment (`herald.http.endpoint`).
        if self._route_table is None:
            endpoint.install(scope["app"].router.routes)
            self._route_table = RouteTable(scope["app"])
        return self._route_table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        if has_control_characters(headers):
            # The gateway's page, with a request id of its own like every answer.
            page = [
                (b"content-type", b"text/html; charset=utf-8"),
                (self.request_id_header, uuid4_text().encode()),
            ]
            await _send_raw(send, 503, page, GATEWAY_503_HTML)
            return

        base_url.bind(scope)
        given = next((value for name, value in headers if name == self.request_id_header), None)
        sent = given.decode("latin-1") if given is not None else None
        # A valid id is echoed as the client wrote it (upper-case hex, say): a client that
        # correlates by string equality finds its own id.
        request_id = sent if sent is not None and parse_uuid4(sent) is not None else None
        state = request_state(scope)
        # A malformed request id is refused by the route's guard, after authentication (a caller
        # without credentials learns 401 first); the answer still carries a fresh id of ours.
        state["request_id_invalid"] = given is not None and request_id is None
        request_id = request_id or uuid4_text()
        state["request_id"] = request_id
        if scope["method"] not in KNOWN_METHODS:
            # Before the path is looked up: no resource of this server answers such a method.
            refused = MethodNotImplemented(scope["method"])
            await self._send_error(send, request_id, refused.status, refused.code, refused.message)
            return
        table = self._routes(scope)
        http_version = scope.get("http_version", "1.1")
        if scope["path"] == HEALTH_PATH and scope["method"] in READ_METHODS:
            scope["route"] = table.literal_routes.get(HEALTH_PATH)  # the label of its log line and metrics
            # The socket's rules hold here too (a missing or doubled Host, a header given twice).
            if await self._refused_head(send, request_id, headers, http_version):
                return
            answer = [(b"content-type", b"application/json"), (self.request_id_header, request_id.encode())]
            await _send_raw(send, 200, answer, HEALTHY)
            return
        routes = table.lookup(scope["path"])
        if scope["method"] == "HEAD" and "GET" in routes.served:
            # RFC 9110 §9.3.2: HEAD is GET without the body; the same route answers both, and
            # only the body is left out (the headers, Content-Length included, are GET's).
            scope = {**scope, "method": "GET"}
            send = _headers_only(send)
        if routes.served and scope["method"] not in routes.served:
            # The path exists but not with this method: 405 before anything about the request is
            # judged, naming every method of the path's routes (the router names one route's).
            await self._send_error(
                send,
                request_id,
                405,
                "METHOD_NOT_ALLOWED",
                "The method is not allowed on this resource.",
                headers=[(b"allow", ", ".join(sorted(_with_head(routes.served))).encode())],
            )
            return

        if await self._refused_head(send, request_id, headers, http_version):
            return
        method: str = scope["method"]
        body = b""
        if method in BODY_METHODS:
            try:
                body = await self._read_body(headers, receive)
            except ClientGone:
                # A partial body is never processed, and no one is left to answer. The server may
                # have answered it itself (a late body: 408), which is then what is recorded.
                state.setdefault(ANSWERED_AT_SOCKET, CLIENT_CLOSED_REQUEST)
                return
            except BodyTooLarge:
                # A client that asked to continue sends its body or not (RFC 9110 §10.1.1): the
                # server says it closes, or it read the next request's bytes as that body.
                waiting = any(name == b"expect" for name, _ in headers)
                await self._send_error(
                    send,
                    request_id,
                    413,
                    "PAYLOAD_TOO_LARGE",
                    f"The request body exceeds {self.settings.max_body_bytes} bytes.",
                    headers=[(b"connection", b"close")] if waiting else None,
                )
                return
            # Judged here, answered by the route after its guard (`herald.http.endpoint`): a
            # caller without credentials or scope learns nothing about its body (contract §2).
            state[BODY_PROBLEM] = self._body_problem(headers, body)
        state["body"] = body
        if not routes.served:  # no route: answered here, without entering the router
            await self._send_error(
                send, request_id, 404, "NOT_FOUND", "No such resource or route.", raw_body=body
            )
            return

        uow = UnitOfWork(self.services.database, for_write=method not in READ_METHODS)
        state["uow"] = uow
        await self._run(scope, _replay(body, receive), send, uow, request_id, body)

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, uow: UnitOfWork, request_id: str, body: bytes
    ) -> None:
        captured: list[Message] = []

        async def hold(message: Message) -> None:
            captured.append(message)

        try:
            try:
                await self.app(scope, receive, hold)
                status = captured[0]["status"] if captured else 500
                if status < 400:
                    await self._commit(uow, captured)
                else:
                    await self._fail(uow, captured)
            except asyncio.CancelledError:
                # The server's graceful shutdown ran out (HERALD_SHUTDOWN_TIMEOUT_SECONDS) with this
                # request in flight: the client hears it in the envelope, not as the server's bare
                # 500. Whether a commit under way ended is not known, so it is told to retry with
                # the same key (a replay, or the request afresh). The transaction rolls back below.
                with contextlib.suppress(Exception):
                    await self._send_error(
                        send,
                        request_id,
                        503,
                        "SERVICE_UNAVAILABLE",
                        "The server stopped before the request was answered; retry with the same "
                        "Idempotency-Key.",
                        headers=[(b"connection", b"close")],
                    )
                raise
            except Exception as exc:  # the answer becomes an enveloped error, never a stack trace
                await uow.rollback()
                await uow.run_failure_callbacks()
                captured = self._crash_response(exc, request_id, body)
                if uow.idempotency is not None:
                    # A crash is never an answer worth replaying: free the key for a retry.
                    await self._release_claim(uow, captured, keep=False)
        finally:
            await uow.close()
        await self._send(send, captured, request_id, uow)

    async def _refused_head(
        self, send: Send, request_id: str, headers: list[tuple[bytes, bytes]], http_version: str
    ) -> bool:
        """Answer a head that breaks the socket's rules (`header_problem`); whether it did."""
        malformed = header_problem(headers, self.singular_headers, http_version)
        if malformed is None:
            return False
        await self._send_error(
            send, request_id, malformed.status, malformed.code, malformed.message, target=malformed.header
        )
        return True

    async def _commit(self, uow: UnitOfWork, captured: list[Message]) -> None:
        if uow.pending_claim is not None:  # a success must never pass an unchecked key
            raise RuntimeError("the handler answered without the read that takes its claim")
        claim = uow.idempotency
        if claim is not None and not uow.recorded:
            status, headers, body = _parts(captured)
            if claim.in_request_transaction:
                now = self.services.clock.now()
                await idempotency.record_in(uow.session(), claim, status, headers, body, now)
            else:
                await idempotency.complete_in(uow.session(), claim, status, headers, body)
        await uow.commit()

    async def _fail(self, uow: UnitOfWork, captured: list[Message]) -> None:
        recorded = await self._record_refusal_held(uow, captured)
        await uow.rollback()
        await uow.run_failure_callbacks()
        if uow.idempotency is not None and not recorded:
            await self._release_claim(uow, captured, keep=True)

    async def _record_refusal_held(self, uow: UnitOfWork, captured: list[Message]) -> bool:
        """On PostgreSQL, keep a refusal's answer while the request's transaction still holds the
        key's lock (`idempotency.record_refusal`, `held`); whether it was kept so. Not when that
        transaction wrote or removed the key's record itself (the insert would wait for its end),
        nor on SQLite, whose one write lock that transaction holds."""
        claim = uow.idempotency
        database = self.services.database
        if (
            claim is None
            or not claim.in_request_transaction
            or uow.recorded
            or database.engine.dialect.name != "postgresql"
        ):
            return False
        status, headers, body = _parts(captured)
        if not idempotency.is_stored_status(status):
            return True  # nothing to keep (a 429 is answered afresh)
        try:
            # A record the request's transaction forgot (it was over) would hold up the insert
            # beside it until that transaction ends, which waits for the insert: kept after the
            # rollback instead (`_release_claim`). Read on the pool the insert takes.
            if await idempotency.forgotten_in(uow.session(), database.side_writer, claim):
                return False
        except Exception:  # the transaction cannot read any more (a database error refused it)
            return False
        try:
            now = self.services.clock.now()
            # Beside the request's transaction, still open: on a pool of its own (`side_writer`).
            await idempotency.record_refusal(
                database.side_writer, claim, status, headers, body, now, held=True
            )
        except Exception:  # an unrecorded refusal is answered afresh
            log.exception("could not record the refusal")
        return True

    async def _release_claim(self, uow: UnitOfWork, captured: list[Message], *, keep: bool) -> None:
        """After the request's transaction rolled back: keep a 409/422 answer (`keep`), else free the key."""
        claim = uow.idempotency
        assert claim is not None
        status, headers, body = _parts(captured)
        writer = self.services.database.writer
        try:
            if not claim.in_request_transaction:
                await idempotency.finish_failed(writer, claim, status, headers, body, keep=keep)
            elif keep:  # a claim in the rolled-back transaction is already free
                now = self.services.clock.now()
                await idempotency.record_refusal(writer, claim, status, headers, body, now)
        except Exception:  # a lease expires on its own, an unrecorded refusal is answered afresh
            log.exception("could not finish idempotency record")

    def _crash_response(self, exc: Exception, request_id: str, body: bytes) -> list[Message]:
        if isinstance(exc, IntegrityError):
            # A concurrent request won a race the handler's own checks could not see.
            status, code, message = 409, "CONFLICT", "A concurrent request changed the same data; retry."
        elif database_unavailable(exc):
            log.warning("database unavailable: %r", exc.orig if isinstance(exc, DBAPIError) else exc)
            status, code, message = 503, "SERVICE_UNAVAILABLE", "The database is unavailable; retry."
        elif rate_limit_store_unavailable(exc):
            log.warning("rate-limit store (Redis) unavailable: %s", exc)
            status, code, message = 503, "SERVICE_UNAVAILABLE", "The rate-limit store is unavailable; retry."
        elif isinstance(exc, SettingsError):  # the sandbox's clock file went away or was garbled
            log.warning("%s", exc)
            status, code, message = 503, "SERVICE_UNAVAILABLE", "The server's clock cannot be read; retry."
        else:
            log.exception("unhandled error", exc_info=exc)
            status, code, message = 500, "INTERNAL_ERROR", "Internal error. The request was not applied."
        response = error_response(
            request_id,
            base_url.current(self.settings.base_url),
            status=status,
            code=code,
            message=message,
            raw_body=body,
        )
        return [
            {"type": "http.response.start", "status": status, "headers": response.raw_headers},
            {"type": "http.response.body", "body": response.body},
        ]

    async def _send(self, send: Send, captured: list[Message], request_id: str, uow: UnitOfWork) -> None:
        start = captured[0]
        status: int = start["status"]
        added = [(self.request_id_header, request_id.encode())]
        if uow.rate_limit is not None and (200 <= status < 300 or status == 429):
            described = uow.rate_limit
            if 200 <= status < 300 and uow.quota is not None and uow.quota.remaining < described.remaining:
                described = uow.quota  # the window nearest exhaustion is the success quota's
            added += headers_for(described)
        # Ours replace any of the same names the answer carried (a list built once, not a
        # header-by-header rewrite of it).
        ours = {name for name, _ in added}
        raw = [(name, value) for name, value in start.get("headers", []) if name.lower() not in ours]
        await send({**start, "headers": raw + added})
        for message in captured[1:]:
            await send(message)

    async def _send_error(
        self,
        send: Send,
        request_id: str,
        status: int,
        code: str,
        message: str,
        *,
        target: str | None = None,
        details: list[Problem] | None = None,
        raw_body: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        body = error_json(
            request_id,
            base_url.current(self.settings.base_url),
            code=code,
            message=message,
            target=target,
            details=details,
            raw_body=raw_body,
        )
        raw = [_JSON_CONTENT_TYPE, *(headers or []), (self.request_id_header, request_id.encode())]
        await _send_raw(send, status, raw, body)

    async def _read_body(self, headers: list[tuple[bytes, bytes]], receive: Receive) -> bytes:
        limit = self.settings.max_body_bytes
        declared = next((value for name, value in headers if name == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge()
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _body_problem(self, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[str, str | None] | None:
        """What is wrong with the body before any route reads it, and where when that is known."""
        if not body:
            return None
        content_type = next((value for name, value in headers if name == b"content-type"), b"")
        refused = json_content_type_problem(content_type.decode("latin-1"))
        if refused is not None:
            return refused, CONTENT_TYPE
        if not is_utf8(body):
            return "The request body must be UTF-8.", None
        # JSON text has no byte order mark, and no raw NUL byte anywhere (in a string it must be
        # escaped): the reader would otherwise take UTF-16 and UTF-32 bodies for JSON too.
        if body.startswith(b"\xef\xbb\xbf"):
            return "The request body must be UTF-8 JSON text without a byte order mark.", None
        if b"\x00" in body:
            return "The request body must be UTF-8 JSON text; it holds NUL bytes (UTF-16 or UTF-32?).", None
        if has_escaped_nul(body):
            return "Strings must not contain NUL characters.", nul_path(body)
        if has_lone_surrogate(body):
            message = "Strings must not contain unpaired UTF-16 surrogate escapes (\\uD800-\\uDFFF)."
            return message, surrogate_path(body)
        if has_non_finite_number(body):
            return "NaN and Infinity are not JSON numbers.", None
        too_large = infinite_number_path(body)
        if too_large is not None:
            return "Numbers must fit a double (at most about 1.8e308 in size).", too_large or None
        if json_depth_exceeds(body, self.settings.max_json_depth):
            return f"The JSON body nests deeper than {self.settings.max_json_depth} levels.", None
        return None


def rate_limit_store_unavailable(exc: BaseException) -> bool:
    """True for Redis (the rate-limit store) refusing connections or not answering in time: 503 and
    retry (`herald.http.ratelimit.redis` bounds every exchange, and fails it with one of these)."""
    return isinstance(exc, RedisConnectionError | RedisTimeoutError)


def _parts(captured: list[Message]) -> tuple[int, dict[str, str], bytes]:
    start = captured[0]
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in start.get("headers", [])}
    body = b"".join(message.get("body", b"") for message in captured[1:])
    return int(start["status"]), headers, body


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_raw(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    raw: list[Any] = [
        (b"content-length", str(len(body)).encode()),
        *[h for h in headers if h[0] != b"content-length"],
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _headers_only(send: Send) -> Send:
    """The answer to a HEAD request: GET's status and headers, an empty body."""

    async def headers_only(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return headers_only


def _with_head(methods: frozenset[str]) -> frozenset[str]:
    """A path served with GET is served with HEAD too (see `HeraldMiddleware.__call__`)."""
    return methods | {"HEAD"} if "GET" in methods else methods
