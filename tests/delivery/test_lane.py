"""A webhook lane (`delivery.lane`) against a scripted HTTP server on a real socket: what it sends,
how it reads every form of answer, when it keeps its connection and when it opens another."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from herald.delivery.lane import CutShort, Lane, NotHttp, target_of
from tests.delivery.servers import Certificate

HEADERS = b"Content-Type: application/json\r\nX-Herald-Delivery: d1\r\n"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"

# What the server answers to the n-th request it reads (n counted over all connections). None:
# close the connection without answering; a list: its parts written TRICKLE seconds apart.
Script = Callable[[int], bytes | list[bytes] | None]
TRICKLE = 0.1


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        # The loop `herald serve` and `herald worker` send on: its transports are not asyncio's classes.
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    backend: tuple[str, dict[str, bool]] = request.param
    return backend


@dataclass
class Scripted:
    port: int
    requests: list[bytes] = field(default_factory=list)  # each whole request, head and body
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/in?token=t%20x&b=1"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., asyncio.Future[Scripted]]]:
    servers: list[asyncio.Server] = []

    async def start(
        script: Script, *, close_after: bool = False, tls: ssl.SSLContext | None = None
    ) -> Scripted:
        state = Scripted(0)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            state.connections += 1
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                    state.requests.append(head + await reader.readexactly(length))
                    answer = script(len(state.requests))
                    if answer is None:
                        break
                    for part in [answer] if isinstance(answer, bytes) else answer:
                        writer.write(part)
                        await writer.drain()
                        if not isinstance(answer, bytes):
                            await asyncio.sleep(TRICKLE)
                    if close_after:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
        servers.append(server)
        state.port = server.sockets[0].getsockname()[1]
        return state

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()
        await server.wait_closed()


def _always(answer: bytes) -> Script:
    return lambda _: answer


async def test_the_request_and_one_connection_kept_between_posts(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    server = await serve(_always(NO_CONTENT))
    async with Lane(ssl.create_default_context()) as lane:
        assert await lane.post(server.url, HEADERS, b'{"a":1}', 5) == 204
        assert await lane.post(server.url, HEADERS, b'{"b":22}', 5) == 204
    assert server.connections == 1
    first, second = server.requests
    assert first == (
        b"POST /in?token=t%20x&b=1 HTTP/1.1\r\nHost: 127.0.0.1:" + str(server.port).encode() + b"\r\n"
        b"Content-Type: application/json\r\nX-Herald-Delivery: d1\r\nContent-Length: 7\r\n\r\n"
        b'{"a":1}'
    )
    assert second.endswith(b'Content-Length: 8\r\n\r\n{"b":22}')


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        b"HTTP/1.1 201 Created\r\nContent-Length: 11\r\n\r\nhello world",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=["chunked", "sized", "interim-then-final"],
)
async def test_answers_read_to_their_end_keep_the_connection(
    serve: Callable[..., asyncio.Future[Scripted]], answer: bytes
) -> None:
    server = await serve(_always(answer))
    status = int(answer.rsplit(b"HTTP/1.1 ", 1)[1][:3])
    async with Lane(ssl.create_default_context()) as lane:
        assert [await lane.post(server.url, HEADERS, b"{}", 5) for _ in range(3)] == [status] * 3
    assert server.connections == 1


async def test_an_answer_that_says_close_is_followed_by_a_new_connection(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    server = await serve(_always(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
    async with Lane(ssl.create_default_context()) as lane:
        assert [await lane.post(server.url, HEADERS, b"{}", 5) for _ in range(3)] == [200] * 3
    assert server.connections == 3


async def test_a_connection_the_server_closed_while_idle_is_replaced(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    # The server answers with a length and then closes, without saying so.
    server = await serve(_always(NO_CONTENT), close_after=True)
    async with Lane(ssl.create_default_context()) as lane:
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 204
        for _ in range(50):  # until the lane has read the server's end of the connection
            await asyncio.sleep(0)
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 204
    assert (server.connections, len(server.requests)) == (2, 2)


async def test_a_server_that_closes_after_each_answer_without_saying_so(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    # The next POST goes out before the lane has read the close: the connection closes before a
    # byte of the answer, and the POST is sent once more on a new one.
    server = await serve(_always(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), close_after=True)
    async with Lane(ssl.create_default_context()) as lane:
        assert [await lane.post(server.url, HEADERS, b"{}", 5) for _ in range(3)] == [200] * 3
    assert server.connections == 3
    assert len(server.requests) <= 5  # each POST reached it at most twice (the second: the answer)


async def test_a_kept_connection_closed_before_any_answer_is_replaced_once(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    server = await serve(lambda n: None if n == 2 else NO_CONTENT)
    async with Lane(ssl.create_default_context()) as lane:
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 204
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 204  # read, dropped, sent again
    assert (server.connections, len(server.requests)) == (2, 3)


async def test_an_answer_cut_short_of_its_length_fails(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    server = await serve(
        _always(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nten bytes."), close_after=True
    )
    async with Lane(ssl.create_default_context()) as lane:
        with pytest.raises(CutShort):
            await lane.post(server.url, HEADERS, b"{}", 5)
    assert len(server.requests) == 1  # a fresh connection's break is never sent again


async def test_a_body_that_ends_with_the_connection(serve: Callable[..., asyncio.Future[Scripted]]) -> None:
    server = await serve(_always(b"HTTP/1.0 200 OK\r\n\r\nno length, ended by the close"), close_after=True)
    async with Lane(ssl.create_default_context()) as lane:
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 200
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 200
    assert server.connections == 2


async def test_a_close_before_the_answer_fails_and_nothing_is_sent_again(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    server = await serve(lambda n: None if n == 1 else NO_CONTENT)
    async with Lane(ssl.create_default_context()) as lane:
        with pytest.raises(CutShort, match="closed before"):
            await lane.post(server.url, HEADERS, b"{}", 5)
        assert len(server.requests) == 1
        assert await lane.post(server.url, HEADERS, b"{}", 5) == 204  # the next one connects afresh
    assert server.connections == 2


async def test_an_answer_that_is_not_http_fails(serve: Callable[..., asyncio.Future[Scripted]]) -> None:
    server = await serve(_always(b"SSH-2.0-OpenSSH_9.2\r\n"))
    async with Lane(ssl.create_default_context()) as lane:
        with pytest.raises(NotHttp, match="not HTTP"):
            await lane.post(server.url, HEADERS, b"{}", 5)


async def test_no_answer_within_the_time_limit_is_a_timeout(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    server = await serve(_always(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"))  # never ends
    async with Lane(ssl.create_default_context()) as lane:
        with pytest.raises(TimeoutError):
            await lane.post(server.url, HEADERS, b"{}", 0.2)
    assert server.connections == 1


async def test_the_whole_post_is_bounded_however_its_answer_trickles(
    serve: Callable[..., asyncio.Future[Scripted]],
) -> None:
    # Seven parts a tenth of a second apart: each comes well within the limit (0.4 s), the whole
    # answer does not. One slow receiver holds a lane (and the window waiting on it) that long at most.
    parts = [b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n", *(bytes([c]) for c in b"steady")]
    server = await serve(lambda _: parts)
    async with Lane(ssl.create_default_context()) as lane:
        with pytest.raises(TimeoutError):
            await lane.post(server.url, HEADERS, b"{}", 4 * TRICKLE)


async def test_a_new_origin_gets_a_new_connection(serve: Callable[..., asyncio.Future[Scripted]]) -> None:
    one, two = await serve(_always(NO_CONTENT)), await serve(_always(NO_CONTENT))
    async with Lane(ssl.create_default_context()) as lane:
        for server in (one, two, one):
            assert await lane.post(server.url, HEADERS, b"{}", 5) == 204
    assert (one.connections, two.connections) == (2, 1)


async def test_tls_is_verified(
    serve: Callable[..., asyncio.Future[Scripted]], certificate: Certificate
) -> None:
    server = await serve(_always(NO_CONTENT), tls=certificate.server_context())
    url = f"https://localhost:{server.port}/in"
    trusting = ssl.create_default_context(cafile=str(certificate.cert_file))
    async with Lane(trusting) as lane:
        assert await lane.post(url, HEADERS, b"{}", 5) == 204
        assert await lane.post(url, HEADERS, b"{}", 5) == 204
    assert server.connections == 1
    async with Lane(ssl.create_default_context()) as lane:
        with pytest.raises(ssl.SSLCertVerificationError):
            await lane.post(url, HEADERS, b"{}", 5)


@pytest.mark.parametrize(
    ("url", "host", "port", "authority", "path"),
    [
        ("https://hooks.example.com/a/b", "hooks.example.com", 443, b"hooks.example.com", b"/a/b"),
        ("http://localhost:8080", "localhost", 8080, b"localhost:8080", b"/"),
        ("http://[::1]:9/x?q=1", "::1", 9, b"[::1]:9", b"/x?q=1"),
        ("https://bücher.example/ä b", "bücher.example", 443, b"xn--bcher-kva.example", b"/%C3%A4%20b"),
    ],
)
def test_targets(url: str, host: str, port: int, authority: bytes, path: bytes) -> None:
    target = target_of(url)
    assert (target.host, target.port, target.authority, target.path) == (host, port, authority, path)
