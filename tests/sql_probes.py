"""What the app's statements do at the database: which ones it sends, and the plan a database
chooses for one (the plan, not a timing, is what tests can assert about a statement's cost)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection


@contextmanager
def recorded_statements(app: FastAPI) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement the app's engines send while the block runs, with its driver's parameters."""
    seen: list[tuple[str, Any]] = []
    engines = {
        app.state.herald.database.engine.sync_engine,
        app.state.herald.database.read_engine.sync_engine,
    }

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_args: Any) -> None:
        seen.append((statement, parameters))

    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)


async def plan_of(connection: AsyncConnection, sql: str, parameters: Sequence[Any] = ()) -> str:
    """The plan `connection`'s database chooses for `sql` (SQL as sent to the driver, with its
    `parameters`), one step per line: PostgreSQL's EXPLAIN with sequential scans off (so that an
    index it can use shows, however few rows the test wrote), SQLite's EXPLAIN QUERY PLAN."""
    if connection.dialect.name == "postgresql":
        await connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        rows = await connection.exec_driver_sql(f"EXPLAIN {sql}", tuple(parameters))
        return "\n".join(str(row[0]) for row in rows)
    rows = await connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", tuple(parameters))
    return "\n".join(str(row[-1]) for row in rows)
