"""One read statement run on the database driver itself, for a command that reads and exits.

Importing SQLAlchemy (its engine, SQL compiler and ORM) and mapping the models cost a short command
of the command line about five times what the statement and the rest of the process cost
(benchmarks/README.md, "Command-line start-up"). A listing that is one plain statement therefore runs
here, on `sqlite3` or on asyncpg (the drivers the configured URLs name), and imports neither
SQLAlchemy nor the models. The statement names its columns; the tables stay defined by the models
and the migrations alone.

Statements are written with PostgreSQL's numbered placeholders (`$1`, `$2`); SQLite reads the same
numbers as `?1`, `?2`. JSON columns come back as their JSON text on both engines (`json_value`).
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

# How long a statement waits for a SQLite lock another process holds (the engines' patience).
_SQLITE_BUSY_SECONDS = 30.0
_PLACEHOLDER = re.compile(r"\$(\d+)")


def fetch_all(database_url: str, sql: str, *arguments: Any) -> list[tuple[Any, ...]]:
    """The rows of one read statement on the database `database_url` (a `HERALD_DATABASE_URL`)."""
    if database_url.startswith("sqlite"):
        return _sqlite_rows(sqlite_path(database_url), _PLACEHOLDER.sub(r"?\1", sql), arguments)
    return _postgresql_rows(postgresql_dsn(database_url), sql, arguments)


def json_value(stored: str | None) -> Any:
    """A JSON column's value as the models read it (JSON `null` and SQL NULL both None)."""
    return None if stored is None else json.loads(stored)


def sqlite_path(database_url: str) -> str:
    """The database file of a SQLite URL, as SQLAlchemy reads it (`make_url(url).database`):
    what follows `scheme://` and one `/`, as written (not unquoted), without a query string; ''
    for an in-memory database."""
    _, _, rest = database_url.partition("://")
    return rest.partition("?")[0].removeprefix("/") if rest.startswith("/") else ""


def sqlite_file_key(path: str) -> str | None:
    """What names the SQLite database `path` (a `sqlite_path`) within this process, however it was
    written (relative, through a link); None for an in-memory database, which is its own each time."""
    if path in ("", ":memory:"):
        return None
    return path if path.startswith("file:") else os.path.realpath(path)


def postgresql_dsn(database_url: str) -> str:
    """asyncpg's DSN for a `postgresql+asyncpg://` URL: the same URL without the driver's name, its
    TLS option spelled `sslmode` (asyncpg reads an `ssl` in a DSN as a server setting)."""
    scheme, separator, rest = _ssl_spelled(database_url, "sslmode").partition("://")
    return f"{scheme.partition('+')[0]}{separator}{rest}"


def postgresql_engine_url(database_url: str) -> str:
    """The URL the engine connects with: its TLS option spelled `ssl` (SQLAlchemy passes each option
    to asyncpg as a keyword, and `sslmode` is none)."""
    return _ssl_spelled(database_url, "ssl")


def _ssl_spelled(database_url: str, spelling: str) -> str:
    """`database_url` with its `ssl` or `sslmode` option (the same values: disable ... verify-full)
    named `spelling`; the rest as written."""
    base, separator, query = database_url.partition("?")
    if not separator:
        return database_url
    options = query.split("&")
    renamed = [
        f"{spelling}={option.partition('=')[2]}" if option.partition("=")[0] in ("ssl", "sslmode") else option
        for option in options
    ]
    return f"{base}?{'&'.join(renamed)}"


def open_sqlite(path: str, *, busy_seconds: float, check_same_thread: bool = True) -> sqlite3.Connection:
    """A `sqlite3` connection to the file `path` (a `file:` URI when it is one), waiting at most
    `busy_seconds` for a lock held by another connection."""
    import sqlite3  # here: a command on PostgreSQL needs none of it

    return sqlite3.connect(
        path, timeout=busy_seconds, check_same_thread=check_same_thread, uri=path.startswith("file:")
    )


def _sqlite_rows(path: str, sql: str, arguments: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    connection = open_sqlite(path, busy_seconds=_SQLITE_BUSY_SECONDS)
    try:
        return list(connection.execute(sql, arguments).fetchall())
    finally:
        connection.close()


def _postgresql_rows(dsn: str, sql: str, arguments: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import asyncio

    import asyncpg

    async def fetch() -> list[tuple[Any, ...]]:
        connection = await asyncpg.connect(dsn)
        try:
            return [tuple(row) for row in await connection.fetch(sql, *arguments)]
        finally:
            await connection.close()

    return asyncio.run(fetch())
