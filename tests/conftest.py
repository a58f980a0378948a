"""Test fixtures: a migrated real database per run, an app per test, a frozen clock, an HTTP client.

SQLite by default; PostgreSQL and Redis when HERALD_TEST_DATABASE_URL / HERALD_TEST_REDIS_URL are set.
Each run migrates a template database once and works on copies of it (`Databases`): one the tests
share, each in workspaces of its own (random ids), so tests never see each other's rows and tenancy
is exercised everywhere; and one per test that runs a worker over every workspace.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from herald.clock import FrozenClock
from herald.config import Settings
from herald.http.ratelimit import MemoryRateLimitStore, RateLimitStore, RedisRateLimitStore
from herald.main import create_app
from herald.migrate import upgrade
from tests.factories import Tenant, make_tenant

PG_URL = os.environ.get("HERALD_TEST_DATABASE_URL")
# Tests revoke keys and change limits, then call at once: every app and served process of the run
# reads credentials afresh (the cache and its bounded lag are tested on their own, with a fake clock).
os.environ.setdefault("HERALD_CREDENTIALS_CACHE_SECONDS", "0")
REDIS_URL = os.environ.get("HERALD_TEST_REDIS_URL")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """Every `async def` test runs on anyio's asyncio backend (marked before parametrization)."""
    if name.startswith("test") and inspect.iscoroutinefunction(obj):
        pytest.mark.anyio(obj)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def _on_server(base_url: str, statement: str) -> None:
    import asyncpg

    url = make_url(base_url)

    async def run() -> None:
        connection = await asyncpg.connect(
            user=url.username, password=url.password, host=url.host, port=url.port, database=url.database
        )
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())


class Databases:
    """The run's databases: one migrated template, copied for the database the run shares and for
    each test marked `own_database` (a worker that scans every workspace then finds only its test's
    work, not what thousands of tests before it left behind). A copy costs a fraction of migrating."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._names: list[str] = []
        if PG_URL:
            self._template = f"herald_t_{secrets.token_hex(4)}"
            _on_server(PG_URL, f'CREATE DATABASE "{self._template}"')
            self._names.append(self._template)
            upgrade(make_url(PG_URL).set(database=self._template).render_as_string(hide_password=False))
        else:
            self._template = str(tmp / "template.db")
            upgrade(f"sqlite+aiosqlite:///{self._template}")

    def fresh(self) -> str:
        """The URL of a new copy of the migrated template."""
        if PG_URL:
            name = f"herald_t_{secrets.token_hex(4)}"
            _on_server(PG_URL, f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
            self._names.append(name)
            return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
        path = self._tmp / f"herald-{secrets.token_hex(4)}.db"
        # closing(): a connection's own `with` ends a transaction, not the connection.
        with closing(sqlite3.connect(self._template)) as source, closing(sqlite3.connect(path)) as copy:
            source.backup(copy)
        return f"sqlite+aiosqlite:///{path}"

    def drop(self) -> None:
        assert PG_URL
        for name in reversed(self._names):
            _on_server(PG_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    found = Databases(Path(tmp_path_factory.mktemp("db")))
    yield found
    if PG_URL:
        found.drop()


@pytest.fixture(scope="session")
def database_url(databases: Databases) -> str:
    """The database the run's tests share (each in workspaces of its own)."""
    return databases.fresh()


# Connector secrets are sealed with a real key in tests too (there is no default key).
TEST_SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture
def settings(request: pytest.FixtureRequest, database_url: str, databases: Databases) -> Settings:
    """A test marked `own_database` gets a database of its own (see `Databases`)."""
    if request.node.get_closest_marker("own_database") is not None:
        database_url = databases.fresh()
    return Settings(
        database_url=database_url,
        redis_url=None,
        base_url="http://testserver",
        secret_key=TEST_SECRET_KEY,
    )


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
async def limiter() -> AsyncIterator[RateLimitStore]:
    if REDIS_URL:
        from redis.asyncio import Redis

        store: RateLimitStore = RedisRateLimitStore(
            Redis.from_url(REDIS_URL), prefix=f"herald:test:{secrets.token_hex(6)}:"
        )
    else:
        store = MemoryRateLimitStore()
    yield store
    await store.aclose()


@pytest.fixture
async def app(settings: Settings, clock: FrozenClock, limiter: RateLimitStore) -> AsyncIterator[FastAPI]:
    application = create_app(settings, clock=clock, limiter=limiter)
    yield application
    # What the lifespan's end closes (not run here): a test send's lane left open is a
    # ResourceWarning when the collector finds it, raised in whichever later test it happens to run.
    await application.state.herald.aclose()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


@pytest.fixture
async def tenant(app: FastAPI) -> Tenant:
    return await make_tenant(app)


@pytest.fixture
async def other_tenant(app: FastAPI) -> Tenant:
    return await make_tenant(app)
