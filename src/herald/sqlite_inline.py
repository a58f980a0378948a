"""SQLite for the async engine without a thread hop per call.

SQLAlchemy's aiosqlite dialect sends every call (cursor, execute, fetch, close, commit) through
aiosqlite's own thread: four round trips through the event loop per statement, which cost an O1 page
more CPU than its queries. SQLite runs in this process, and the statements Herald sends are short
and indexed, so this driver runs each call directly on the event loop's thread, as a synchronous
server would, behind the same dialect (`async_creator` hands SQLAlchemy an object with
aiosqlite's interface whose coroutines finish at once).

Waiting for SQLite's write lock is the one thing that must not block the loop (another process, a
CLI import say, may hold it for seconds): connections are opened with `busy_timeout=0`, and a
statement refused with SQLITE_BUSY (which never ran) is retried after an `asyncio.sleep`, up to the
configured timeout, so other requests go on meanwhile.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

_FIRST_WAIT = 0.001
_LONGEST_WAIT = 0.05


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in str(error)


async def _retry_busy(patience: float, call: Callable[[], Any]) -> Any:
    """`call()`, retried while SQLite answers BUSY (the statement did not run), up to `patience` seconds."""
    try:
        return call()
    except sqlite3.OperationalError as error:
        if not _is_busy(error):
            raise
    deadline = time.monotonic() + patience
    wait = _FIRST_WAIT
    while True:
        await asyncio.sleep(wait)
        try:
            return call()
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or time.monotonic() >= deadline:
                raise
        wait = min(wait * 2, _LONGEST_WAIT)


class InlineCursor:
    """aiosqlite.Cursor's interface over a sqlite3 cursor."""

    def __init__(self, cursor: sqlite3.Cursor, timeout: float) -> None:
        self._cursor = cursor
        self._timeout = timeout

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        await _retry_busy(self._timeout, lambda: self._cursor.execute(sql, parameters))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        rows = list(parameters)
        await _retry_busy(self._timeout, lambda: self._cursor.executemany(sql, rows))
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(size) if size is not None else self._cursor.fetchmany()

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


class _RunAtOnce:
    """Stands in for aiosqlite's queue of calls: SQLAlchemy sets the isolation level through it."""

    def put_nowait(self, item: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = item
        try:
            future.set_result(function())
        except Exception as error:  # handed to the awaiting caller, as aiosqlite does
            future.set_exception(error)


class InlineConnection:
    """aiosqlite.Connection's interface over a sqlite3 connection used on the loop's thread."""

    def __init__(self, connection: sqlite3.Connection, timeout: float) -> None:
        self._conn = connection
        self._tx = _RunAtOnce()
        self._timeout = timeout

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    async def cursor(self) -> InlineCursor:
        return InlineCursor(self._conn.cursor(), self._timeout)

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        return await (await self.cursor()).execute(sql, parameters)

    async def commit(self) -> None:
        await _retry_busy(self._timeout, self._conn.commit)

    async def rollback(self) -> None:
        self._conn.rollback()

    async def close(self) -> None:
        self._conn.close()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)


def connector(path: str, timeout: float) -> Callable[[], Any]:
    """The `async_creator` of an engine on the SQLite file `path`."""

    async def connect() -> InlineConnection:
        connection = sqlite3.connect(path, timeout=0, check_same_thread=False, uri=path.startswith("file:"))
        connection.execute("PRAGMA busy_timeout=0")
        return InlineConnection(connection, timeout)

    return connect
