"""What differs between engines, behind one interface; `dialect_for` picks the implementation.

Everything engine-specific the compiler needs lives in `sqlite.py` and `postgresql.py`: reading a
custom attribute out of the JSON document with its JSON type checked, iterating array elements,
substring tests and the date-time shape test. The compiler itself is engine-neutral. Case folding is
`lower()` on every engine (Herald's SQLite dialect writes it Unicode: `herald.sqlite_inline`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.sql.elements import ColumnElement

from herald.audience.segmentation.conditions import BoolEquals, NumberIn, NumberRange, Present, TextMatch
from herald.campaigns.schemas.filters import FilterDataType

# A test of one typed value (the attribute, or one element of an array attribute).
ValueTest = Callable[[ColumnElement[Any]], ColumnElement[bool]]


@dataclass(frozen=True, slots=True)
class TextRange:
    """Stored date-time text within `low <= text < high` (None: unbounded)."""

    low: str | None
    high: str | None


# What a `ValueTest` tests, as data, for engines that compile it into their own JSON query language.
ValueSpec = Present | BoolEquals | NumberIn | NumberRange | TextMatch | TextRange

# Stored custom date-times are UTC text of exactly this shape (so text order is time order).
DATETIME_REGEX = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"


class SqlDialect(Protocol):
    name: str

    def json_match(
        self,
        document: ColumnElement[Any],
        key: str,
        kind: FilterDataType,
        test: ValueTest,
        spec: ValueSpec | None,
    ) -> ColumnElement[bool]:
        """`test` holds for the value at `key` when it is a scalar of `kind`, or for at least one
        element of `kind` when it is an array. `spec` is the same test as data (None when it reads
        other columns). Never NULL."""
        ...

    def json_scalar(self, document: ColumnElement[Any], key: str, kind: FilterDataType) -> ColumnElement[Any]:
        """The value at `key` when it is a scalar of `kind` (text, number or boolean), else NULL."""
        ...

    def number(self, value: float) -> ColumnElement[Any]:
        """A number to compare attribute values with."""
        ...

    def contains(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]: ...

    def starts_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]: ...

    def ends_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]: ...

    def is_datetime_text(self, text: ColumnElement[Any]) -> ColumnElement[bool]:
        """True when `text` has the stored date-time shape `YYYY-MM-DDTHH:MM:SSZ`."""
        ...


def dialect_for(name: str) -> SqlDialect:
    """The implementation for an SQLAlchemy dialect name (`session.get_bind().dialect.name`)."""
    if name == "sqlite":
        from herald.audience.segmentation.sqlite import SQLITE

        return SQLITE
    if name == "postgresql":
        from herald.audience.segmentation.postgresql import POSTGRESQL

        return POSTGRESQL
    raise ValueError(f"segmentation does not support the {name!r} database")
