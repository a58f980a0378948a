"""SQLite: JSON1 functions and `json_each` for arrays.

JSON paths quote the key (`$."name"`); a key containing a double quote cannot be written as a path,
so such keys are found by scanning the document's members. (Case folding is `lower()`, which
Herald's SQLite dialect writes Unicode: `herald.sqlite_inline`.)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, case, exists, false, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from herald.audience.segmentation.dialect import ValueSpec, ValueTest
from herald.campaigns.schemas.filters import FilterDataType

# `json_type()` names of the JSON values each data type reads.
_JSON_TYPES: dict[FilterDataType, tuple[str, ...]] = {
    FilterDataType.STRING: ("text",),
    FilterDataType.DATETIME: ("text",),
    FilterDataType.DOUBLE: ("integer", "real"),
    FilterDataType.BOOL: ("true", "false"),
}
_DATETIME_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z"


class SQLiteDialect:
    name = "sqlite"

    def _typed_test(
        self, kind: FilterDataType, value: ColumnElement[Any], test: ValueTest
    ) -> ColumnElement[bool]:
        if kind is FilterDataType.DATETIME:
            # the cheap range test first: most values fail it, and then the shape is not read
            return test(value) & self.is_datetime_text(value)
        return test(value)

    def _elements_match(
        self, array: ColumnElement[Any], kind: FilterDataType, test: ValueTest
    ) -> ColumnElement[bool]:
        element = func.json_each(array).table_valued("type", "value")
        return exists(
            select(literal(1))
            .select_from(element)
            .where(element.c.type.in_(_JSON_TYPES[kind]), self._typed_test(kind, element.c.value, test))
        )

    def json_match(
        self,
        document: ColumnElement[Any],
        key: str,
        kind: FilterDataType,
        test: ValueTest,
        spec: ValueSpec | None = None,
    ) -> ColumnElement[bool]:
        if '"' in key:
            return self._match_by_scan(document, key, kind, test)
        path = literal(f'$."{key}"', String)
        value = func.json_extract(document, path)
        whens: dict[Any, ColumnElement[bool]] = dict.fromkeys(
            _JSON_TYPES[kind], self._typed_test(kind, value, test)
        )
        whens["array"] = self._elements_match(func.json_extract(document, path), kind, test)
        return case(whens, value=func.json_type(document, path), else_=false())

    def _match_by_scan(
        self, document: ColumnElement[Any], key: str, kind: FilterDataType, test: ValueTest
    ) -> ColumnElement[bool]:
        member = func.json_each(document).table_valued("key", "type", "value")
        whens: dict[Any, ColumnElement[bool]] = dict.fromkeys(
            _JSON_TYPES[kind], self._typed_test(kind, member.c.value, test)
        )
        whens["array"] = self._elements_match(member.c.value, kind, test)
        matched = case(whens, value=member.c.type, else_=false())
        return exists(select(literal(1)).select_from(member).where(member.c.key == key, matched))

    def json_scalar(self, document: ColumnElement[Any], key: str, kind: FilterDataType) -> ColumnElement[Any]:
        if '"' in key:
            member = func.json_each(document).table_valued("key", "type", "value")
            return (
                select(self._typed_scalar(kind, member.c.type, member.c.value))
                .where(member.c.key == key)
                .scalar_subquery()
            )
        path = literal(f'$."{key}"', String)
        return self._typed_scalar(kind, func.json_type(document, path), func.json_extract(document, path))

    def _typed_scalar(
        self, kind: FilterDataType, json_type: ColumnElement[Any], value: ColumnElement[Any]
    ) -> ColumnElement[Any]:
        condition: ColumnElement[bool] = json_type.in_(_JSON_TYPES[kind])
        if kind is FilterDataType.DATETIME:
            condition = condition & self.is_datetime_text(value)
        return case((condition, value))

    def number(self, value: float) -> ColumnElement[Any]:
        return literal(value)

    def contains(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.instr(text, part) > 0

    def starts_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.substr(text, 1, func.length(part)) == part

    def ends_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        # substr(x, -0) is the whole of x, so the empty suffix needs its own case
        return or_(func.length(part) == 0, func.substr(text, -func.length(part)) == part)

    def is_datetime_text(self, text: ColumnElement[Any]) -> ColumnElement[bool]:
        return text.op("GLOB", is_comparison=True)(literal(_DATETIME_GLOB, String))


SQLITE = SQLiteDialect()
