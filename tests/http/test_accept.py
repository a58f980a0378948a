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


def test_a_bound_socket_handed_over_is_served_by_a_listener_of_its_own_on_its_address() -> None:
    # uvicorn's worker processes get the socket bound, not listening, and pass it as `sock=`.
    loop = AcceptingLoop()
    _Echo.made = []
    bound = socket.socket()
    bound.bind(("127.0.0.1", 0))

    async def scenario() -> None:
        server = await loop.create_server(_Echo, sock=bound)
        assert isinstance(server, AcceptingServer)
        (listener,) = server.sockets
        assert listener is not bound
        assert listener.getsockname() == bound.getsockname()
        assert not bound.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)  # it takes no connection
        reader, writer = await asyncio.open_connection("127.0.0.1", bound.getsockname()[1])
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"HELLO"
        writer.close()
        server.close()

    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), BOUND))
    finally:
        loop.close()
        bound.close()


def test_processes_handed_one_bound_socket_share_a_burst_of_connections() -> None:
    # Two servers on one handed-over socket, as two worker processes have it: a burst of connections
    # is spread over both, where on the one shared socket the first to accept took every one.
    _Echo.made = []
    bound = socket.socket()
    bound.bind(("127.0.0.1", 0))
    port = bound.getsockname()[1]
    loops = [AcceptingLoop(), AcceptingLoop()]
    try:
        servers = [loop.run_until_complete(loop.create_server(_Echo, sock=bound)) for loop in loops]
        assert all(isinstance(server, AcceptingServer) for server in servers)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(WAITING)]
        try:
            taken = [server.accept_pending(server.sockets[0]) for server in servers]  # type: ignore[attr-defined]
            assert sum(taken) == WAITING
            # The kernel spreads them by a hash of each connection's addresses: both get a share
            # (fewer than 5 of 40 on one side happens about once in 10^6 runs).
            assert min(taken) >= 5, taken
            for loop, server in zip(loops, servers, strict=True):  # each connection set up, then closed
                loop.run_until_complete(asyncio.gather(*server.connecting))  # type: ignore[attr-defined]
        finally:
            for client in clients:
                client.close()
            for server in servers:
                server.close()
            for made in _Echo.made:
                made.transport.close()
            for loop in loops:
                loop.run_until_complete(asyncio.sleep(0))
    finally:
        for loop in loops:
            loop.close()
        bound.close()


def test_a_socket_already_listening_is_served_as_it_is() -> None:
    loop = AcceptingLoop()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    try:
        server = loop.run_until_complete(loop.create_server(_Echo, sock=listening))
        assert isinstance(server, AcceptingServer)
        assert server.sockets == (listening,)
        server.close()
    finally:
        loop.close()


def _nonblocking(client: socket.socket) -> socket.socket:
    client.setblocking(False)
    return client
