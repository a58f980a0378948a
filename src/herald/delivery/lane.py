"""A lane: one kept-alive HTTP/1.1 connection that webhook POSTs go out on, one at a time.

Why not an HTTP client library (docs/decisions/0006-webhook-lanes-on-httptools.md): a POST on
aiohttp's client cost 180 to 250 µs of CPU against 35 µs here, on the same sink, and the POST is
most of what a webhook message costs. The answer is parsed by httptools (llhttp, the parser under
uvicorn): status, chunked or sized bodies, 1xx answers, keep-alive. TLS is asyncio's, verified
against `webhook.tls_context()`. What is left here is the connection's life:
- a lane keeps its connection between POSTs to the same origin (scheme, host, port), and opens a
  new one when the last answer said not to keep it, the server closed it while idle, or the next
  POST goes elsewhere;
- a kept connection the server closed before a single byte of the answer came (it closes after
  each answer without saying so, or its idle limit ran out as the request went) is replaced, and
  the POST sent once more on the new one: the rule HTTP clients follow for requests that are safe
  to repeat (RFC 9110 §9.2.2), which a webhook POST is, carrying its delivery id for the receiver
  to drop a repeat by. Only then: any other break raises `ConnectionError`, and a POST whose answer
  did not come is the caller's to attempt again later (with the same delivery id);
- the whole POST, connecting included, is bounded by its `time_limit` (`TimeoutError`), however
  the answer comes: one slow receiver holds a lane that long at most;
- an answer that is not HTTP raises `NotHttp`; a connection that closes before the whole answer
  came (none of it, fewer bytes than its length said, chunks that never end) raises `CutShort`.
The answer's body is read to its end and dropped (only the status is used).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from dataclasses import dataclass
from types import TracebackType
from typing import Self, cast
from urllib.parse import quote, urlsplit

import httptools


@dataclass(frozen=True)
class Target:
    """Where a URL's POSTs go: the connection's origin and the request line's parts."""

    tls: bool
    host: str
    port: int
    authority: bytes  # the Host header
    path: bytes  # the request target: path and query, percent-encoded

    @property
    def origin(self) -> tuple[bool, str, int]:
        return (self.tls, self.host, self.port)


@functools.lru_cache(maxsize=256)
def target_of(url: str) -> Target:
    """`url` (checked by `config.check_webhook_url` when its connector was added) as a Target."""
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if tls else 80)
    # Characters a request line cannot carry are escaped; escapes already there are kept.
    path = quote(parts.path or "/", safe=_KEPT)
    if parts.query:
        path += "?" + quote(parts.query, safe=_KEPT + "?")
    name = f"[{host}]" if ":" in host else host.encode("idna").decode("ascii")
    authority = name if parts.port is None else f"{name}:{parts.port}"
    return Target(tls, host, port, authority.encode("ascii"), path.encode("ascii"))


# What a path or query keeps as it is: RFC 3986's unreserved and sub-delimiters, ":", "@", "/",
# and "%" (an escape already there).
_KEPT = "/%:@!$&'()*+,;=-._~"


class NotHttp(ConnectionError):
    """The server answered with something that is not an HTTP/1.1 answer."""


class CutShort(ConnectionError):
    """The connection closed before the whole answer came."""


