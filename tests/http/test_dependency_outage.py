"""Redis and PostgreSQL that refuse connections, or accept them and never answer: every request is
answered, 503 `SERVICE_UNAVAILABLE` in the error envelope, within a bounded time, and the service
serves again as soon as the dependency answers.

The peers are real sockets: a closed port refuses; `Peer` accepts and never answers (what it reads
is dropped), or pipes new connections to a real server once told to. Nothing here sleeps: the bounds
are the service's own, and "does not hang" is an answer within `ANSWERED_WITHIN` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import create_async_engine

from herald.config import Settings
from herald.db_errors import database_unavailable
from herald.http.limits import BUCKETS
from herald.http.middleware import rate_limit_store_unavailable
from herald.http.ratelimit import make_store, parse_windows
from herald.main import create_app
from tests import procfs
from tests.conftest import TEST_SECRET_KEY
from tests.factories import Tenant, make_tenant

OFFERS = "/v5/offers?limit=1"
ANSWERED_WITHIN = 15.0  # generous: the bounds are a few seconds; a hang is forever
REDIS_URL = os.environ.get("HERALD_TEST_REDIS_URL")


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Peer:
    """A loopback listener that accepts every connection. While `stalled` (or with no `target`) it
    never answers one (and keeps it open); otherwise it pipes each new connection to `target`, and
    while `flowing` is clear it holds what either side sends (a peer that stopped mid-stream)."""

    def __init__(self, target: tuple[str, int] | None = None) -> None:
        self.target = target
        self.stalled = True
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.accepted = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self, port: int = 0) -> Peer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        try:
            if self.stalled or self.target is None:
                while await reader.read(65536):
                    pass  # read and dropped: never a byte back
                return
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._writers.append(up_writer)
            await asyncio.gather(
                _pipe(reader, up_writer, self.flowing), _pipe(up_reader, writer, self.flowing)
            )
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for writer in self._writers:
            with suppress(ConnectionError, OSError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, flowing: asyncio.Event) -> None:
    try:
        while data := await source.read(65536):
            await flowing.wait()
            sink.write(data)
            await sink.drain()
    finally:
        sink.close()


@asynccontextmanager
async def peer(target: tuple[str, int] | None = None, port: int = 0) -> AsyncIterator[Peer]:
    started = await Peer(target).start(port)
    try:
        yield started
    finally:
        await started.aclose()


@asynccontextmanager
async def served(
    database_url: str, redis_url: str | None, **more: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app as `herald serve` builds it from settings (its rate-limit store too), and a client."""
    settings = Settings(
        database_url=database_url,
        redis_url=redis_url,
        base_url="http://testserver",
        secret_key=TEST_SECRET_KEY,
        **more,
    )
    app = create_app(settings)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield app, client
    finally:
        await app.state.herald.aclose()


async def answered(call: Awaitable[httpx.Response]) -> httpx.Response:
    """`call`'s answer, which must come within `ANSWERED_WITHIN` seconds (else: it hangs)."""
    return await asyncio.wait_for(call, ANSWERED_WITHIN)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert "retry" in error["message"]
    assert response.json()["response_id"].startswith("resp_")


def assert_no_crash_logged(caplog: pytest.LogCaptureFixture) -> None:
    crashes = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert crashes == [], [r.getMessage() for r in crashes]


def redis_db() -> str:
    """The test Redis's database number (the test URL's path), for URLs of peers in front of it."""
    return urlsplit(REDIS_URL or "redis://x/0").path.lstrip("/") or "0"


