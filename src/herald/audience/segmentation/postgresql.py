"""PostgreSQL: JSONB operators, `jsonb_array_elements` for arrays, `lower()` for case folding.

Casts from JSON text to numeric or boolean sit inside CASE branches chosen by `jsonb_typeof`, so a
value of another type is never cast (PostgreSQL does not promise any order of evaluation in AND).
Numbers compare as `numeric`: exact, and never out of range whatever a client stored.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Boolean,
    Numeric,
    String,
    Text,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement

from herald.audience.segmentation.dialect import DATETIME_REGEX, ValueTest
from herald.campaigns.schemas.filters import FilterDataType

# `jsonb_typeof()` names of the JSON values each data type reads.
_JSON_TYPE: dict[FilterDataType, str] = {
    FilterDataType.STRING: "string",
    FilterDataType.DATETIME: "string",
    FilterDataType.DOUBLE: "number",
    FilterDataType.BOOL: "boolean",
}


def _member(document: ColumnElement[Any], key: str) -> ColumnElement[Any]:
    return document.op("->", return_type=JSONB)(literal(key, Text))


def _member_text(document: ColumnElement[Any], key: str) -> ColumnElement[Any]:
    return document.op("->>", return_type=Text)(literal(key, Text))


def _as(kind: FilterDataType, text: ColumnElement[Any]) -> ColumnElement[Any]:
    if kind is FilterDataType.DOUBLE:
        return cast(text, Numeric)
    if kind is FilterDataType.BOOL:
        return cast(text, Boolean)
    return text


class PostgreSQLDialect:
    name = "postgresql"

    def _typed_test(
        self, kind: FilterDataType, value: ColumnElement[Any], test: ValueTest
    ) -> ColumnElement[bool]:
        if kind is FilterDataType.DATETIME:
            # the cheap range test first: most values fail it, and then the shape is not read
            return test(value) & self.is_datetime_text(value)
        return test(value)

    def json_match(
        self, document: ColumnElement[Any], key: str, kind: FilterDataType, test: ValueTest
    ) -> ColumnElement[bool]:
        element = func.jsonb_array_elements(_member(document, key)).table_valued("value")
        element_text = element.c.value.op("#>>", return_type=Text)(literal_column("'{}'"))
        element_value = case(
            (func.jsonb_typeof(element.c.value) == _JSON_TYPE[kind], _as(kind, element_text))
        )
        in_array = exists(
            select(literal(1)).select_from(element).where(self._typed_test(kind, element_value, test))
        )
        whens: dict[Any, ColumnElement[bool]] = {
            _JSON_TYPE[kind]: self._typed_test(kind, _as(kind, _member_text(document, key)), test),
            "array": in_array,
        }
        return case(whens, value=func.jsonb_typeof(_member(document, key)), else_=false())

    def json_scalar(self, document: ColumnElement[Any], key: str, kind: FilterDataType) -> ColumnElement[Any]:
        text = _member_text(document, key)
        condition = func.jsonb_typeof(_member(document, key)) == _JSON_TYPE[kind]
        if kind is FilterDataType.DATETIME:
            # the shape test runs on strings only: nested CASE keeps the order
            return case((condition, case((self.is_datetime_text(text), text))))
        return case((condition, _as(kind, text)))

    def number(self, value: float) -> ColumnElement[Any]:
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return literal(exact, Numeric)

    def lower(self, text: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.lower(text, type_=String)

    def contains(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.strpos(text, part) > 0

    def starts_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.starts_with(text, part, type_=Boolean)

    def ends_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.right(text, func.length(part)) == part

    def is_datetime_text(self, text: ColumnElement[Any]) -> ColumnElement[bool]:
        return text.op("~", is_comparison=True)(literal(DATETIME_REGEX, String))


POSTGRESQL = PostgreSQLDialect()
