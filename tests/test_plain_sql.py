"""The driver-level reads of the command line find the database SQLAlchemy's engines connect to."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from herald.plain_sql import postgresql_dsn, postgresql_engine_url, sqlite_path


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///./herald.db",
        "sqlite+aiosqlite:///herald.db",
        "sqlite+aiosqlite:////tmp/x/herald.db",
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite://",
        "sqlite:///relative/dir/h.db?timeout=5",
        "sqlite+aiosqlite:///file:shared.db?mode=ro&uri=true",
        "sqlite+aiosqlite:////tmp/with%20space.db",
    ],
)
def test_sqlite_path_is_the_engines_database(url: str) -> None:
    assert sqlite_path(url) == (make_url(url).database or "")


def test_postgresql_dsn_drops_the_driver_name_and_spells_tls_as_asyncpg_reads_a_dsn() -> None:
    url = "postgresql+asyncpg://user:p%40ss@db.example:6543/herald?ssl=require&host=/run/pg"
    assert (
        postgresql_dsn(url) == "postgresql://user:p%40ss@db.example:6543/herald?sslmode=require&host=/run/pg"
    )


def test_the_engine_url_spells_tls_as_a_keyword_of_the_driver() -> None:
    url = "postgresql+asyncpg://user@db.example/herald?sslmode=verify-full"
    assert postgresql_engine_url(url) == "postgresql+asyncpg://user@db.example/herald?ssl=verify-full"
    assert postgresql_engine_url("postgresql+asyncpg://user@db/h") == "postgresql+asyncpg://user@db/h"