class TestRedisOutage:
    async def test_refused_connections_answer_503_without_a_crash(
        self, database_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        async with served(database_url, f"redis://127.0.0.1:{closed_port()}/0") as (app, client):
            tenant = await make_tenant(app)
            for _ in range(3):  # each request tries afresh, none waits behind another's failure
                assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))
            write = client.post("/v5/offers", headers=tenant.write_headers(), json={"name": "x"})
            assert_unavailable(await answered(write))
            health = await answered(client.get("/healthz"))
            assert (health.status_code, health.json()) == (200, {"status": "ok"})
        assert_no_crash_logged(caplog)
        assert any("rate-limit store (Redis) unavailable" in r.getMessage() for r in caplog.records)

    async def test_a_redis_that_never_answers_gives_503_in_bounded_time(
        self, database_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        async with peer() as hole, served(database_url, f"redis://127.0.0.1:{hole.port}/0") as (app, client):
            tenant = await make_tenant(app)
            first = await answered(client.get(OFFERS, headers=tenant.headers()))
            assert_unavailable(first)
            # Concurrent requests, then one more: none is left waiting on the silent connection.
            together = await answered(
                asyncio.gather(*(client.get(OFFERS, headers=tenant.headers()) for _ in range(5)))
            )
            for response in together:
                assert_unavailable(response)
            assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))
            # /healthz says the process answers (README); /readyz names Redis as not answering.
            health = await answered(client.get("/healthz"))
            assert (health.status_code, health.json()) == (200, {"status": "ok"})
            ready = await answered(client.get("/readyz"))
            assert ready.status_code == 503
            assert ready.json()["failed"] == ["redis"]
            assert ready.json()["checks"]["redis"].startswith("unreachable")
            assert hole.accepted >= 1
        assert_no_crash_logged(caplog)

    async def test_a_url_socket_timeout_sets_the_bound(self, database_url: str) -> None:
        async with peer() as hole:
            url = f"redis://127.0.0.1:{hole.port}/0?socket_timeout=0.2"
            async with served(database_url, url) as (app, client):
                assert app.state.herald.limiter.timeout == 0.2
                tenant = await make_tenant(app)
                assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))


@pytest.mark.redis
class TestRedisRecovery:
    @pytest.fixture
    def redis_address(self) -> tuple[str, int]:
        if not REDIS_URL:
            pytest.skip("HERALD_TEST_REDIS_URL not set")
        parts = urlsplit(REDIS_URL)
        return parts.hostname or "127.0.0.1", parts.port or 6379

    async def test_serves_again_as_soon_as_a_silent_redis_answers(
        self, database_url: str, redis_address: tuple[str, int]
    ) -> None:
        async with peer(redis_address) as front:
            url = f"redis://127.0.0.1:{front.port}/{redis_db()}"
            async with served(database_url, url) as (app, client):
                tenant = await make_tenant(app)
                assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))
                stalled = front.accepted
                front.stalled = False  # the stalled connections stay silent: only new ones answer
                response = await answered(client.get(OFFERS, headers=tenant.headers()))
                assert response.status_code == 200, response.text
                assert front.accepted > stalled
                assert response.headers["x-ratelimit-remaining"].isdigit()

    async def test_a_redis_that_stops_answering_is_given_up_on_after_the_bound_not_twice_it(
        self, database_url: str, redis_address: tuple[str, int]
    ) -> None:
        # Redis stopped (SIGSTOP) just after an answer: the first request after it waited twice
        # the bound, as the watch armed for the answered call granted a whole period more.
        bound = 1.0
        async with peer(redis_address) as front:
            front.stalled = False
            url = f"redis://127.0.0.1:{front.port}/{redis_db()}?socket_timeout={bound}"
            async with served(database_url, url) as (app, client):
                tenant = await make_tenant(app)
                waits = []
                for _ in range(3):  # the least of three: a loaded machine delays any one of them
                    front.flowing.set()
                    assert (await answered(client.get(OFFERS, headers=tenant.headers()))).status_code == 200
                    front.flowing.clear()
                    started = time.monotonic()
                    assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))
                    waits.append(time.monotonic() - started)
                front.flowing.set()
                assert bound * 0.9 <= min(waits) < bound * 1.6, waits

    async def test_serves_again_as_soon_as_a_refusing_redis_listens(
        self, database_url: str, redis_address: tuple[str, int]
    ) -> None:
        port = closed_port()
        async with served(database_url, f"redis://127.0.0.1:{port}/{redis_db()}") as (app, client):
            tenant = await make_tenant(app)
            assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))
            async with peer(redis_address, port=port) as front:
                front.stalled = False
                response = await answered(client.get(OFFERS, headers=tenant.headers()))
                assert response.status_code == 200, response.text


