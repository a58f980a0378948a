"""PostgreSQL: custom attributes are matched with JSONB operators and SQL/JSON path, the rest in SQL.

A test that is data (`ValueSpec`) is compiled for the shape of what is stored:

- string equality (case-sensitive): `attributes -> 'key' ?| ARRAY[...]` (a string equal to one of
  them, or an array holding one), as the hand-written `?` would be;
- date-times: the stored text compared with the bounds in SQL, its shape checked with `translate`
  (cheaper than a regular expression); arrays by path;
- everything else: one strict path `$."key" ? (F || exists(@[*] ? (F)))`: F holds for the value
  itself or for an element of an array. Strict mode never unwraps a nested array and compares only
  values of the same JSON type. Values travel in the `vars` object; only regular expressions (for
  substring and case-insensitive tests) are written into the path, escaped.

Case-insensitive tests on custom attributes match each character against every character with the
same lower-case form (`herald.lowercase`); standard columns and dynamic values use `lower()`. Both
mean what SQLite's `lower()` means (`herald.sqlite_inline`).

Tests that read another column (dynamic values) cannot be a path: they fall back to SQL over
`jsonb_typeof` and `jsonb_array_elements`, with casts inside CASE branches so that a value of
another type is never cast. Numbers compare as `numeric` (exact, never out of range).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Boolean,
    Numeric,
    Text,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, JSONPATH
from sqlalchemy.sql.elements import ColumnElement

from herald.audience.segmentation.conditions import (
    BoolEquals,
    NumberIn,
    NumberRange,
    Present,
    TextMatch,
    TextMode,
)
from herald.audience.segmentation.dialect import DATETIME_REGEX, ValueSpec, ValueTest
from herald.campaigns.schemas.filters import FilterDataType
from herald.lowercase import same_when_lowered

# `jsonb_typeof()` / `.type()` names of the JSON values each data type reads.
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


# ---- SQL/JSON path --------------------------------------------------------------------------------


def _string(text: str) -> str:
    """A path string literal (the JSON string syntax)."""
    return json.dumps(text, ensure_ascii=False)


def _regex_literal(text: str) -> str:
    """`text` matched literally by an ARE: every ASCII character that is not a letter or digit is
    escaped (a backslash before a letter or digit would start an escape sequence)."""
    return "".join(f"\\{char}" if char.isascii() and not char.isalnum() else char for char in text)


def _regex_lowered(text: str) -> str:
    """`text` matched by an ARE as `lower(value)` would match `lower(text)`: each character that
    others share a lower-case form with is the class of them all ('i' → "[Iiİ]"). The regex flag
    "i" adds each character's own upper- and lower-case only: 'istanbul' missed "İstanbul", which
    SQLite's and the standard columns' `lower()` match."""
    return "".join(
        f"[{alike}]" if len(alike := same_when_lowered(char)) > 1 else _regex_literal(char) for char in text
    )


_DATETIME_SHAPE = "0000-00-00T00:00:00Z"  # the stored shape with every digit written as 0


class _PathFilter:
    """A strict-mode path filter F (for one value or array element) and the variables it names."""

    def __init__(self) -> None:
        self.variables: dict[str, Any] = {}

    def var(self, value: Any) -> str:
        name = f"v{len(self.variables)}"
        self.variables[name] = value
        return f"${name}"

    @staticmethod
    def any_of(parts: list[str]) -> str:
        return parts[0] if len(parts) == 1 else "(" + " || ".join(parts) + ")"

    def text(self, spec: TextMatch) -> str:
        if spec.case_sensitive and spec.mode is TextMode.EQUALS:
            return self.any_of([f"@ == {self.var(value)}" for value in spec.values])
        literal = _regex_literal if spec.case_sensitive else _regex_lowered
        before, after = {
            TextMode.EQUALS: ("^", "$"),
            TextMode.CONTAINS: ("", ""),
            TextMode.STARTS: ("^", ""),
            TextMode.ENDS: ("", "$"),
        }[spec.mode]
        patterns = [before + literal(value) + after for value in spec.values]
        return self.any_of([f"@ like_regex {_string(pattern)}" for pattern in patterns])

    def condition(self, kind: FilterDataType, spec: ValueSpec) -> str:
        parts: list[str] = []
        if isinstance(spec, Present):
            parts.append(f'@.type() == "{_JSON_TYPE[kind]}"')
        elif isinstance(spec, BoolEquals):
            parts.append(f"@ == {'true' if spec.value else 'false'}")
        elif isinstance(spec, NumberIn):
            parts.append(self.any_of([f"@ == {self.var(number)}" for number in spec.values]))
        elif isinstance(spec, NumberRange):
            if spec.low is not None:
                parts.append(f"@ {'>=' if spec.low_inclusive else '>'} {self.var(spec.low)}")
            if spec.high is not None:
                parts.append(f"@ {'<=' if spec.high_inclusive else '<'} {self.var(spec.high)}")
        elif isinstance(spec, TextMatch):
            parts.append(self.text(spec))
        else:
            if spec.low is not None:
                parts.append(f"@ >= {self.var(spec.low)}")
            if spec.high is not None:
                parts.append(f"@ < {self.var(spec.high)}")
        if kind is FilterDataType.DATETIME:
            # last: only values already within the bounds pay for the regular expression
            parts.append(f"@ like_regex {_string(DATETIME_REGEX)}")
        return " && ".join(parts) if parts else "exists(@)"


def _path_exists(document: ColumnElement[Any], path: str, variables: dict[str, Any]) -> ColumnElement[bool]:
    return func.jsonb_path_exists(
        document,
        cast(literal(path, Text), JSONPATH),
        cast(literal(json.dumps(variables), Text), JSONB),
        true(),  # silent: a value of another shape is simply not matched
        type_=Boolean,
    )


class PostgreSQLDialect:
    name = "postgresql"

    def _typed_test(
        self, kind: FilterDataType, value: ColumnElement[Any], test: ValueTest
    ) -> ColumnElement[bool]:
        if kind is FilterDataType.DATETIME:
            return test(value) & self.is_datetime_text(value)
        return test(value)

    def json_match(
        self,
        document: ColumnElement[Any],
        key: str,
        kind: FilterDataType,
        test: ValueTest,
        spec: ValueSpec | None = None,
    ) -> ColumnElement[bool]:
        if spec is None:
            return self._match_in_sql(document, key, kind, test)
        member = _member(document, key)
        if isinstance(spec, TextMatch) and spec.case_sensitive and spec.mode is TextMode.EQUALS:
            # `?|` also finds object keys: objects are no strings
            found = member.op("?|", return_type=Boolean)(literal(list(spec.values), ARRAY(Text)))
            return func.coalesce(found & (func.jsonb_typeof(member) != "object"), false())
        path = _PathFilter()
        condition = path.condition(kind, spec)
        if kind is FilterDataType.DATETIME:
            text = _member_text(document, key)
            scalar = func.coalesce(test(text) & self.is_datetime_text(text), false())
            return or_(
                scalar, _path_exists(document, f"strict $.{_string(key)}[*] ? ({condition})", path.variables)
            )
        expression = f"strict $.{_string(key)} ? ({condition} || exists(@[*] ? ({condition})))"
        return _path_exists(document, expression, path.variables)

    def _match_in_sql(
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

    def contains(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.strpos(text, part) > 0

    def starts_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.starts_with(text, part, type_=Boolean)

    def ends_with(self, text: ColumnElement[Any], part: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.right(text, func.length(part)) == part

    def is_datetime_text(self, text: ColumnElement[Any]) -> ColumnElement[bool]:
        # every digit as 0, then the shape: exact, and much cheaper than a regular expression
        return func.translate(text, "0123456789", "0000000000") == _DATETIME_SHAPE


POSTGRESQL = PostgreSQLDialect()
