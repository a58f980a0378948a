"""Test fixtures: a migrated real database per run, an app per test, a frozen clock, an HTTP client.

SQLite by default; PostgreSQL and Redis when HERALD_TEST_DATABASE_URL / HERALD_TEST_REDIS_URL are set.
Each run migrates its own fresh database once; each test works in workspaces of its own (random ids),
so tests never see each other's rows and tenancy is exercised everywhere.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
from collections.abc import AsyncIterator, Iterator
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


def _create_pg_database(base_url: str) -> tuple[str, str]:
    import asyncpg

    url = make_url(base_url)
    name = f"herald_t_{secrets.token_hex(4)}"

    async def create() -> None:
        connection = await asyncpg.connect(
            user=url.username, password=url.password, host=url.host, port=url.port, database=url.database
        )
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()

    asyncio.run(create())
    return url.set(database=name).render_as_string(hide_password=False), name


def _drop_pg_database(base_url: str, name: str) -> None:
    import asyncpg

    url = make_url(base_url)

    async def drop() -> None:
        connection = await asyncpg.connect(
            user=url.username, password=url.password, host=url.host, port=url.port, database=url.database
        )
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()

    asyncio.run(drop())


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if PG_URL:
        url, name = _create_pg_database(PG_URL)
        upgrade(url)
        yield url
        _drop_pg_database(PG_URL, name)
    else:
        path = Path(tmp_path_factory.mktemp("db")) / "herald.db"
        url = f"sqlite+aiosqlite:///{path}"
        upgrade(url)
        yield url


# Connector secrets are sealed with a real key in tests too (there is no default key).
TEST_SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture
def settings(database_url: str) -> Settings:
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
    await application.state.herald.database.dispose()


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
