"""`column IN (a list given at each run)`, with one statement text for any length of the list.

SQLAlchemy's expanding parameter (`bindparam(name, expanding=True)`) renders one placeholder per
value at each run. On PostgreSQL every length is then a statement text of its own: rendered again
(a cast per value) and prepared again by the driver, whose statement cache it also churns. That was
about a tenth of the trigger worker's CPU at 1,000 events/s (its batches' users and events, the
outbox rows of a window). There the list is one array parameter, `column = ANY(:name)`. On SQLite
it is one JSON text, `column IN (SELECT value FROM json_each(:name))` (the same plan: the index
searched once per value): a statement with a list in it then compiles once and runs on the driver
(`herald.direct_writes`, `herald.direct_reads.rows_in`), where an expanding list is rendered again
by SQLAlchemy at every run.

    statement = select(...).where(one_of(User.customer_id, "ids"))
    await session.execute(statement, {"ids": ["u1", "u2"]})

`one_of(..., driving=True)` is for a statement whose rows are found by the list alone, through an
index led by the listed column (the outbox's rows of a window, by delivery id). On PostgreSQL it is
`column IN (SELECT unnest(:name))`, a semi-join the planner either hashes or drives the index with,
one probe per value: `column = ANY(:name)` is tested value by value against each row wherever the
planner takes it for a filter rather than the index's condition (a generic plan cannot hash an
array it does not know), and with statistics that did not yet count the table's newest rows it
did: a window's update of 1,600 rows compared each row of the table with each id (0.4 s where the
semi-join takes 20 ms, measured on 8,000 rows). Beside another condition on an index of its own
the semi-join has the opposite trap (that index's rows scanned once per value), hence the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, String, any_, bindparam, func, select
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeDecorator


class OneOf(ColumnElement[bool]):
    """`column` is one of the strings of the list parameter `name` (see the module docstring)."""

    type = Boolean()
    _is_implicitly_boolean = True  # a comparison: no `= 1` after it where booleans are not native
    inherit_cache = True
    _traverse_internals = [
        ("column", InternalTraversal.dp_clauseelement),
        ("name", InternalTraversal.dp_string),
        ("driving", InternalTraversal.dp_boolean),
    ]

    def __init__(self, column: ColumnElement[Any], name: str, driving: bool = False) -> None:
        self.column = column
        self.name = name
        self.driving = driving


def one_of(column: Any, name: str, *, driving: bool = False) -> OneOf:
    return OneOf(column, name, driving)


@dataclass(frozen=True)
class ListParameter:
    """A list of strings given at each run of a statement, under `name`."""

    name: str

    def among(self, column: Any) -> OneOf:
        return OneOf(column, self.name)


@compiles(OneOf)
def _expanding(element: OneOf, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.column.in_(bindparam(element.name, expanding=True)), **kw)


class _JsonList(TypeDecorator[list[str]]):
    """A list of strings bound as its JSON text (SQLite's `json_each` takes it apart)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str:
        import orjson  # as `herald.db` does: loaded at the first list bound, not at import

        return orjson.dumps(list(value)).decode()


@compiles(OneOf, "sqlite")
def _json_each(element: OneOf, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    values = compiler.process(bindparam(element.name, type_=_JsonList()), **kw)
    return f"{column} IN (SELECT value FROM json_each({values}))"


@compiles(OneOf, "postgresql")
def _array(element: OneOf, compiler: SQLCompiler, **kw: Any) -> str:
    # Imported when PostgreSQL compiles: a command line on SQLite does not load its dialect.
    from sqlalchemy.dialects.postgresql import ARRAY

    values = bindparam(element.name, type_=ARRAY(String))
    if element.driving:
        return compiler.process(element.column.in_(select(func.unnest(values)).scalar_subquery()), **kw)
    return compiler.process(element.column == any_(values), **kw)
