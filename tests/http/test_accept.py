"""The served loop's accept: every connection waiting on the listening socket is taken in one turn."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from herald.http.accept import AcceptingLoop, AcceptingServer

WAITING = 40
BOUND = 30.0  # seconds: a failure ends the test instead of hanging it


class _Echo(asyncio.Protocol):
    made: list[_Echo] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport  # uvloop's transports are not asyncio.Transport subclasses
        _Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data.upper())


def test_every_waiting_connection_is_accepted_in_one_call_and_served() -> None:
    loop = AcceptingLoop()
    _Echo.made = []

    async def scenario() -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0, backlog=WAITING * 2)
        assert isinstance(server, AcceptingServer)
        (listener,) = server.sockets
        port = listener.getsockname()[1]
        # The kernel completes these handshakes and queues them; nothing was accepted yet.
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(WAITING)]
        try:
            assert server.accept_pending(listener) == WAITING
            assert server.accept_pending(listener) == 0  # the queue is empty: no spin, no block
            for index, client in enumerate(clients):
                client.sendall(b"ping %d" % index)
            answers = await asyncio.gather(*(loop.sock_recv(_nonblocking(client), 64) for client in clients))
            assert answers == [b"PING %d" % index for index in range(WAITING)]
            assert len(_Echo.made) == WAITING
        finally:
            for client in clients:
                client.close()
            server.close()
        assert not server.is_serving()
        assert listener.fileno() == -1  # closed with the server

    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), BOUND))
    finally:
        loop.close()


def test_a_bound_socket_handed_over_is_listened_on_and_accepts_later_connections() -> None:
    # uvicorn's worker processes get the socket bound, not listening, and pass it as `sock=`.
    loop = AcceptingLoop()
    _Echo.made = []
    bound = socket.socket()
    bound.bind(("127.0.0.1", 0))

    async def scenario() -> None:
        server = await loop.create_server(_Echo, sock=bound)
        reader, writer = await asyncio.open_connection("127.0.0.1", bound.getsockname()[1])
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"HELLO"
        writer.close()
        server.close()

    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), BOUND))
    finally:
        loop.close()


def _nonblocking(client: socket.socket) -> socket.socket:
    client.setblocking(False)
    return client
