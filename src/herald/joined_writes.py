"""A write and an insert that goes with it (a request's idempotency record), in one statement on
PostgreSQL: one round trip instead of two. Likewise a read and the request's idempotency claim
before it (`ClaimedRead`), a service's first and last writes of transactions of its own with the
request's idempotency claim and answer (`ClaimedWrites`), and a service's one write with both, in a
statement committed by itself (`ClaimedStatement`).

The insert is a data-modifying CTE of the write (`WITH joined AS (INSERT ...) UPDATE ...`), which
PostgreSQL runs once and to completion whatever the write does, in the same snapshot; the
statement's row count stays the write's own (a compare-and-set still reads it). SQLite runs the two
one after the other (a statement there costs no round trip).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, TypeVar

from sqlalchemy import Insert, Select, Table, Update, bindparam
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from herald.direct_writes import SqliteTransaction, Transaction, execute_in

# An insert built once (its values all parameters) and its parameters, named apart from the write's.
Joined = tuple[Any, dict[str, Any]]
T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)
# What a service calls with what its write's answer shows, just before that write: an insert to
# write with it (the request's idempotency record of that answer), or None.
Answer = Callable[[T], Joined | None]
# A service's first read of a request (a select of at most one row, built once, and its parameters),
# run with the request's idempotency claim when the route defers its claim to it: the row read, as
# a mapping, or None. Without a pending claim it is the plain read; without a select (the service
# reads nothing: e.g. an id that cannot exist), only the claim.
ClaimedRead = Callable[[AsyncSession, Select[Any] | None, dict[str, Any]], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class FirstWrite:
    """An insert for a service's first write to carry (a request's idempotency claim), what to call
    once that write is committed (the claim is then the request's), and what to await when the
    write failed on the insert (IntegrityError; the claim taken meanwhile): it raises what the
    request answers then (a replay, a 409), or returns when the write may go without the insert."""

    joined: Joined
    written: Callable[[], None]
    refused: Callable[[], Awaitable[None]]


class ClaimedWrites(Protocol[T_contra]):
    """The request's idempotency claim, for a service whose work commits in transactions of its own:
    `first()` goes with its first write (None: no claim to take), `last(shown)` (the answer made of
    what it shows) with its last, as `Joined`. When the first write fails on the key
    (IntegrityError), or the service answers without writing, `apart()` claims it in a transaction
    of its own (raising the replay or 409 the key answers with) before anything else is done."""

    def first(self) -> FirstWrite | None: ...

    async def apart(self) -> None: ...

    def last(self, shown: T_contra) -> Joined | None: ...


class ClaimedStatement(Protocol):
    """The request's idempotency claim left to a service's one write, which then runs by itself,
    the claim with it: on PostgreSQL one statement (`one_statement`) that claims the key in a CTE
    of its own (`claim`, with `parameters`), inserts the answer's record (`record_after` the row
    written; its parameters are the answer's `Joined`'s) and runs on the driver (`rows`); on
    SQLite a transaction of its own on the driver (`transaction`) that reads the key's record
    first (`lookup`, with `parameters`), when it can (`by_itself`: the request's transaction has
    not begun). When it wrote, `written()`; when it wrote nothing (the key
    has a record or is in flight, or the write was refused), the service calls `apart(session)`,
    which claims the key in the request's transaction (raising the replay or 409 the key answers
    with), and goes on there. `claim`, `record_after` and `lookup` are the same objects for every
    request (what is built of them is built once)."""

    @property
    def one_statement(self) -> bool: ...

    @property
    def by_itself(self) -> bool: ...

    @property
    def claim(self) -> Any: ...

    @property
    def lookup(self) -> Select[Any]: ...

    @property
    def parameters(self) -> dict[str, Any]: ...

    def record_after(self, source: Any) -> Any: ...

    async def rows(self, statement: Select[Any], values: dict[str, Any]) -> Sequence[Sequence[Any]]: ...

    def transaction(self) -> AbstractAsyncContextManager[Transaction]: ...

    def written(self) -> None: ...

    async def apart(self, session: AsyncSession) -> None: ...


class ClaimedRows(Protocol):
    """A `ClaimedRead` whose select returns any number of rows (a page): its rows (named tuples of
    its columns), ordered by the columns of the select named in `descending`, each descending;
    none without a select."""

    async def __call__(
        self,
        session: AsyncSession,
        read: Select[Any] | None,
        params: dict[str, Any],
        descending: tuple[str, ...] = (),
    ) -> Sequence[Any]: ...


async def execute_with(
    connection: AsyncConnection | SqliteTransaction,
    statement: Insert | Update,
    table: Table,
    values: dict[str, Any],
    joined: Joined | None,
) -> int:
    """Run `statement` (built once; the SET or VALUES clause is the columns of `table` named in
    `values`) with `values`, and `joined` with it, in `connection`'s transaction (an engine's or one
    of `direct_writes.DirectWrites`): the number of rows the statement matched."""
    if joined is None:
        return await execute_in(connection, statement, values)
    also, also_values = joined
    if isinstance(connection, SqliteTransaction) or connection.dialect.name != "postgresql":
        matched = await execute_in(connection, statement, values)
        await execute_in(connection, also, also_values)
        return matched
    combined, parameters = one_statement(statement, table, values, joined)
    return int((await connection.execute(combined, parameters)).rowcount)


def one_statement(
    statement: Insert | Update, table: Table, values: dict[str, Any], joined: Joined | None
) -> tuple[Any, dict[str, Any]]:
    """`statement` with `values` and `joined` as one PostgreSQL statement (built once per
    statement, set of columns and joined insert), and its parameters: what `execute_with` runs
    there, for a caller that runs it as a transaction of its own (`DirectReads.write`)."""
    columns = frozenset(name for name in values if name in table.c)
    if joined is None:
        return _combined(statement, table, columns, None), values
    also, also_values = joined
    return _combined(statement, table, columns, also), {**values, **also_values}


@cache
def _combined(statement: Insert | Update, table: Table, columns: frozenset[str], also: Any) -> Any:
    # Inside a CTE the clause is not taken from the parameters: it is spelled out (so is it for a
    # statement alone, whose clause would otherwise be every column of the table).
    spelled = statement.values({name: bindparam(name, type_=table.c[name].type) for name in columns})
    return spelled if also is None else spelled.add_cte(also.cte("joined"))
