"""A lane: one kept-alive HTTP/1.1 connection that webhook POSTs go out on, one at a time.

Why not an HTTP client library (docs/decisions/0006-webhook-lanes-on-httptools.md): a POST on
aiohttp's client cost 180 to 250 µs of CPU against 35 µs here, on the same sink, and the POST is
most of what a webhook message costs. The answer is parsed by httptools (llhttp, the parser under
uvicorn): status, chunked or sized bodies, 1xx answers, keep-alive. TLS is asyncio's, verified
against `webhook.tls_context()`. What is left here is the connection's life:
- a lane keeps its connection between POSTs to the same origin (scheme, host, port), and opens a
  new one when the last answer said not to keep it, the server closed it while idle, or the next
  POST goes elsewhere;
- connecting, and every wait for more of the answer, is bounded by the POST's `time_limit`
  (`TimeoutError`); the POST as a whole is not, as a slow but steady answer is still an answer;
- a connection that breaks or answers with something that is not HTTP raises `ConnectionError`
  and is dropped. Nothing is ever sent twice here: a POST whose answer did not come is the
  caller's to attempt again (with the same delivery id).
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


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection and the answer awaited on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.keep = True
        self._headed = False  # the final answer's head is in (its body may end with the connection)
        self._answer: asyncio.Future[int] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._limit = 0.0
        self._heard = 0.0  # the loop's time when the answer last moved (the request's write, a chunk)

    # asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not a subclass of asyncio's, so no isinstance check).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: the connection is not one to reuse
            return
        self._heard = self._answer.get_loop().time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"the answer is not HTTP/1.1 ({exc})"))

    def eof_received(self) -> bool:
        self._ended()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended()

    def _ended(self) -> None:
        self.closed = True
        if self._headed:
            # An answer with neither a length nor chunks: its body is all that came before the end.
            self._answered()
        self._fail(ConnectionError("the connection closed before the whole answer came"))

    # httptools' side
    def on_headers_complete(self) -> None:
        self._headed = self.parser.get_status_code() >= 200

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

    async def exchange(self, request: bytes, time_limit: float) -> int:
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._headed = False
        self._limit = time_limit
        self._arm()
        self.transport.write(request)
        return await self._answer

    def close(self) -> None:
        self.closed = True
        self._disarm()
        if self.transport is not None:
            self.transport.close()

    def _arm(self) -> None:
        # One timer per exchange: when it fires, it checks how long the answer has been silent
        # and waits on for the rest of the limit if a chunk came meanwhile (a timer per chunk,
        # cancelled and made again, cost more than the answer's parsing).
        loop = asyncio.get_running_loop()
        self._heard = loop.time()
        self._timer = loop.call_at(self._heard + self._limit, self._check_silence)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_silence(self) -> None:
        loop = asyncio.get_running_loop()
        silent_until = self._heard + self._limit
        if loop.time() < silent_until:
            self._timer = loop.call_at(silent_until, self._check_silence)
            return
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
        answer's status. Raises TimeoutError or ConnectionError (an OSError, as is ssl.SSLError)."""
        target = target_of(url)
        connection = self._connection
        if connection is None or self._origin != target.origin or not connection.usable():
            connection = await self._connect(target, time_limit)
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
        try:
            return await connection.exchange(request, time_limit)
        except BaseException:
            # Timed out, broken, or the caller gave up on it (cancelled): what the connection
            # carries next is unknown, so it carries nothing more.
            self.drop()
            raise

    async def _connect(self, target: Target, time_limit: float) -> _Connection:
        self.drop()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(time_limit):
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