@pytest.mark.redis
class TestSlowProcess:
    async def test_a_loop_held_up_past_the_bound_is_not_a_silent_redis(self) -> None:
        # Redis answers at once, but this process's event loop is held up by a synchronous step
        # longer than the bound: the reply is waiting unread when the watch comes due. The call
        # still gets its answer (it was taken for a silent Redis, and the request answered 503).
        if not REDIS_URL:
            pytest.skip("HERALD_TEST_REDIS_URL not set")
        bound = 0.5
        url = f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}socket_timeout={bound}"
        store = make_store(url, prefix=f"herald:test-slow:{os.getpid()}:")
        try:
            windows = parse_windows("100/minute")
            assert (await store.acquire("k", windows, 1_000.0)).allowed  # connected
            pending = asyncio.ensure_future(store.acquire("k", windows, 1_001.0))
            for _ in range(50):  # the call handed to the sender and written
                await asyncio.sleep(0)
            time.sleep(bound * 1.5)  # noqa: ASYNC251 - the held-up loop is the point
            assert (await pending).allowed
        finally:
            await store.reset()
            await store.aclose()


class TestDatabaseOutage:
    async def test_a_postgres_that_never_answers_gives_503(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.WARNING)
        async with peer() as hole:
            url = f"postgresql+asyncpg://herald@127.0.0.1:{hole.port}/herald"
            async with served(url, None, db_connect_timeout_seconds=1.0) as (_, client):
                headers = Tenant("WNOSUCH", "hk_c755a7b06e19_unknown", "c755a7b06e19").headers()
                assert_unavailable(await answered(client.get(OFFERS, headers=headers)))
                assert hole.accepted >= 1
                health = await answered(client.get("/healthz"))
                assert health.status_code == 200
        assert_no_crash_logged(caplog)
        assert any("database unavailable: TimeoutError" in r.getMessage() for r in caplog.records)

    async def test_a_postgres_that_refuses_gives_503(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.WARNING)
        url = f"postgresql+asyncpg://herald@127.0.0.1:{closed_port()}/herald"
        async with served(url, None) as (_, client):
            headers = Tenant("WNOSUCH", "hk_c755a7b06e19_unknown", "c755a7b06e19").headers()
            assert_unavailable(await answered(client.get(OFFERS, headers=headers)))
        assert_no_crash_logged(caplog)


