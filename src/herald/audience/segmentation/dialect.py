"""What differs between engines, behind one interface; `dialect_for` picks the implementation.

Everything engine-specific the compiler needs lives in `sqlite.py` and `postgresql.py`: reading a
custom attribute out of the JSON document with its JSON type checked, iterating array elements,
case folding, substring tests and the date-time shape test. The compiler itself is engine-neutral.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy.sql.elements import ColumnElement

from herald.campaigns.schemas.filters import FilterDataType

# A test of one typed value (the attribute, or one element of an array attribute).
ValueTest = Callable[[ColumnElement[Any]], ColumnElement[bool]]

# Stored custom date-times are UTC text of exactly this shape (so text order is time order).
DATETIME_REGEX = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"


class SqlDialect(Protocol):
    name: str

    def json_match(
        self, document: ColumnElement[Any], key: str, kind: FilterDataType, test: ValueTest
    ) -> ColumnElement[bool]:
        """`test` holds for the value at `key` when it is a scalar of `kind`, or for at least one
        element of `kind` when it is an array. Never NULL."""
        ...

    def json_scalar(self, document: ColumnElement[Any], key: str, kind: FilterDataType) -> ColumnElement[Any]:
        """The value at `key` when it is a scalar of `kind` (text, number or boolean), else NULL."""
        ...

    def number(self, value: float) -> ColumnElement[Any]:
        """A number to compare attribute values with."""
        ...

    def lower(self, text: ColumnElement[Any]) -> ColumnElement[Any]:
        """Unicode lower-casing (the same on every engine as Python's `str.lower` for letters)."""
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
