"""Single-statement reads run on the database driver itself, each statement compiled once.

A read whose answer is one statement (O1: a page and its total count, see `Operation.single_statement`)
needs nothing of SQLAlchemy at request time but the SQL and its parameters: no transaction, no result
processing (such statements select their columns in wire form). Yet a pass through SQLAlchemy's
connection and execution machinery — checking a connection out of the pool, the execution context,
events, the result object — cost more CPU than SQLite spends running the statement (measured on O1:
about 90 µs a request, a third of it the connection's checkout and return).

Here a Core statement is compiled once per statement object (the callers build their statements once
per query shape and keep them), and a request only binds its values (through the statement's own bind
processors: the same conversions SQLAlchemy applies) and runs the SQL:

- on SQLite, on one connection of this process used on the event loop's thread, in autocommit mode
  (each statement its own snapshot). A statement runs and fetches at once, so concurrent requests
  never interleave inside one; a statement refused with SQLITE_BUSY waits on the loop as every other
  statement does (`herald.sqlite_inline`);
- on PostgreSQL, on a connection of an asyncpg pool of its own (a few connections per process, each
  statement outside any transaction). Not the engine's pool: a checkout and return through it (its
  events, the isolation level set and reset, the fairy) cost more CPU than the driver's fetch. The
  pool returns a connection without asyncpg's default reset (a round trip of `RESET ALL`, `UNLISTEN`
  ...): a single statement leaves no session state behind.

`DirectReads.write` runs one write statement the same way on PostgreSQL's pool, a transaction of its
own: where a statement can say everything a short transaction would (the delivery engine's window of
outbox rows written under its campaign's condition), it saves the BEGIN and COMMIT round trips.

Statements with expanding `IN` lists are rendered per call by SQLAlchemy and keep its path; a
statement selecting a column that needs result processing (a date-time read back as a Python object,
say) is refused by `rows` when compiled: its rows come back exactly as the driver returns them.
`named_rows` (and `rows_in` given a `DirectReads`) runs any such statement the same way and makes its
rows as SQLAlchemy would: named, each column's result processor applied.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from sqlalchemy import JSON, ColumnElement, bindparam, exc, make_url
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select
from sqlalchemy.sql.selectable import TextualSelect
from sqlalchemy.types import TypeEngine

from herald import sqlite_inline

if TYPE_CHECKING:
    import asyncpg

# Statements compiled at most this many at a time: callers keep a statement per query shape, and
# shapes are few; the bound only keeps a caller that builds statements per request from growing it.
_COMPILED_LIMIT = 512
V = TypeVar("V")
# PostgreSQL plans a prepared statement afresh on every execution while its plan for the given
# values looks cheaper than the generic one: O1's page (a LIMIT of a parameter) always did, which
# cost more of the server's CPU than running it (EXPLAIN: planning 0.37 ms, execution 0.54 ms, on a
# loaded machine). Its generic plan is the same plan (the primary key's index, backwards, for the
# workspace; the count a scan of the workspace's rows): these statements are planned once per
# connection.
_PLANNED_ONCE = {"plan_cache_mode": "force_generic_plan"}
# Arguments of SQLAlchemy's asyncpg adapter that asyncpg itself does not take.
_ADAPTER_ONLY = ("prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback")


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    defaults: dict[str, Any]
    processors: dict[str, Callable[[Any], Any]]

    def arguments(self, values: dict[str, Any]) -> list[Any]:
        # Each processed value once: a name may stand at several places (SQLite's `?` repeats it;
        # O1's `now` twice), and a processor (a date-time formatted) costs more than the lookup.
        converted = {}
        for name, processor in self.processors.items():
            value = values[name] if name in values else self.defaults[name]
            converted[name] = processor(value) if value is not None else None
        return [
            converted[name] if name in converted else values[name] if name in values else self.defaults[name]
            for name in self.names
        ]


class DirectReads:
    """Run single statements on the driver (see the module docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        busy_patience: float = 30.0,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        statement_timeout: float | None = None,
    ) -> None:
        self._engine = engine
        self._dialect: Dialect = engine.dialect
        self._postgres = engine.dialect.name == "postgresql"
        # Each statement's compiled form, or None when it takes SQLAlchemy's path.
        self._compiled: _PerStatement[_Compiled | None] = _PerStatement()
        self._written: _PerStatement[_Compiled] = _PerStatement()
        self._named: _PerStatement[_InTransaction | None] = _PerStatement()
        self._sqlite: sqlite3.Connection | None = None
        self._patience = busy_patience
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout  # PostgreSQL: opening one of the pool's connections
        self._statement_timeout = statement_timeout  # PostgreSQL: waiting for a statement's answer
        self._postgres_pool: asyncpg.Pool | None = None
        self._postgres_pool_opening: asyncio.Lock | None = None
        self._watch: PoolWatch | None = None

    def watch(self, watch: PoolWatch | None) -> None:
        """Tell `watch` the PostgreSQL pool's size and each connection taken and given back (the
        `/metrics` pool gauges); None: tell nothing more. SQLite's one connection is no pool:
        nothing is told."""
        self._watch = watch

    async def rows(self, statement: Select[Any], values: dict[str, Any]) -> Sequence[Sequence[Any]]:
        compiled = self._compile(statement)
        if compiled is None:  # expanding parameters: SQLAlchemy renders them per call
            async with self._engine.connect() as connection:
                return (await connection.execute(statement, values)).all()
        return await self._fetch(compiled.sql, compiled.arguments(values))

    async def named_rows(
        self, statement: Select[Any] | TextualSelect, values: dict[str, Any]
    ) -> Sequence[Any]:
        """The rows `rows_in` makes (named tuples, each column's result processor applied), the
        statement run here: on the driver, outside any session and transaction. For a read that
        needs no snapshot shared with other statements (a test send's connector, users, tokens)."""
        prepared = self._named.get(statement, self._dialect, self._prepared_here)
        if prepared is None:  # expanding parameters: SQLAlchemy renders them per call
            async with self._engine.connect() as connection:
                return (await connection.execute(statement, values)).all()
        records = await self._fetch(prepared.compiled.sql, prepared.compiled.arguments(values))
        return [prepared.make(record) for record in records]

    def _prepared_here(
        self, statement: Select[Any] | TextualSelect, dialect: Dialect
    ) -> _InTransaction | None:
        prepared = _prepared_in_transaction(statement, dialect)
        if prepared is None or not self._postgres:
            return prepared
        # SQLAlchemy decodes JSON on PostgreSQL with codecs it sets on each connection of its pool
        # (the type's own result processor is none); this pool has none of them (`rows` reads JSON
        # as text), so JSON columns are decoded here, as those codecs would.
        loads = getattr(dialect, "_json_deserializer", None) or json.loads
        processors = dict(prepared.results)
        for index, column in enumerate(statement.selected_columns):
            if index not in processors and _is_json(column.type, dialect):
                processors[index] = loads
        return replace(prepared, results=tuple(sorted(processors.items())))

    async def _fetch(self, sql: str, arguments: list[Any]) -> Sequence[Sequence[Any]]:
        if self._postgres:
            pool = self._postgres_pool or await self._open_postgres_pool()
            watch = self._watch
            try:
                async with pool.acquire() as connection:
                    if watch is not None:
                        watch.taken(1)
                    try:
                        found: Sequence[Sequence[Any]] = await connection.fetch(sql, *arguments)
                    finally:
                        if watch is not None:
                            watch.taken(-1)
                    return found
            except Exception as error:  # raised as SQLAlchemy raises it (a statement may write)
                translated = _translated(sql, arguments, error)
                if translated is None:
                    raise
                raise translated from error
        sqlite = self._sqlite_connection()
        cursor = sqlite.cursor()
        try:
            await sqlite_inline.retry_busy(self._patience, lambda: cursor.execute(sql, arguments))
            return cursor.fetchall()
        finally:
            cursor.close()

    async def write(self, statement: Any, values: dict[str, Any]) -> int:
        """One write statement, a transaction of its own, on PostgreSQL's pool (no BEGIN or
        COMMIT round trip around it): the number of rows it wrote. The statement must compile
        for the driver (no expanding lists, no Python-side defaults or RETURNING)."""
        compiled = self._compile_write(statement)
        return await self.execute(compiled.sql, compiled.arguments(values))

    async def execute(self, sql: str, arguments: Sequence[Any]) -> int:
        """`write` of a statement already compiled for the driver (`direct_writes.WriteChain`)."""
        if not self._postgres:
            raise TypeError("single-statement writes go to PostgreSQL's pool only")
        pool = self._postgres_pool or await self._open_postgres_pool()
        watch = self._watch
        try:
            async with pool.acquire() as connection:
                if watch is not None:
                    watch.taken(1)
                try:
                    status: str = await connection.execute(sql, *arguments)
                finally:
                    if watch is not None:
                        watch.taken(-1)
        except Exception as error:
            translated = _translated(sql, arguments, error)
            if translated is None:
                raise
            raise translated from error
        return rows_of_tag(status)

    async def scalar(self, statement: Select[Any], values: dict[str, Any]) -> Any:
        rows = await self.rows(statement, values)
        return rows[0][0] if rows else None

    async def aclose(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None
        if self._postgres_pool is not None:
            pool, self._postgres_pool = self._postgres_pool, None
            if self._watch is not None:
                self._watch.sized(-self._pool_size)
            await pool.close()

    async def _open_postgres_pool(self) -> asyncpg.Pool:
        import asyncpg  # PostgreSQL only

        if self._postgres_pool_opening is None:
            self._postgres_pool_opening = asyncio.Lock()
        async with self._postgres_pool_opening:
            if self._postgres_pool is None:
                # The engine's own connection arguments (host, database, credentials, ssl...).
                _, arguments = self._dialect.create_connect_args(self._engine.url)
                for name in _ADAPTER_ONLY:
                    arguments.pop(name, None)
                arguments.pop("timeout", None)  # ours, below (from the URL it would be text)
                settings = {**arguments.pop("server_settings", {}), **_PLANNED_ONCE}
                self._postgres_pool = await asyncpg.create_pool(
                    min_size=1,
                    max_size=self._pool_size,
                    reset=_leave_as_is,
                    server_settings=settings,
                    timeout=self._connect_timeout,
                    command_timeout=self._statement_timeout,
                    **arguments,
                )
                if self._watch is not None:
                    self._watch.sized(self._pool_size)
            return self._postgres_pool

    def _sqlite_connection(self) -> sqlite3.Connection:
        if self._sqlite is None:
            connection = sqlite_inline.open_connection(make_url(str(self._engine.url)).database or "")
            connection.isolation_level = None  # autocommit: each statement its own snapshot
            connection.execute("PRAGMA foreign_keys=ON")
            sqlite_inline.register_functions(connection)
            self._sqlite = connection
        return self._sqlite

    def _compile_write(self, statement: Any) -> _Compiled:
        def make(statement: Any, dialect: Dialect) -> _Compiled:
            compiled = statement.compile(dialect=dialect)
            found = compiled_form(compiled)
            if found is None or compiled.insert_prefetch or compiled.effective_returning:
                raise TypeError(f"{statement} needs SQLAlchemy's execution")
            return found

        return self._written.get(statement, self._dialect, make)

    def _compile(self, statement: Select[Any]) -> _Compiled | None:
        return self._compiled.get(statement, self._dialect, self._wire_form)

    def _wire_form(self, statement: Select[Any], dialect: Dialect) -> _Compiled | None:
        for column in statement.selected_columns:
            if column.type._cached_result_processor(dialect, None) is not None:
                raise ValueError(f"{column} needs result processing; select it in its wire form")
        return _compiled(statement, dialect)


def _translated(sql: str, arguments: Sequence[Any], error: Exception) -> exc.DBAPIError | None:
    """An error of asyncpg's pool as SQLAlchemy raises it (an `IntegrityError` stays one; the
    server's other errors and a lost link are `DBAPIError`s); None for any other."""
    import asyncpg

    if isinstance(error, asyncpg.IntegrityConstraintViolationError):
        return exc.IntegrityError(sql, arguments, error)
    if isinstance(error, asyncpg.PostgresError | asyncpg.InterfaceError | OSError):
        return exc.DBAPIError(sql, arguments, error)
    return None


def _is_json(type_: TypeEngine[Any], dialect: Dialect) -> bool:
    """Whether `type_` is JSON on `dialect` (a decorator by the type it loads there)."""
    loaded = type_.dialect_impl(dialect)
    return isinstance(getattr(loaded, "impl_instance", loaded), JSON)


def rows_of_tag(status: str) -> int:
    """The rows a PostgreSQL command wrote, from its tag ("INSERT 0 8", "UPDATE 8", "DELETE 0")."""
    return int(status.rsplit(" ", 1)[-1]) if status and status[-1].isdigit() else 0


class _PerStatement(Generic[V]):
    """What is made once per statement object and dialect. Keyed by identity (callers build their
    statements once and keep them), each entry keeping its statement so that its id is not reused;
    at most `_COMPILED_LIMIT` at a time (a caller building statements per request cannot grow it)."""

    def __init__(self) -> None:
        self._made: dict[tuple[int, str], tuple[Any, V]] = {}

    def get(self, statement: Any, dialect: Dialect, make: Callable[[Any, Dialect], V]) -> V:
        key = (id(statement), dialect.name)
        cached = self._made.get(key)
        if cached is not None and cached[0] is statement:
            return cached[1]
        if len(self._made) >= _COMPILED_LIMIT:
            self._made.clear()
        made = make(statement, dialect)
        self._made[key] = (statement, made)
        return made


def _compiled(statement: Select[Any] | TextualSelect, dialect: Dialect) -> _Compiled | None:
    """`statement` compiled for `dialect`, or None when SQLAlchemy must render it per call
    (expanding `IN` lists, values rendered into the SQL)."""
    return compiled_form(statement.compile(dialect=dialect))


def compiled_form(compiled: Any) -> _Compiled | None:
    """What a statement compiled by SQLAlchemy (`SQLCompiler`) runs with on the driver: its SQL,
    parameter order, defaults and bind processors; None when SQLAlchemy renders it per call."""
    if any(bind.expanding or bind.literal_execute for bind in compiled.binds.values()):
        return None
    return _Compiled(
        sql=compiled.string,
        names=tuple(compiled.positiontup or ()),
        defaults={name: bind.effective_value for name, bind in compiled.binds.items()},
        # One processor per name (tuple-valued binds, the other kind, are expanding ones).
        processors={
            name: processor for name, processor in compiled._bind_processors.items() if callable(processor)
        },
    )


@dataclass(frozen=True)
class _InTransaction:
    """A statement run by `rows_in`: compiled, and how its rows are made."""

    compiled: _Compiled
    row: Any  # a named tuple class of the selected columns
    # The result processor of each column that has one, by position: most columns have none, and a
    # generator over every column cost about as much as the rest of the row (a claim's 1,000 users).
    results: tuple[tuple[int, Callable[[Any], Any]], ...]

    def make(self, values: Sequence[Any]) -> Any:
        if not self.results:
            return self.row._make(values)
        row = list(values)
        for index, process in self.results:
            row[index] = process(row[index])
        return self.row._make(row)


# Each statement's way to run in a transaction, or None when it takes SQLAlchemy's path.
_in_transaction: _PerStatement[_InTransaction | None] = _PerStatement()


def _prepared_in_transaction(
    statement: Select[Any] | TextualSelect, dialect: Dialect
) -> _InTransaction | None:
    compiled = _compiled(statement, dialect)
    if compiled is None:
        return None
    columns = list(statement.selected_columns)
    names = [column.key or f"column_{n}" for n, column in enumerate(columns)]
    processors = [column.type._cached_result_processor(dialect, None) for column in columns]
    return _InTransaction(
        compiled,
        namedtuple("Row", names, rename=True),
        tuple((index, process) for index, process in enumerate(processors) if process is not None),
    )


class PoolWatch(Protocol):
    """Told of a pool's connections (`DirectReads.watch`): its size as it opens (+) and closes (-),
    and each connection as it is taken (+1) and given back (-1)."""

    def sized(self, change: int) -> None: ...

    def taken(self, change: int) -> None: ...


class DriverTransaction(Protocol):
    """A transaction begun on a SQLite driver connection itself (`direct_writes.SqliteTransaction`)."""

    @property
    def driver(self) -> sqlite3.Connection: ...

    @property
    def dialect(self) -> Dialect: ...


# Where `rows_in` runs a statement: a transaction's connection (the request's, where a statement
# must see and lock what its transaction does), a transaction on the driver (`herald.direct_writes`),
# or no transaction at all (`DirectReads`: each statement its own snapshot).
RowSource = AsyncConnection | DriverTransaction | DirectReads


async def rows_in(
    connection: RowSource,
    statement: Select[Any] | TextualSelect,
    values: dict[str, Any],
) -> Sequence[Any]:
    """The rows of `statement` (built once) with `values`, run on the driver connection of
    `connection` (see `RowSource`), as named tuples whose values are those SQLAlchemy's rows would
    hold.

    SQLAlchemy's execution of a large statement costs more than the database's: the hash of its
    cache key alone (a deep tuple, hashed anew on every lookup) was about a tenth of a C7 request on
    SQLite (benchmarks/README.md). Here it is compiled once per statement and dialect, and each call
    binds its values (the statement's own bind processors) and makes its rows (each column's result
    processor). Statements SQLAlchemy must render per call take its path."""
    if isinstance(connection, DirectReads):
        return await connection.named_rows(statement, values)
    prepared = _in_transaction.get(statement, connection.dialect, _prepared_in_transaction)
    if not isinstance(connection, AsyncConnection):
        if prepared is None:
            raise TypeError(f"{statement} needs SQLAlchemy's execution; read it in a session")
        return _sqlite_rows(connection.driver, prepared, values)
    if prepared is None:
        return (await connection.execute(statement, values)).all()
    fairy: Any = connection.sync_connection.connection  # type: ignore[union-attr]
    driver: Any = fairy.driver_connection
    if connection.dialect.name == "postgresql":
        adapted = fairy.dbapi_connection
        arguments = prepared.compiled.arguments(values)
        try:
            if not adapted._started:
                # SQLAlchemy's asyncpg adapter begins its transaction lazily, with its own first
                # statement: begun here as it would be there, so a statement first in its
                # transaction (a share lock, a snapshot the next statements share) is in it, not
                # autocommitted.
                await adapted._start_transaction()
            records = await driver.fetch(prepared.compiled.sql, *arguments)
        except Exception as error:
            raise await driver_error(connection, adapted, prepared.compiled.sql, arguments, error) from error
        return [prepared.make(record) for record in records]
    return _sqlite_rows(driver, prepared, values)


async def driver_error(
    connection: AsyncConnection, adapted: Any, sql: str, arguments: Sequence[Any], error: Exception
) -> BaseException:
    """An error of a statement run on the asyncpg connection under SQLAlchemy's adapter `adapted`
    (of `connection`), as SQLAlchemy raises it: a `DBAPIError` (an `IntegrityError` stays one).
    A lost connection is invalidated as SQLAlchemy's own execution invalidates it (with the pool's
    other connections of before: the server that dropped it dropped them too), and the error says
    so (`connection_invalidated`): run on the driver, it was neither, and the dead connection went
    back to the pool for the next transaction to fail on."""
    dialect = connection.dialect
    dbapi = dialect.loaded_dbapi
    try:
        adapted._handle_exception(error)  # raises it as the adapter's DB-API error
    except dbapi.Error as translated:
        lost = dialect.is_disconnect(translated, adapted, None)
        if lost and not connection.invalidated:
            # As SQLAlchemy's `_handle_dbapi_exception`: every connection of the pool checked out
            # before now is replaced at its next checkout, then this one is.
            fairy: Any = connection.sync_connection.connection  # type: ignore[union-attr]
            connection.sync_engine.pool._invalidate(fairy, translated, _checkin=False)
            await connection.invalidate(translated)
        return exc.DBAPIError.instance(
            sql, list(arguments), translated, dbapi.Error, connection_invalidated=lost, dialect=dialect
        )
    except Exception as other:  # not the driver's: as it came
        return other
    return error


def _sqlite_rows(driver: sqlite3.Connection, prepared: _InTransaction, values: dict[str, Any]) -> list[Any]:
    cursor = driver.cursor()  # inline SQLite: runs at once; the transaction holds its locks
    try:
        records = cursor.execute(prepared.compiled.sql, prepared.compiled.arguments(values)).fetchall()
    finally:
        cursor.close()
    return [prepared.make(record) for record in records]


def padded_in(column: ColumnElement[Any], name: str, count: int) -> ColumnElement[bool]:
    """`column IN (:name_0, ..., :name_{n-1})` for `count` values, `n` the power of two at or above
    `count`: a statement built with it is compiled once per size class and runs through `rows_in`,
    where an expanding list is rendered anew by SQLAlchemy on every call. `padded_values` fills it."""
    return column.in_([bindparam(f"{name}_{index}") for index in range(_padded(count))])


def padded_values(name: str, values: Sequence[Any]) -> dict[str, Any]:
    """The parameters of `padded_in(column, name, len(values))`: the list padded with its last
    value (a value twice in an IN list changes nothing)."""
    assert values, "an empty IN list matches nothing: do not run it"
    padded = [*values, *[values[-1]] * (_padded(len(values)) - len(values))]
    return {f"{name}_{index}": value for index, value in enumerate(padded)}


def _padded(count: int) -> int:
    return 1 << max(0, count - 1).bit_length()


async def _leave_as_is(_connection: asyncpg.Connection) -> None:
    """The pool's reset: none (see the module docstring)."""