# Header names that say where an answer's body ends (else it ends with the connection).
_DELIMITING = frozenset({b"content-length", b"transfer-encoding"})


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection and the answer awaited on it."""

    def __init__(self) -> None:
        # The loop that makes it (the one it serves), kept: on Python 3.11 each
        # `asyncio.get_running_loop()` is a getpid() system call, ~2 µs on a virtual machine.
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.keep = True
        self.heard = False  # a byte of the current answer came
        self._headed = False  # the final answer's head is in
        self._delimited = False  # ... and it says where its body ends
        self._answer: asyncio.Future[int] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.retry_after: bytes | None = None  # the current answer's Retry-After, as sent

    # asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not a subclass of asyncio's, so no isinstance check).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: the connection is not one to reuse
            return
        self.heard = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(NotHttp(f"the answer is not HTTP/1.1 ({exc})"))

    def eof_received(self) -> bool:
        self._ended()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended()

    def _ended(self) -> None:
        self.closed = True
        if self._headed and not self._delimited:
            # An answer with neither a length nor chunks: its body is all that came before the end.
            self._answered()
        self._fail(CutShort("the connection closed before the whole answer came"))

    # httptools' side
    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered in _DELIMITING:
            self._delimited = True
        elif lowered == b"retry-after":
            self.retry_after = value

    def on_headers_complete(self) -> None:
        self._headed = self.parser.get_status_code() >= 200
        if not self._headed:
            # An interim answer's headers say nothing of the final one's.
            self._delimited, self.retry_after = False, None

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:
            return  # an interim answer: the final one follows on the same connection
        self.keep = self.parser.should_keep_alive()
        self._answered()

    def _answered(self) -> None:
        self._headed = False
        self._disarm()
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(self.parser.get_status_code())

    # the lane's side
    def usable(self) -> bool:
        return (
            self.keep and not self.closed and self.transport is not None and not self.transport.is_closing()
        )

    async def exchange(self, request: bytes, deadline: float) -> int:
        """Send `request`; its answer's status, by the loop's time `deadline`."""
        assert self.transport is not None
        loop = self.loop
        self._answer = loop.create_future()
        self.heard = self._headed = self._delimited = False
        self.retry_after = None
        self._timer = loop.call_at(deadline, self._timed_out)
        self.transport.write(request)
        return await self._answer

    def close(self) -> None:
        self.closed = True
        self._disarm()
        if self.transport is not None:
            self.transport.close()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(TimeoutError())

    def _fail(self, exc: Exception) -> None:
        answer = self._answer
        if answer is not None and not answer.done():
            answer.set_exception(exc)
        self.keep = False
        if not self.closed:
            self.close()


class Lane:
    """One kept-alive connection, one POST at a time (made inside the event loop that uses it)."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self._tls = tls
        self._connection: _Connection | None = None
        self._origin: tuple[bool, str, int] | None = None

    async def post(self, url: str, headers: bytes, body: bytes, time_limit: float) -> int:
        """POST `body` to `url` with `headers` (complete `Name: value\\r\\n` lines, ASCII); the
        answer's status, within `time_limit` seconds in all. Raises TimeoutError, NotHttp, CutShort,
        or the OSError of a connection that could not be made (ssl.SSLError among them)."""
        target = target_of(url)
        connection = self._connection
        loop = connection.loop if connection is not None else asyncio.get_running_loop()
        deadline = loop.time() + time_limit
        request = b"".join(
            (
                b"POST ",
                target.path,
                b" HTTP/1.1\r\nHost: ",
                target.authority,
                b"\r\n",
                headers,
                b"Content-Length: ",
                str(len(body)).encode(),
                b"\r\n\r\n",
                body,
            )
        )
        if connection is not None and self._origin == target.origin and connection.usable():
            try:
                return await self._exchange(connection, request, deadline)
            except ConnectionError as exc:
                if connection.heard or isinstance(exc, NotHttp):
                    raise
                # Closed before a byte of the answer: a kept connection the server had let go.
        return await self._exchange(await self._connect(target, deadline), request, deadline)

    @property
    def retry_after(self) -> bytes | None:
        """The last answer's Retry-After header, as sent (None: it had none, or none came)."""
        return self._connection.retry_after if self._connection is not None else None

    async def _exchange(self, connection: _Connection, request: bytes, deadline: float) -> int:
        try:
            return await connection.exchange(request, deadline)
        except BaseException:
            # Timed out, broken, or the caller gave up on it (cancelled): what the connection
            # carries next is unknown, so it carries nothing more.
            self.drop()
            raise

    async def _connect(self, target: Target, deadline: float) -> _Connection:
        self.drop()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(deadline):
            _, connection = await loop.create_connection(
                _Connection,
                target.host,
                target.port,
                ssl=self._tls if target.tls else None,
                server_hostname=target.host if target.tls else None,
            )
        self._connection, self._origin = connection, target.origin
        return connection

    def drop(self) -> None:
        """Close the connection (the next POST opens another)."""
        if self._connection is not None:
            self._connection.close()
        self._connection = self._origin = None

    async def close(self) -> None:
        self.drop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.drop()
