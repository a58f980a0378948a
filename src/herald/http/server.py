"""The HTTP/1.1 protocol `herald serve` runs: uvicorn's httptools protocol, with the gateway's rules
applied at the socket, before the app sees a byte.

uvicorn answers every parse error itself (`400 Invalid HTTP request received.`, text/plain), reads
request heads of any size and waits for them forever. This protocol gives a client the documented
answers instead, and closes the connection after each of them:

- a control character (ASCII 0x00-0x1F but HTAB, or 0x7F; a bare CR or LF too) in a header name or
  value → 503 with the gateway's HTML body (contract §2; llhttp refuses these bytes, nothing is
  processed);
- a method that is a well-formed token but one llhttp does not know (`FOO`, `get`) → 501
  `NOT_IMPLEMENTED`, as the app answers any method it implements nowhere;
- any other malformed head (request line, method, URL, version, header syntax) → 400 `BAD_REQUEST`;
- a request line and header fields larger than `HERALD_MAX_HEADER_BYTES` → 431
  `REQUEST_HEADERS_TOO_LARGE`;
- a head not complete within `HERALD_HEADER_TIMEOUT_SECONDS` of the connection (or, on a kept-alive
  connection, of the request's first byte) → 408 `REQUEST_TIMEOUT` (a connection that never sent a
  byte is closed without an answer);
- a body not complete within `HERALD_BODY_TIMEOUT_SECONDS` of its head → 408, the app sees the
  client disconnect and processes nothing.

A refused request pipelined behind complete ones is answered after them, in request order, so a
malformed request never costs the earlier ones their processing or their answers.

The JSON answers are the error envelope of every other error. The in-process middleware keeps the
503 rule for servers other than this one (and for in-process tests).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from asyncio import TimerHandle
from dataclasses import dataclass
from functools import cache
from typing import Any

import httptools
import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from herald.config import Settings
from herald.errors import (
    BadRequest,
    HeadersTooLarge,
    HeraldError,
    MethodNotImplemented,
    RequestTimeout,
    error_body,
)
from herald.http.guards import is_token
from herald.http.responses import GATEWAY_503_HTML
from herald.ops.observe import ANSWERED_AT_SOCKET

# In the header section (after the request line's CRLF): the controls of `guards.has_control_characters`,
# with CR and LF counted only when they are not a CRLF line end. A CR at the very end of what arrived
# may be half of one.
_HEADER_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n|\Z)|(?<!\r)\n")
_HEADERS_END = b"\r\n\r\n"


def header_section_has_control_character(head: bytes) -> bool:
    """True when the raw header lines of a request head hold a control character (see `_HEADER_CONTROL`)."""
    _, separator, section = head.partition(b"\r\n")
    if not separator:
        return False  # still (or only) the request line: its faults are malformed requests
    end = section.find(_HEADERS_END)
    return _HEADER_CONTROL.search(section[: end + 2] if end >= 0 else section) is not None


@dataclass(frozen=True)
class GatewayLimits:
    max_header_bytes: int
    header_timeout: float
    body_timeout: float
    request_id_header: bytes
    doc_base: str | None  # HERALD_BASE_URL; unset: the address this connection came to


@cache
def gateway_limits() -> GatewayLimits:
    """Read once per process (every worker reads the same environment)."""
    settings = Settings()
    return GatewayLimits(
        max_header_bytes=settings.max_header_bytes,
        header_timeout=settings.header_timeout_seconds,
        body_timeout=settings.body_timeout_seconds,
        request_id_header=settings.request_id_header.encode(),
        doc_base=settings.base_url,
    )


class HeraldHttpProtocol(HttpToolsProtocol):
    """`uvicorn.run(..., http=HeraldHttpProtocol)`; see the module docstring for what it adds."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = gateway_limits()
        self.head = bytearray()  # the current request's head as received so far
        self.in_head = True
        self.head_begun = False  # a request's first byte is in, its head is not complete
        self.head_timer: TimerHandle | None = None
        self.body_timer: TimerHandle | None = None
        self.linger_timer: TimerHandle | None = None
        self.body_pending = False  # the current request's head is in, its body not all of it
        self.refused = False
        # The current request's body length when it declares one by Content-Length (None: none,
        # or chunked), to find where a pipelined next request starts in the same read.
        self.body_length: int | None = None
        # A refusal of a later pipelined request, held until the earlier requests are answered.
        self.deferred: tuple[int, bytes, bytes, list[tuple[bytes, bytes]], str | None] | None = None

    # ---- connection ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # answered: what the client still sends is read and dropped until it closes
        if self.in_head:
            self.head += data
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserInvalidMethodError:
            self._refuse_method()
            return
        except httptools.HttpParserError:
            if not self.refused:  # a refusal from a callback below already answered
                self._refuse_malformed()
            return
        # Bytes between two requests that begin none (the parser skips the CRLFs a client may send
        # there) are a head's too: uvicorn's keep-alive timer stops at any byte, and a client that
        # sent a CRLF a second held the connection past every timeout.
        between = self.cycle is not None and self.cycle.response_complete
        if self.in_head and (self.head_begun or between):
            if len(self.head) > self.limits.max_header_bytes:
                # Bounds what an unfinished head may hold in memory (a finished one is measured below).
                self._refuse_json(HeadersTooLarge())
            elif self.head_timer is None:
                # A head that did not arrive whole: its time runs from its first byte. (A request
                # that arrives whole, the usual case, never needs a timer.)
                self.head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)
        elif self.body_pending and self.body_timer is None:
            self.body_timer = self.loop.call_later(self.limits.body_timeout, self._body_timed_out)

    # ---- parser callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head = True
        self.head_begun = True

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_begun = False
        # What arrived after this head in the same read: its body, then maybe a pipelined next
        # request's first bytes (kept, so that a fault in that head is judged on the whole head;
        # `on_message_complete` drops the body).
        end = self.head.find(_HEADERS_END)
        self.head = self.head[end + len(_HEADERS_END) :] if end >= 0 else bytearray()
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        # One pass: the head's size, whether a body follows, and its length by Content-Length (None
        # when chunked or unreadable: where a pipelined next request starts is then not known).
        size, has_body, chunked = len(self.url), False, False
        length: int | None = 0
        for name, value in self.headers:
            size += len(name) + len(value) + 4
            if name == b"transfer-encoding":
                has_body = chunked = True
            elif name == b"content-length":
                has_body = has_body or value != b"0"
                length = int(value) if value.isdigit() else None
        if size > self.limits.max_header_bytes:
            self._refuse_json(HeadersTooLarge())
            raise _Refused  # stops the parser: nothing of this request reaches the app
        if self.parser.get_http_version() not in _VERSIONS:
            # A request line without its version, which llhttp reads as HTTP/0.9.
            self._refuse_malformed()
            raise _Refused
        super().on_headers_complete()
        if self.parser.get_http_version() == "1.0":
            # An HTTP/1.0 client knows no interim answers: its `Expect: 100-continue` is ignored
            # (RFC 9110 §10.1.1, a MUST), and its answer is the final one alone.
            self.cycle.waiting_for_100_continue = False
        # The answer's head and body in one send; see `_ResponseTransport`.
        self.cycle.transport = _ResponseTransport(self)
        self.body_length = None if chunked else length
        if has_body:
            # Its timer starts if the body is not complete in this read. The app may answer before
            # the body is in (413): uvicorn then closes at once, and the client, still sending,
            # would get a reset instead of the answer; `_ResponseTransport.close` closes lingering.
            self.body_pending = True

    def on_message_complete(self) -> None:
        self.body_pending = False
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        super().on_message_complete()
        self.in_head = True
        # The bytes kept after the head: its body, then the next request's first bytes when the
        # whole body came in the same read (else where the next request starts is not known).
        length = self.body_length
        self.head = self.head[length:] if length is not None and len(self.head) >= length else bytearray()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A later request was refused while earlier ones were being answered: its answer goes out
        # once the last of them has (HTTP/1.1 answers in request order), then the connection closes.
        if (
            self.deferred is not None
            and not self.pipeline
            and self.cycle is not None
            and self.cycle.response_complete
        ):
            deferred, self.deferred = self.deferred, None
            self.refused = False
            self._refuse(*deferred)

    # ---- refusals --------------------------------------------------------------------------------

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if self.refused or self.transport.is_closing():
            return
        if not self.head and self.cycle is None:
            self._close()  # never sent a byte: nothing to answer
        else:
            self._refuse_json(RequestTimeout("The request head was not received in time."))

    def _body_timed_out(self) -> None:
        self.body_timer = None
        if self.refused or self.transport.is_closing() or self.cycle is None:
            return
        if self.cycle.response_complete:
            self.refused = True  # answered already: the rest of the body is not waited for
            self._close(linger=True)
        elif not self.cycle.response_started:
            self._refuse_json(RequestTimeout("The request body was not received in time."))

    def _refuse_malformed(self) -> None:
        if header_section_has_control_character(bytes(self.head)):
            # The gateway's page, with a request id of its own like every answer.
            request_id = str(uuid.uuid4())
            extra = [(self.limits.request_id_header, request_id.encode())]
            self._refuse(503, b"text/html; charset=utf-8", GATEWAY_503_HTML, extra, request_id)
        else:
            self._refuse_json(BadRequest("The request is not valid HTTP/1.1."))

    def _refuse_method(self) -> None:
        """A method llhttp does not know: 501 when it is a well-formed token (RFC 9110 §9.1, as the
        app answers a method it knows nowhere), else a malformed request line."""
        head = bytes(self.head)
        method = head.lstrip(b"\r\n").split(b" ", 1)[0]
        if is_token(method) and not header_section_has_control_character(head):
            self._refuse_json(MethodNotImplemented(method.decode("ascii")))
        else:
            self._refuse_malformed()

    def _refuse_json(self, error: HeraldError) -> None:
        request_id = str(uuid.uuid4())
        body = error_body(
            f"resp_{request_id}", code=error.code, message=error.message, doc_base=self._doc_base()
        )
        extra = [(self.limits.request_id_header, request_id.encode())]
        self._refuse(error.status, b"application/json", orjson.dumps(body), extra, request_id)

    def _doc_base(self) -> str:
        """Like `base_url.of_request`, from the socket: a head refused here may name no usable host."""
        if self.limits.doc_base:
            return self.limits.doc_base.rstrip("/")
        host, port = self.server or ("127.0.0.1", 8000)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}" if port else f"http://{host}"

    def _refuse(
        self,
        status: int,
        content_type: bytes,
        body: bytes,
        extra: list[tuple[bytes, bytes]],
        request_id: str | None = None,
    ) -> None:
        """Answer and close; a request the app is waiting on sees the client gone, and its log line
        and metrics (`ops.observe`) show this answer and its request id."""
        if self.refused or self.transport.is_closing():
            return
        self.refused = True  # what the client still sends is dropped
        if self._answering_earlier():
            self.deferred = (status, content_type, body, extra, request_id)
            return
        if self.cycle is not None and not self.cycle.response_complete:
            state = self.cycle.scope.setdefault("state", {})
            state[ANSWERED_AT_SOCKET] = status
            if request_id is not None:
                state["request_id"] = request_id
        lines = [STATUS_LINE[status]]
        headers = [
            *self.server_state.default_headers,
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *extra,
        ]
        lines.extend(name + b": " + value + b"\r\n" for name, value in headers)
        self.transport.write(b"".join([*lines, b"\r\n", body]))
        self._close(linger=True)

    def _answering_earlier(self) -> bool:
        """Whether complete earlier requests are still being answered (pipelined) while a later
        one is refused (its head, or the wait for it): they must be answered first. A refusal
        while a body is arriving is that request's own."""
        if self.body_pending:
            return False
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _close(self, *, linger: bool = False) -> None:
        """Close; after an answer, half-close first (lingering close): a client still sending its
        head or body when refused would otherwise get a reset that can destroy the answer unread.
        The rest of what it sends is dropped; its own close (or the linger timer) ends the connection."""
        self._cancel_timers()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if linger and self.transport.can_write_eof():
            self.transport.write_eof()
            self.linger_timer = self.loop.call_later(self.limits.header_timeout, self.transport.close)
        else:
            self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self.head_timer, self.body_timer, self.linger_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.body_timer = self.linger_timer = None


