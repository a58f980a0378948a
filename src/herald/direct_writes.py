"""Writes of Core statements run on the database driver itself (SQLite), compiled once.

A write of one row — an outbox row PENDING before a message is handed over, SENT after it; a
campaign's new version; a request's idempotency record — cost several times more CPU in
SQLAlchemy's execution (its context, events, the result; on the async engine a greenlet switch for
each step) than in SQLite: a pair of one-row transactions took 584-857 µs of CPU through the engine,
144-152 µs here (benchmarks/README.md, the ninth pass).

- `execute_in(connection, statement, values)` runs one write in an engine transaction already
  begun (a session's, an `engine.begin()`'s) on the transaction's driver connection: on SQLite,
  whose `BEGIN IMMEDIATE` holds the write lock; on PostgreSQL, asyncpg's (a prepared statement of
  its cache, as SQLAlchemy's own path would run it, without that path's CPU).
- `DirectWrites.transaction()` is a whole transaction of such writes without the engine: on SQLite
  on one connection of its own, set up as the engine's, after the process's write gate
  (`db.WriteGate`, which every SQLite writer of the file queues on), `BEGIN IMMEDIATE` ...
  `COMMIT`, rolled back on any error; on PostgreSQL (and an in-memory SQLite database, which a
  second connection would not see) it is the engine's transaction. Its reads go through
  `direct_reads.rows_in`, its executemany writes through `execute_many_in`. The delivery engine
  writes each window of messages so (its outbox rows, its users' states): through an ORM session
  those two transactions per window were about a third of its CPU per message.
- `WriteChain` collects writes that a transaction would hold into one statement for PostgreSQL
  (data-modifying CTEs), run on `DirectReads`' pool: one round trip instead of four or more.

A statement is compiled once per statement object and set of parameter names (its VALUES or SET
clause), and its values bound by its own bind processors: the SQL and values SQLAlchemy would send.
Statements whose execution SQLAlchemy completes itself (Python-side defaults, RETURNING, expanding
lists) take its path in `execute_in` and are refused by `DirectWrites`. A driver error is raised as
SQLAlchemy raises it (an `IntegrityError` stays one).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import sqlite_inline
from herald.direct_reads import _COMPILED_LIMIT, _Compiled, compiled_form, driver_error, rows_of_tag


class Gate(Protocol):
    async def acquire(self) -> None: ...
    def release(self) -> None: ...


async def execute_in(connection: Writer, statement: Any, values: dict[str, Any]) -> int:
    """Run a write statement (built once) with `values` in `connection`'s transaction (an engine's,
    or one of `DirectWrites`; or added to a `WriteChain`, 0): the number of rows it matched. See
    the module docstring."""
    if isinstance(connection, WriteChain):
        connection.add(statement, values)
        return 0
    if isinstance(connection, SqliteTransaction):
        return await connection.execute(statement, values)
    compiled = _compiled(statement, connection.dialect, values) if connection.in_transaction() else None
    if compiled is None:
        return int((await connection.execute(statement, values)).rowcount)
    fairy: Any = connection.sync_connection.connection  # type: ignore[union-attr]
    if connection.dialect.name == "postgresql":
        return await _run_postgresql(connection, fairy.dbapi_connection, compiled, values)
    return await _run(
        fairy.driver_connection, fairy.dbapi_connection.patience, connection.dialect, compiled, values
    )


async def _run_postgresql(
    connection: AsyncConnection, adapted: Any, compiled: _Compiled, values: dict[str, Any]
) -> int:
    """`compiled` run on the asyncpg connection under SQLAlchemy's adapter `adapted`, in its
    transaction (begun here as the adapter begins it, with its first statement); a driver error
    raised as SQLAlchemy raises it (an `IntegrityError` stays one; a lost connection invalidated:
    `direct_reads.driver_error`)."""
    arguments = compiled.arguments(values)
    try:
        if not adapted._started:
            await adapted._start_transaction()
        status: str = await adapted._connection.execute(compiled.sql, *arguments)
    except Exception as error:
        raise await driver_error(connection, adapted, compiled.sql, arguments, error) from error
    return rows_of_tag(status)


class DirectWrites:
    """Write transactions of one database (see the module docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        sqlite_path: str | None = None,
        gate: Gate | None = None,
        prepare: Callable[[sqlite3.Connection], None] | None = None,
        busy_patience: float = 30.0,
    ) -> None:
        """`sqlite_path`, `gate` and `prepare` (the engine's set-up of a new connection): a SQLite
        file's; without them, transactions are the engine's."""
        self._engine = engine
        self._path = sqlite_path
        self._gate = gate
        self._prepare = prepare
        self._patience = busy_patience
        self._sqlite: sqlite3.Connection | None = None

    @contextlib.asynccontextmanager
    async def transaction(self, *, engine: bool = False) -> AsyncIterator[Transaction]:
        """A write transaction, committed at the end of the block, rolled back on any error: run
        statements in it with `execute_in` (or `joined_writes.execute_with`). `engine`: the
        engine's transaction whatever the database, for writes that take SQLAlchemy's path."""
        if engine or self._path is None or self._gate is None:
            async with self._engine.begin() as connection:
                yield connection
            return
        await self._gate.acquire()
        try:
            sqlite = self._connection()
            try:
                await sqlite_inline.retry_busy(self._patience, lambda: sqlite.execute("BEGIN IMMEDIATE"))
            except sqlite3.Error as error:
                raise exc.DBAPIError.instance("BEGIN IMMEDIATE", [], error, sqlite3.Error) from error
            try:
                yield SqliteTransaction(sqlite, self._engine.dialect, self._patience)
            except BaseException:
                _roll_back(sqlite)
                raise
            try:
                await sqlite_inline.retry_busy(self._patience, lambda: sqlite.execute("COMMIT"))
            except sqlite3.Error as error:
                _roll_back(sqlite)
                raise exc.DBAPIError.instance("COMMIT", [], error, sqlite3.Error) from error
            except BaseException:  # cancelled while the commit waited: the next BEGIN must find none
                _roll_back(sqlite)
                raise
        finally:
            self._gate.release()

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None

    def _connection(self) -> sqlite3.Connection:
        if self._sqlite is None:
            assert self._path is not None
            connection = sqlite_inline.open_connection(self._path)
            connection.isolation_level = None  # transactions are begun and ended here
            if self._prepare is not None:
                self._prepare(connection)
            self._sqlite = connection
        return self._sqlite