class TestDatabaseThatStopsAnswering:
    async def test_a_statement_the_server_never_answers_gives_503_then_serves_again(
        self, database_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        # Connections open, then the server (or the path to it) stops answering: before, a request
        # on an open connection waited for as long as the server did, with no answer at all.
        if not database_url.startswith("postgresql"):
            pytest.skip("statement timeouts are PostgreSQL's (SQLite is in the process)")
        caplog.set_level(logging.WARNING)
        parts = urlsplit(database_url)
        async with peer((parts.hostname or "127.0.0.1", parts.port or 5432)) as path:
            path.stalled = False
            through = database_url.replace(parts.netloc, f"{parts.username}@127.0.0.1:{path.port}")
            async with served(through, None, db_statement_timeout_seconds=0.5) as (app, client):
                tenant = await make_tenant(app)
                assert (await answered(client.get(OFFERS, headers=tenant.headers()))).status_code == 200
                path.flowing.clear()  # the server stops answering on the open connections
                assert_unavailable(await answered(client.get(OFFERS, headers=tenant.headers())))
                path.flowing.set()
                assert (await answered(client.get(OFFERS, headers=tenant.headers()))).status_code == 200
        assert_no_crash_logged(caplog)


def _open_to(port: int, besides: int) -> bool:
    """Whether this process holds a TCP connection to `port`, established, other than from local port `besides`."""
    inodes = procfs.socket_inodes(os.getpid())
    return any(
        remote == port and state == "01" and local != besides and inode in inodes
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for local, remote, state, inode in procfs.tcp_rows(table)
    )


@pytest.mark.own_database  # every connection of the database is terminated
class TestConnectionsTheServerClosed:
    async def test_a_restart_while_the_pools_are_idle_costs_no_request_an_answer(
        self, database_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        # A restart, a failover or `pg_terminate_backend` closes every pooled connection while no
        # request holds it. Before, the first request handed each dead one answered 503.
        if not database_url.startswith("postgresql"):
            pytest.skip("the server closing connections is PostgreSQL's (SQLite is in the process)")
        import asyncpg

        caplog.set_level(logging.WARNING)
        campaign = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}
        admin = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            async with served(database_url, None) as (app, client):
                tenant = await make_tenant(app, rate_limits=dict.fromkeys(BUCKETS, "1000/second"))
                headers = tenant.headers(campaigns=True)

                async def burst() -> list[int]:
                    # Reads and writes side by side: several connections of every pool in use.
                    calls = [client.get(OFFERS, headers=headers) for _ in range(4)]
                    calls += [
                        client.post(
                            "/v5/campaigns", headers=tenant.write_headers(campaigns=True), json=campaign
                        )
                        for _ in range(4)
                    ]
                    return [response.status_code for response in await asyncio.gather(*calls)]

                assert await burst() == [200] * 4 + [201] * 4
                closed = await admin.fetchval(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()) AS terminated"
                )
                assert closed >= 2
                # Until the server's FIN reached every one of this process's sockets but the
                # admin's (the kernel's view, before the event loop's), then one turn of the loop
                # to read them: the instant a restart leaves behind.
                port = urlsplit(database_url).port or 5432
                mine = admin._transport.get_extra_info("sockname")[1]
                deadline = time.monotonic() + ANSWERED_WITHIN
                while _open_to(port, besides=mine) and time.monotonic() < deadline:
                    await admin.fetchval("SELECT 1")  # a turn of the loop, as the burst's would be
                await admin.fetchval("SELECT 1")
                assert await burst() == [200] * 4 + [201] * 4
        finally:
            await admin.close()
        assert_no_crash_logged(caplog)


class TestWhatCountsAsUnavailable:
    async def test_a_pool_whose_connections_stay_busy(self, tmp_path: Any) -> None:
        engine = create_async_engine(
            f"sqlite+aiosqlite:///{tmp_path / 'busy.db'}", pool_size=1, max_overflow=0, pool_timeout=0.05
        )
        try:
            async with engine.connect() as held:
                await held.execute(text("SELECT 1"))
                with pytest.raises(PoolTimeoutError) as raised:
                    async with engine.connect():
                        pass
            assert database_unavailable(raised.value)
        finally:
            await engine.dispose()

    async def test_the_drivers_connect_timeout_through_sqlalchemy(self) -> None:
        async with peer() as hole:
            engine = create_async_engine(
                f"postgresql+asyncpg://herald@127.0.0.1:{hole.port}/herald", connect_args={"timeout": 0.2}
            )
            try:
                with pytest.raises(TimeoutError) as raised:
                    async with engine.connect():
                        pass
                assert database_unavailable(raised.value)
            finally:
                await engine.dispose()

    def test_the_drivers_timeout_as_direct_reads_wrap_it(self) -> None:
        assert database_unavailable(DBAPIError("SELECT 1", (), TimeoutError()))

    async def test_a_timeout_from_elsewhere_stays_an_internal_error(self) -> None:
        with pytest.raises(TimeoutError) as raised:
            async with asyncio.timeout(0):
                await asyncio.sleep(1)
        assert not database_unavailable(raised.value)
        assert not rate_limit_store_unavailable(raised.value)