_VERSIONS = frozenset({"1.0", "1.1"})


class _ResponseTransport(asyncio.Transport):
    """The transport a request's answer is written through (uvicorn's cycle writes to it).

    - The response head is held until the body's first write, and both go out in one send: one
      system call and one TCP segment per answer instead of two (on loopback each send also does
      the receiving side's work: the separate head write was about a quarter of the CPU of a served
      `GET /v5/offers`). A head with no body write after it (a HEAD request, a 204, a stream that
      pauses) goes out on the next turn of the event loop. Only the first write is held: later
      ones go straight through, so the real transport's flow control applies as before.
    - Closing it while the request body is still coming (the app answered first, e.g. 413) drops
      the rest of the body and closes lingering (see `HeraldHttpProtocol._close`).
    """

    def __init__(self, protocol: HeraldHttpProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.first_write = True
        self.held: bytes | None = None
        self.release: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.held is not None:
            data, self.held = self.held + data, None
            assert self.release is not None
            self.release.cancel()
        elif self.first_write:
            self.first_write = False
            self.held = bytes(data)
            self.release = self.protocol.loop.call_soon(self.flush)
            return
        self.protocol.transport.write(data)

    def flush(self) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            if not self.protocol.transport.is_closing():
                self.protocol.transport.write(held)

    def is_closing(self) -> bool:
        return self.protocol.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.protocol.transport.get_extra_info(name, default)

    def close(self) -> None:
        self.flush()
        if self.protocol.body_pending and not self.protocol.refused:
            self.protocol.refused = True
            self.protocol._close(linger=True)
        else:
            self.protocol.transport.close()


class _Refused(Exception):
    """Raised from a parser callback after answering, to stop parsing the rest of the data."""
