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
- on PostgreSQL, on an asyncpg connection checked out of the engine's pool for the statement, outside
  any transaction.

Statements with expanding `IN` lists are rendered per call by SQLAlchemy and keep its path; a
statement selecting a column that needs result processing (a date-time read back as a Python object,
say) is refused when compiled: rows come back exactly as the driver returns them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import make_url
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Select

from herald import sqlite_inline

# Statements compiled at most this many at a time: callers keep a statement per query shape, and
# shapes are few; the bound only keeps a caller that builds statements per request from growing it.
_COMPILED_LIMIT = 512


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    defaults: dict[str, Any]
    processors: dict[str, Callable[[Any], Any]]

    def arguments(self, values: dict[str, Any]) -> list[Any]:
        arguments = []
        for name in self.names:
            value = values[name] if name in values else self.defaults[name]
            processor = self.processors.get(name)
            arguments.append(processor(value) if processor is not None and value is not None else value)
        return arguments


class DirectReads:
    """Run single statements on the driver (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, *, busy_patience: float = 30.0) -> None:
        self._engine = engine
        self._dialect: Dialect = engine.dialect
        self._postgres = engine.dialect.name == "postgresql"
        # id(statement) -> (the statement, kept so that its id is not reused; its compiled form, or
        # None when it takes SQLAlchemy's path)
        self._compiled: dict[int, tuple[Select[Any], _Compiled | None]] = {}
        self._sqlite: sqlite3.Connection | None = None
        self._patience = busy_patience

    async def rows(self, statement: Select[Any], values: dict[str, Any]) -> Sequence[Sequence[Any]]:
        compiled = self._compile(statement)
        if compiled is None:  # expanding parameters: SQLAlchemy renders them per call
            async with self._engine.connect() as connection:
                return (await connection.execute(statement, values)).all()
        arguments = compiled.arguments(values)
        if self._postgres:
            async with self._engine.connect() as connection:
                driver: Any = (await connection.get_raw_connection()).driver_connection
                found: Sequence[Sequence[Any]] = await driver.fetch(compiled.sql, *arguments)
                return found
        sqlite = self._sqlite_connection()
        cursor = sqlite.cursor()
        try:
            await sqlite_inline.retry_busy(self._patience, lambda: cursor.execute(compiled.sql, arguments))
            return cursor.fetchall()
        finally:
            cursor.close()

    async def scalar(self, statement: Select[Any], values: dict[str, Any]) -> Any:
        rows = await self.rows(statement, values)
        return rows[0][0] if rows else None

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None

    def _sqlite_connection(self) -> sqlite3.Connection:
        if self._sqlite is None:
            connection = sqlite_inline.open_connection(make_url(str(self._engine.url)).database or "")
            connection.isolation_level = None  # autocommit: each statement its own snapshot
            connection.execute("PRAGMA foreign_keys=ON")
            sqlite_inline.register_functions(connection)
            self._sqlite = connection
        return self._sqlite

    def _compile(self, statement: Select[Any]) -> _Compiled | None:
        cached = self._compiled.get(id(statement))
        if cached is not None and cached[0] is statement:
            return cached[1]
        if len(self._compiled) >= _COMPILED_LIMIT:
            self._compiled.clear()
        compiled = statement.compile(dialect=self._dialect)
        for column in statement.selected_columns:
            if column.type._cached_result_processor(self._dialect, None) is not None:
                raise ValueError(f"{column} needs result processing; select it in its wire form")
        entry = None
        if not any(bind.expanding for bind in compiled.binds.values()):
            entry = _Compiled(
                sql=compiled.string,
                names=tuple(compiled.positiontup or ()),
                defaults={name: bind.effective_value for name, bind in compiled.binds.items()},
                # One processor per name (tuple-valued binds, the other kind, are expanding ones).
                processors={
                    name: processor
                    for name, processor in compiled._bind_processors.items()
                    if callable(processor)
                },
            )
        self._compiled[id(statement)] = (statement, entry)
        return entry
