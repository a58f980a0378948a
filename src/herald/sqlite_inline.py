"""SQLite for the async engine, with each statement run on the event loop's thread in one call.

SQLAlchemy's aiosqlite dialect sends every call (cursor, execute, fetch, close, commit) through
aiosqlite's own thread. Running those calls on the loop's thread instead (decision record 0002)
removed the thread hops, but SQLAlchemy's adapter still awaited each of them: four greenlet round
trips per statement, which cost more CPU than a short indexed statement itself (measured: 59 µs
per `SELECT 1` through the async engine against 17 µs through a synchronous one). This dialect is
the aiosqlite dialect with that adapter replaced: its cursor calls `sqlite3` directly, so a
statement costs SQLAlchemy's own work and one greenlet round trip.

Waiting for SQLite's write lock is the one thing that must not block the loop (another process, a
CLI import say, may hold it for seconds): connections are opened with `busy_timeout=0`, and a
statement refused with SQLITE_BUSY (which never ran) is retried after an `asyncio.sleep`, up to the
configured timeout, so other requests go on meanwhile.

The engine is created with `sqlite+aiosqlite://` URLs (what users configure); `herald.db` names this
dialect (`DRIVER`) for them.

The dialect is also where lower-casing means the same as on PostgreSQL: SQLite's own `lower()` folds
ASCII letters only ('Ü' stays 'Ü'), so `register_functions` gives every connection `herald_lower`
(`herald.lowercase`, as PostgreSQL's) and the dialect's compiler writes it wherever SQLAlchemy would write
`lower()`: `func.lower(x)` and the operands of case-insensitive comparisons (`ilike`, `icontains`,
..., which SQLAlchemy writes as `lower(x) LIKE lower(y)` on SQLite). Statements say `func.lower` and
`ilike` on every engine; PostgreSQL's `lower()` and `ILIKE` already follow Unicode.
(No index may be made on `lower(...)` through this dialect: a connection without the function, a
`sqlite3` shell say, could not maintain it.)
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
    SQLiteDialect_aiosqlite,
)
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler
from sqlalchemy.util.concurrency import await_only

from herald import plain_sql
from herald.lowercase import lower

DRIVER = "sqlite+heraldinline"

_FIRST_WAIT = 0.001
_LONGEST_WAIT = 0.05


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in str(error)


async def retry_busy(patience: float, call: Callable[[], Any]) -> Any:
    """`call()`, retried while SQLite answers BUSY (the statement did not run), up to `patience`
    seconds, sleeping on the event loop in between."""
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


class InlineCursor(AsyncAdapt_aiosqlite_cursor):
    """The adapter's cursor: a statement (execute and fetch of all its rows, as before) is one
    coroutine awaited once. (SQLAlchemy requires a statement to await something: it is how the
    async engine recognises an async driver.)"""

    __slots__ = ()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        arguments = (operation,) if parameters is None else (operation, parameters)
        await_only(self._run(lambda cursor: cursor.execute(*arguments), fetch=True))

    def executemany(self, operation: Any, seq_of_parameters: Sequence[Any]) -> Any:
        rows = list(seq_of_parameters)
        await_only(self._run(lambda cursor: cursor.executemany(operation, rows), fetch=False))

    async def _run(self, call: Callable[[sqlite3.Cursor], Any], *, fetch: bool) -> None:
        connection: InlineConnection = self._adapt_connection  # type: ignore[assignment]
        cursor = connection.sqlite.cursor()
        try:
            await retry_busy(connection.patience, lambda: call(cursor))
            if fetch and cursor.description:
                self.description = cursor.description
                self.lastrowid = self.rowcount = -1
                self._rows = deque(cursor.fetchall())
            else:
                self.description = None
                self.lastrowid = cursor.lastrowid  # type: ignore[assignment]
                self.rowcount = cursor.rowcount
        finally:
            cursor.close()


class InlineConnection(AsyncAdapt_aiosqlite_connection):
    """The adapter's connection over a `sqlite3` connection used on the loop's thread."""

    __slots__ = ("patience", "sqlite")

    def __init__(self, dbapi: Any, connection: sqlite3.Connection, patience: float) -> None:
        super().__init__(dbapi, connection)  # type: ignore[arg-type]
        self.sqlite = connection
        self.patience = patience

    @property
    def isolation_level(self) -> str | None:
        return self.sqlite.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self.sqlite.isolation_level = value  # type: ignore[assignment]

    def create_function(self, *args: Any, **kw: Any) -> None:
        self.sqlite.create_function(*args, **kw)

    def cursor(self, server_side: bool = False) -> InlineCursor:
        return InlineCursor(self)

    def execute(self, *args: Any, **kw: Any) -> Any:
        return self.sqlite.execute(*args, **kw)

    def rollback(self) -> None:
        self.sqlite.rollback()

    def commit(self) -> None:
        await_only(retry_busy(self.patience, self.sqlite.commit))

    def close(self) -> None:
        self.sqlite.close()

    def terminate(self) -> None:
        self.sqlite.close()


class InlineDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def __init__(self) -> None:
        # The exception classes and constants are sqlite3's (aiosqlite re-exports the same ones).
        super().__init__(sqlite3, sqlite3)

    def connect(self, *arg: Any, **kw: Any) -> InlineConnection:
        kw.pop("async_fallback", None)
        creator: Callable[[], Awaitable[tuple[sqlite3.Connection, float]]] = kw.pop("async_creator_fn")
        connection, patience = await_only(creator())
        return InlineConnection(self, connection, patience)


class InlineCompiler(SQLiteCompiler):
    """SQLite's compiler with Unicode lower-casing (`herald_lower`, see the module's docstring)."""

    def visit_lower_func(self, fn: Any, **kw: Any) -> str:
        return f"herald_lower{self.function_argspec(fn, **kw)}"

    def visit_ilike_case_insensitive_operand(self, element: Any, **kw: Any) -> str:
        return f"herald_lower({element.element._compiler_dispatch(self, **kw)})"


class InlineSQLiteDialect(SQLiteDialect_aiosqlite):
    driver = "heraldinline"
    supports_statement_cache = True
    statement_compiler = InlineCompiler
    has_terminate = True

    @classmethod
    def import_dbapi(cls) -> InlineDBAPI:
        return InlineDBAPI()

    def get_driver_connection(self, connection: Any) -> Any:
        return connection.sqlite  # a `sqlite3.Connection`


registry.register("sqlite.heraldinline", __name__, "InlineSQLiteDialect")


def connector(path: str, patience: float) -> Callable[[], Any]:
    """The `async_creator` of an engine on the SQLite file `path`: SQLite will wait for nothing
    itself (`busy_timeout=0`); the adapter retries for `patience` seconds without blocking the loop."""

    async def connect() -> tuple[sqlite3.Connection, float]:
        return open_connection(path), patience

    return connect


def open_connection(path: str) -> sqlite3.Connection:
    """A connection to the SQLite file `path` for use on the loop's thread, waiting for no lock
    itself (`busy_timeout=0`: callers retry with `retry_busy`)."""
    connection = plain_sql.open_sqlite(path, busy_seconds=0, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout=0")
    return connection


def _lower(value: object) -> object:
    return lower(value) if isinstance(value, str) else value


def register_functions(dbapi_connection: Any) -> None:
    """SQL functions SQLite lacks. `herald_lower`: Unicode lower-casing (SQLite's `lower()` folds
    ASCII letters only), so case-insensitive filters mean the same on SQLite as on PostgreSQL
    (`InlineCompiler` writes it for `lower()`).
    `herald_rank(purpose, key, customer_id)`: the delivery engine's per-user hash
    (`delivery.engine.rank.rank_of`), so an audience is ranked inside its INSERT ... SELECT."""
    from herald.delivery.engine.rank import rank_of  # a leaf module: stdlib only

    dbapi_connection.create_function("herald_lower", 1, _lower, deterministic=True)
    dbapi_connection.create_function(
        "herald_rank",
        3,
        lambda purpose, key, customer_id: rank_of(key, customer_id, purpose),
        deterministic=True,
    )
