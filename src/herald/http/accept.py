"""The event loop `herald serve` runs: uvloop, accepting every pending connection in one turn.

libuv (since 1.45, libuv/libuv#3696) accepts one new connection per turn of its loop. A turn of a
busy server runs every request that is ready, so under load a burst of new connections waits one
whole turn each: measured with 32 new connections against a busy `POST /v5/campaigns` on SQLite, the
first request of the last ones waited 2-3 s while the app answered in 11 ms (p99). asyncio's own
loop accepts up to the listen backlog per turn, but costs about a quarter more CPU per request.

So the listening sockets are served here instead: one reader per socket accepts until the queue is
empty and hands each connection to uvloop (`connect_accepted_socket`), which then runs it exactly as
one it had accepted itself. Everything else is uvloop's.

Under `--workers N` each process listens on a socket of its own (`SO_REUSEPORT`, `_own_listener`):
on the one socket uvicorn shares, accepting every waiting connection would let one process take
them all.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvloop

logger = logging.getLogger("herald.http")

# When the process is out of file descriptors, stop accepting for this long (asyncio does the same):
# the pending connections wait in the kernel's queue instead of spinning the loop.
_EXHAUSTED_PAUSE_SECONDS = 1.0
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def accepting_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's `loop=` factory (`herald.http.accept:accepting_loop`)."""
    return AcceptingLoop()


class AcceptingLoop(uvloop.Loop):
    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: Any = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        **kwargs: Any,
    ) -> asyncio.AbstractServer:
        if ssl is not None or kwargs:
            return await super().create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **kwargs
            )
        listeners = [_own_listener(sock)] if sock is not None else _bind(host, port)
        for listener in listeners:
            # uvicorn binds the socket it hands to its worker processes but leaves listening to
            # create_server, as asyncio's and uvloop's do (again on a listening socket: harmless).
            listener.listen(backlog)
        server = AcceptingServer(self, protocol_factory, listeners)
        server.start()
        return server


class AcceptingServer(asyncio.AbstractServer):
    """Accepts on `listeners` until their queues are empty, every time one is readable."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        listeners: list[socket.socket],
    ) -> None:
        self.loop = loop
        self.protocol_factory = protocol_factory
        self.listeners = listeners
        self.serving = False
        self.connecting: set[asyncio.Task[Any]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self.listeners)

    def start(self) -> None:
        for listener in self.listeners:
            listener.setblocking(False)
            self.loop.add_reader(listener.fileno(), self.accept_pending, listener)
        self.serving = True

    def accept_pending(self, listener: socket.socket) -> int:
        """Accept every connection waiting on `listener`; returns how many."""
        accepted = 0
        while self.serving:
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in _EXHAUSTED:
                    logger.error("cannot accept connections for now: %s", exc)
                    self.loop.remove_reader(listener.fileno())
                    self.loop.call_later(_EXHAUSTED_PAUSE_SECONDS, self._resume, listener)
                break  # anything else (e.g. the client reset before the accept) concerns one connection
            accepted += 1
            self._hand_over(connection)
        return accepted

    def _hand_over(self, connection: socket.socket) -> None:
        connection.setblocking(False)
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = self.loop.create_task(self.loop.connect_accepted_socket(self.protocol_factory, connection))
        self.connecting.add(task)
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[Any]) -> None:
        self.connecting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.debug("a connection closed before it was set up: %r", task.exception())

    def _resume(self, listener: socket.socket) -> None:
        if self.serving:
            self.loop.add_reader(listener.fileno(), self.accept_pending, listener)

    # ---- asyncio.AbstractServer ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting and close the listening sockets; open connections are left to drain."""
        if not self.serving:
            return
        self.serving = False
        for listener in self.listeners:
            self.loop.remove_reader(listener.fileno())
            listener.close()

    async def wait_closed(self) -> None:
        return None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def is_serving(self) -> bool:
        return self.serving

    async def start_serving(self) -> None:
        return None

    async def serve_forever(self) -> None:
        raise NotImplementedError("herald serve drives the server through uvicorn")


def _own_listener(shared: socket.socket) -> socket.socket:
    """This process's listening socket in place of `shared`, the one socket uvicorn binds and hands to
    each of its worker processes.

    On one shared socket the process that wakes first accepts every waiting connection
    (`accept_pending`): 32 connections opened at once against `herald serve --workers 2` went all to
    one process in about one run in three, which then served at half the machine's rate while the
    other idled. So each process listens on a socket of its own, bound to the same address with
    `SO_REUSEPORT`, and the kernel spreads new connections over them (by a hash of their addresses);
    the shared socket stays bound, never listened on. Where that cannot be (no `SO_REUSEPORT`, not
    TCP, a socket already listening), the shared socket serves as before."""
    reuse_port = getattr(socket, "SO_REUSEPORT", None)
    if (
        reuse_port is None
        or shared.family not in (socket.AF_INET, socket.AF_INET6)
        or shared.type != socket.SOCK_STREAM
        or shared.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    ):
        return shared
    own = socket.socket(shared.family, socket.SOCK_STREAM)
    try:
        # Every socket of the address must allow it, the shared one included (its option is the
        # same kernel socket's in every process: setting it again is harmless).
        shared.setsockopt(socket.SOL_SOCKET, reuse_port, 1)
        own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        own.setsockopt(socket.SOL_SOCKET, reuse_port, 1)
        if shared.family == socket.AF_INET6:  # dual-stack or not, as the shared socket is
            v6_only = shared.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
            own.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6_only)
        own.bind(shared.getsockname())
    except OSError as error:
        logger.warning("listening on the shared socket (no socket of this process's own: %s)", error)
        own.close()
        return shared
    return own


def _bind(host: Any, port: Any) -> list[socket.socket]:
    """Sockets bound to `host`:`port`, as `loop.create_server` would bind them."""
    listeners: list[socket.socket] = []
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            listener = socket.socket(family, kind, proto)
            listeners.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind(address)
    except OSError:
        for listener in listeners:
            listener.close()
        raise
    return listeners
