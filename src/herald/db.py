"""Database plumbing: declarative base, portable column types, engines and sessions.

One request gets one session. Sessions are opened lazily by `SessionDep` and finished by the request
middleware, which commits *before* the response is sent and rolls back on any error, so a request
lands whole or not at all (see `herald.http.middleware`).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, MetaData, event, exc, make_url
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.types import TypeDecorator, TypeEngine
from sqlalchemy.util import await_only

from herald import plain_sql, sqlite_checkpoints, sqlite_inline
from herald.config import Settings
from herald.direct_reads import DirectReads
from herald.direct_writes import DirectWrites
from herald.process_lock import ProcessLock

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every engine (SQLite keeps no zone; values are stored as UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use the clock's aware UTC values")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _PortableJSON(TypeDecorator[Any]):
    """JSONB on PostgreSQL (indexable, compact), JSON text elsewhere.

    The same as `JSON().with_variant(JSONB(), "postgresql")`, except that JSONB is looked up when a
    PostgreSQL dialect first compiles the type, not when the models are imported: importing the
    PostgreSQL dialect costs a command line on SQLite a tenth of its start-up (tests/test_cli_startup.py).
    """

    impl = JSON
    cache_ok = True
    # What `JSON` declares and a decorator does not take from its impl: Python None is stored as
    # JSON `null` (not SQL NULL), and values are not hashed when rows are made unique.
    should_evaluate_none = True
    hashable = False

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(JSON())


PortableJSON = _PortableJSON()

# The largest value an INTEGER column holds on every engine (32 bits on PostgreSQL). The driver fails
# on a larger number compared with such a column, so inputs that are compared are bounded by it.
INTEGER_MAX = 2**31 - 1


@dataclass
class Database:
    """The engines of one deployment.

    SQLite allows one writer at a time; a transaction that reads first and writes later can fail to
    upgrade its lock. Writing requests therefore begin with `BEGIN IMMEDIATE` (they queue on the lock
    instead of failing), while reading requests begin normally and run concurrently under WAL.
    """

    engine: AsyncEngine
    read_engine: AsyncEngine
    writer: async_sessionmaker[AsyncSession]
    reader: async_sessionmaker[AsyncSession]
    # For a read that is one statement (a statement is its own snapshot): no transaction around it,
    # which saves a BEGIN and a COMMIT (on PostgreSQL two round trips). The statement itself runs on
    # the driver (`direct`, `herald.direct_reads`); sessions of this reader, anything else the
    # request reads (its authentication).
    single_statement_reader: async_sessionmaker[AsyncSession]
    direct: DirectReads
    # Transactions of Core writes alone (the outbox's rows), on the driver (`herald.direct_writes`).
    writes: DirectWrites
    # Writes made while the caller's own transaction is still open (a refused request's idempotency
    # record, on PostgreSQL, before its transaction lets the key's lock go): a pool of their own.
    # From the request's pool, as many refusals at once as it has connections each held one and
    # waited for a second that never came free (30 s, then 503).
    side_engine: AsyncEngine
    side_writer: async_sessionmaker[AsyncSession]
    # Upkeep begun on this database with nobody awaiting it (`planner_statistics.refresh_in_background`).
    background: set[asyncio.Task[Any]] = field(default_factory=set)

    def run_in_background(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """`work` in a task of its own, ended by `dispose` before the pools close: a connection it
        held then was let go unclosed, for the collector to find later (asyncpg then warns in
        whatever code the collector interrupts)."""
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self.background.discard)
        return task

    async def dispose(self) -> None:
        here = asyncio.get_running_loop()
        mine = [task for task in self.background if task.get_loop() is here]
        for task in mine:
            task.cancel()
        await asyncio.gather(*mine, return_exceptions=True)
        await self.direct.aclose()
        self.writes.close()
        await self.engine.dispose()
        if self.read_engine.sync_engine.pool is not self.engine.sync_engine.pool:
            await self.read_engine.dispose()
        if self.side_engine is not self.engine:
            await self.side_engine.dispose()


class WriteGate:
    """SQLite's one writer, queued for in this process: writers wait here, first come first served,
    instead of polling SQLite's lock. Shared by every engine on the same file, whichever thread's
    event loop runs it (the worker embedded in `herald serve` runs on a thread and loop of its own):
    the lock is handed to the next waiter on its own loop. The writer at the head then takes the
    file's lock across processes (`process_lock`), which `herald worker` processes on the same file
    take too."""

    def __init__(self, across: ProcessLock | None = None) -> None:
        """`across`: the lock the file's writers in other processes take too, after this queue."""
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._across = across

    async def acquire(self) -> None:
        await self._acquire_here()
        if self._across is not None:
            try:
                await self._across.acquire(abandoned=self._release_here)
            except asyncio.CancelledError:
                raise  # our place is given up once the wait is over (`abandoned`)
            except BaseException:
                self._release_here()
                raise

    def release(self) -> None:
        if self._across is not None:
            self._across.release()
        self._release_here()

    async def _acquire_here(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append((waiter.get_loop(), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._mutex:
                queued = (waiter.get_loop(), waiter) in self._waiters
                if queued:
                    self._waiters.remove((waiter.get_loop(), waiter))
            if not queued and waiter.done() and not waiter.cancelled():
                self._release_here()  # granted just before the cancellation: pass it on
            # Else, if handed over, `_grant` finds the waiter cancelled and passes the lock on.
            raise

    def _release_here(self) -> None:
        with self._mutex:
            if not self._waiters:
                self._held = False
                return
            loop, waiter = self._waiters.popleft()
        # Still held: ownership passes to the waiter as its loop runs `_grant`.
        if loop.is_closed():
            self._release_here()
        elif loop is _running_loop():
            loop.call_soon(self._grant, waiter)
        else:
            loop.call_soon_threadsafe(self._grant, waiter)

    def _grant(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled meanwhile
            self._release_here()
        else:
            waiter.set_result(None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_gates: dict[str, WriteGate] = {}
_gates_mutex = threading.Lock()


def _gate_of(path: str) -> WriteGate:
    """The write gate of the SQLite file `path` in this process (an in-memory database: its own)."""
    key = plain_sql.sqlite_file_key(path)
    if key is None:
        return WriteGate()
    with _gates_mutex:
        gate = _gates.get(key)
        if gate is None:
            # A URI filename names no file of its own to lock beside: its writers poll across processes.
            across = None if key.startswith("file:") else ProcessLock(f"{key}-writer")
            gate = _gates[key] = WriteGate(across)
        return gate


_SQLITE_LOCK_TIMEOUT = 30.0
# Execution option of SQLite's single-statement connections: no BEGIN (the driver runs each
# statement in its own implicit transaction, a snapshot of its own).
SINGLE_STATEMENT = "herald_single_statement"


def _prepare_sqlite(dbapi_connection: Any, path: str) -> None:
    """A new connection to the SQLite file `path` set up as every connection of this process."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    if sqlite_checkpoints.wants_manual_checkpoints(path):
        cursor.execute("PRAGMA wal_autocheckpoint=0")  # a thread of this process checkpoints
    cursor.close()
    sqlite_inline.register_functions(dbapi_connection)


def _direct_writes(url: str, engine: AsyncEngine) -> DirectWrites:
    if not url.startswith("sqlite"):
        return DirectWrites(engine)
    path = make_url(url).database or ""
    if path in ("", ":memory:"):  # a connection of its own would see another database
        return DirectWrites(engine)
    return DirectWrites(
        engine,
        sqlite_path=path,
        gate=_gate_of(path),
        prepare=lambda connection: _prepare_sqlite(connection, path),
        busy_patience=_SQLITE_LOCK_TIMEOUT,
    )


def _sqlite_engine(url: str, *, immediate: bool, pool_size: int) -> AsyncEngine:
    path = make_url(url).database or ""
    in_memory = path in ("", ":memory:")  # one connection, kept: SQLAlchemy's StaticPool takes no size
    pool = {} if in_memory else {"pool_size": pool_size, "max_overflow": pool_size}
    engine = create_async_engine(
        make_url(url).set(drivername=sqlite_inline.DRIVER),
        async_creator=sqlite_inline.connector(path, _SQLITE_LOCK_TIMEOUT),
        json_serializer=_json_text,
        json_deserializer=_json_value,
        **pool,
    )
    # SQLite has one writer at a time. Within this process, writers queue on the file's gate
    # instead of in SQLite's busy loop, so waiting costs no pooled connection and no thread.
    gate = _gate_of(path)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below emit BEGIN itself.
        dbapi_connection.isolation_level = None
        _prepare_sqlite(dbapi_connection, path)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        if not immediate:
            if not connection.get_execution_options().get(SINGLE_STATEMENT):
                connection.exec_driver_sql("BEGIN")
            return
        await_only(gate.acquire())
        connection.info["holds_write_gate"] = True
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            _release(connection)
            raise

    def _release(connection: Any, *_args: Any) -> None:
        if connection.info.pop("holds_write_gate", False):
            gate.release()

    def _release_on_checkin(_dbapi_connection: Any, record: Any) -> None:
        # Backstop: a connection returned to the pool never keeps the gate.
        if record is not None and record.info.pop("holds_write_gate", False):
            gate.release()

    if immediate:
        event.listen(engine.sync_engine, "commit", _release)
        event.listen(engine.sync_engine, "rollback", _release)
        event.listen(engine.sync_engine.pool, "checkin", _release_on_checkin)

    return engine


def _json_text(value: Any) -> str:
    """A JSON column's value as text: orjson where it can (a campaign's 2 KB of components: ~1 µs
    instead of ~28 µs, on every campaign write; 3 % of a C1's CPU on SQLite), the standard library
    for what orjson refuses (integers beyond 64 bits, keys that are not strings), so nothing that
    was stored before fails now."""
    import orjson  # at the first write of a JSON value: a command line that writes none does not load it

    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


# A run of digits as long as the largest 64-bit integer's: orjson reads a longer integer as a float
# (the standard library keeps it whole), so such a text is read by the standard library.
_LONG_NUMBER = re.compile(r"\d{19}")


def _json_value(text: str) -> Any:
    """A JSON column's text as a value: orjson where it reads the text as the standard library
    would (a user's attributes: ~0.5 µs instead of ~4 µs, for every user a delivery batch renders),
    the standard library for the rest: NaN and infinities, lone surrogates, and long numbers. A
    whole number beyond 64 bits is read as the double it equals, as a request body's is
    (`json_numbers.wide_as_doubles`): PostgreSQL's JSONB writes a double such as 1.18e21 back as
    1180591620717411303424, which no answer can carry as an integer."""
    import orjson

    if _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    from herald.json_numbers import wide_as_doubles  # rare: a command line need not load pydantic

    return wide_as_doubles(json.loads(text), text.encode())


def _postgresql_engine(settings: Settings, pool_size: int) -> AsyncEngine:
    engine = create_async_engine(
        plain_sql.postgresql_engine_url(settings.database_url),
        pool_size=pool_size,
        max_overflow=0,
        json_serializer=_json_text,
        json_deserializer=_json_value,
        connect_args={
            "timeout": settings.db_connect_timeout_seconds,
            "command_timeout": settings.db_statement_timeout_seconds,
        },
    )
    event.listen(engine.sync_engine, "checkout", _given_up_if_closed)
    return engine


def _given_up_if_closed(_dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
    """A pooled connection the server closed while it sat idle (a restart, a failover,
    `pg_terminate_backend`) is given up at checkout, and the pool opens another, instead of the
    request it was handed to answering 503. Free: asyncpg saw its socket close; no round trip, as a
    ping before each checkout would cost. (A path that went silent without closing is still found
    by the statement timeout.)"""
    driver: Any = record.driver_connection
    if driver is not None and driver.is_closed():
        raise exc.DisconnectionError("closed by the server while idle in the pool")


def create_database(settings: Settings) -> Database:
    url = settings.database_url
    if url.startswith("sqlite"):
        engine = _sqlite_engine(url, immediate=True, pool_size=settings.db_pool_size)
        read_engine = _sqlite_engine(url, immediate=False, pool_size=settings.db_pool_size)
        single_statement = read_engine.execution_options(**{SINGLE_STATEMENT: True})
        side_engine = engine  # one writer at a time: nothing writes beside an open transaction
    else:
        # No ping before each checkout (a round trip per request): a connection the server closed
        # is given up at checkout (`_given_up_if_closed`); one found dead only by a statement is
        # invalidated with the whole pool, that one request answers 503 "retry", the next ones
        # get fresh connections.
        # At most `db_pool_size` connections per process (no overflow): processes times pool size must
        # stay under the server's max_connections; a request beyond them waits for a connection.
        engine = _postgresql_engine(settings, settings.db_pool_size)
        # A quarter of the request pool's size: each side write is one short transaction.
        side_engine = _postgresql_engine(settings, max(2, settings.db_pool_size // 4))
        # Reading requests see one snapshot across their statements (a page and its total count).
        read_engine = engine.execution_options(isolation_level="REPEATABLE READ")
        single_statement = engine.execution_options(isolation_level="AUTOCOMMIT")
    return Database(
        engine=engine,
        read_engine=read_engine,
        writer=async_sessionmaker(engine, expire_on_commit=False),
        reader=async_sessionmaker(read_engine, expire_on_commit=False),
        single_statement_reader=async_sessionmaker(single_statement, expire_on_commit=False),
        # A quarter of the request pool's size: each read holds its connection for one statement.
        direct=DirectReads(
            single_statement,
            busy_patience=_SQLITE_LOCK_TIMEOUT,
            pool_size=max(2, settings.db_pool_size // 4),
            connect_timeout=settings.db_connect_timeout_seconds,
            statement_timeout=settings.db_statement_timeout_seconds,
        ),
        writes=_direct_writes(url, engine),
        side_engine=side_engine,
        side_writer=async_sessionmaker(side_engine, expire_on_commit=False),
    )