def _roll_back(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:  # SQLite ends a transaction itself on some errors
        connection.execute("ROLLBACK")


class SqliteTransaction:
    """A transaction of `DirectWrites` on its SQLite connection: writes with `execute_in` and
    `execute_many_in`, reads with `direct_reads.rows_in`."""

    def __init__(self, connection: sqlite3.Connection, dialect: Dialect, patience: float) -> None:
        self._connection = connection
        self._dialect = dialect
        self._patience = patience

    @property
    def driver(self) -> sqlite3.Connection:
        return self._connection

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    async def execute(self, statement: Any, values: dict[str, Any]) -> int:
        return await _run(
            self._connection, self._patience, self._dialect, self._compiled(statement, values), values
        )

    def execute_many(self, statement: Any, rows: list[dict[str, Any]]) -> None:
        compiled = self._compiled(statement, rows[0])
        arguments = [compiled.arguments(values) for values in rows]
        cursor = self._connection.cursor()
        try:
            # The transaction holds the write lock: no statement of it waits on another writer.
            cursor.executemany(compiled.sql, arguments)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(
                compiled.sql, arguments, error, sqlite3.Error, dialect=self._dialect
            ) from error
        finally:
            cursor.close()

    def _compiled(self, statement: Any, values: dict[str, Any]) -> _Compiled:
        compiled = _compiled(statement, self._dialect, values)
        if compiled is None:
            raise TypeError(f"{statement} needs SQLAlchemy's execution; write it in a session")
        return compiled


class WriteChain:
    """Writes collected to run as one statement on PostgreSQL (`statement()`: each but the last a
    data-modifying CTE, `WITH w0 AS (...), w1 AS (...) <last>`), run where one write statement runs
    (`DirectReads.execute`): one round trip, and no BEGIN or COMMIT, for what would be a transaction
    of several. Its statements see one snapshot, so each must write rows none of the others does
    (a row written twice by one statement is undefined), and none reports a row count
    (`execute_in` answers 0). What the delivery engine records after a window goes so."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._parts: list[tuple[str, list[Any]]] = []

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    def __bool__(self) -> bool:
        """Whether anything was added (an empty chain is no statement)."""
        return bool(self._parts)

    def add(self, statement: Any, values: dict[str, Any]) -> None:
        compiled = _compiled(statement, self._dialect, values)
        arguments = compiled.arguments(values) if compiled is not None else []
        # Renumbered by text (`statement`): every `$` of the SQL must be a parameter's, `$1` to `$n`.
        numbers = {int(found) for found in _PLACEHOLDER.findall(compiled.sql)} if compiled else set()
        if (
            compiled is None
            or "$" in _PLACEHOLDER.sub("", compiled.sql)
            or numbers != set(range(1, len(arguments) + 1))
        ):
            raise TypeError(f"{statement} cannot be chained; write it in a transaction")
        self._parts.append((compiled.sql, arguments))

    def statement(self) -> tuple[str, list[Any]]:
        """The chain as one statement and its arguments (each part's parameters renumbered)."""
        parts: list[str] = []
        arguments: list[Any] = []
        for sql, values in self._parts:
            parts.append(_renumbered(sql, len(arguments)))
            arguments += values
        *first, last = parts
        if not first:
            return last, arguments
        named = ", ".join(f"w{index} AS ({sql})" for index, sql in enumerate(first))
        return f"WITH {named} {last}", arguments


_PLACEHOLDER = re.compile(r"\$(\d+)")


def _renumbered(sql: str, offset: int) -> str:
    """`sql` with each parameter `$n` as `$(n + offset)`."""
    return _PLACEHOLDER.sub(lambda found: f"${int(found[1]) + offset}", sql)


# A transaction: the engine's (a session's connection, an `engine.begin()`), or one of
# `DirectWrites` on SQLite's driver; a Writer is one of those, or a chain of writes.
Transaction = AsyncConnection | SqliteTransaction
Writer = Transaction | WriteChain


async def execute_many_in(connection: Transaction, statement: Any, rows: list[dict[str, Any]]) -> None:
    """Run a write statement (built once) once per parameter set of `rows` (all with the same
    names) in `connection`'s transaction."""
    if not rows:
        return
    if isinstance(connection, SqliteTransaction):
        connection.execute_many(statement, rows)
    elif len(rows) == 1:
        # Compiled once and run on the driver: SQLAlchemy compiles a statement it cannot cache (an
        # upsert merging JSON) at every execution, which cost more than running it.
        await execute_in(connection, statement, rows[0])
    else:
        await connection.execute(statement, rows)


async def _run(
    driver: sqlite3.Connection, patience: float, dialect: Dialect, compiled: _Compiled, values: dict[str, Any]
) -> int:
    arguments = compiled.arguments(values)
    cursor = driver.cursor()
    try:
        await sqlite_inline.retry_busy(patience, lambda: cursor.execute(compiled.sql, arguments))
        return int(cursor.rowcount)
    except sqlite3.Error as error:
        raise exc.DBAPIError.instance(
            compiled.sql, arguments, error, sqlite3.Error, dialect=dialect
        ) from error
    finally:
        cursor.close()


# Each write statement's compiled form per set of parameter names (its VALUES or SET clause), or
# None when it takes SQLAlchemy's path.
_writes: dict[tuple[int, str, frozenset[str]], tuple[Any, _Compiled | None]] = {}


def _compiled(statement: Any, dialect: Dialect, values: dict[str, Any]) -> _Compiled | None:
    key = (id(statement), dialect.name, frozenset(values))
    cached = _writes.get(key)
    if cached is None or cached[0] is not statement:
        if len(_writes) >= _COMPILED_LIMIT:
            _writes.clear()
        cached = _writes[key] = (statement, _compile(statement, dialect, values))
    return cached[1]


def _compile(statement: Any, dialect: Dialect, values: dict[str, Any]) -> _Compiled | None:
    compiled = statement.compile(dialect=dialect, column_keys=sorted(values))
    if compiled.insert_prefetch or compiled.update_prefetch or compiled.effective_returning:
        return None  # SQLAlchemy computes defaults or reads rows back in its execution context
    return compiled_form(compiled)
