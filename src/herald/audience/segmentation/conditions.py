"""What a user-attribute filter tests: its `value` read, per data type and operator, into a condition.

Value shapes (JSON) by `data_type` and `operator`; `x` is the attribute's value:

| data_type | operator | `value` | matches when |
|---|---|---|---|
| bool | is | `true` / `false` | x equals it |
| double | in | a number, or a list of 1-1000 numbers | x equals one of them |
| double | between | `[low, high]`, low <= high | low <= x <= high |
| double | lessThan / greaterThan | a number | x < value / x > value |
| string | is | a string | x equals it |
| string | in | a string, or a list of 1-1000 strings | x equals one of them |
| string | contains | a non-empty string | x contains it |
| string | containsInTheFollowing | a non-empty string, or a list of them | x contains one of them |
| string | startWithInTheFollowing | the same | x starts with one of them |
| string | endsWithInTheFollowing | the same | x ends with one of them |
| datetime | inTheLast | `{"value": N, "unit": U}`, or N (days) | now - N U <= x <= now |
| datetime | inTheNext | the same | now <= x <= now + N U |
| datetime | on | `"YYYY-MM-DD"` (or a date-time: its UTC date) | x is within that UTC day |
| datetime | before | a date or an ISO 8601 date-time | x is earlier (a date: than its start) |
| datetime | after | the same | x is later (a date: than its end) |
| datetime | between | `[from, to]`, each a date or a date-time | from <= x <= to (a date `to` includes its day) |
| datetime | today | (none) | x is within the current UTC day |
| any | exists | (none) | the user has a value of this data type |

- Units `U`: `minutes`, `hours`, `days`, `weeks`, `months` (any case; `value_type` is a synonym of
  `unit`; days when absent); N is a whole number 0-1,000,000. A month is a calendar month (the day is
  clamped to the target month's length). Date-times without a zone are UTC.
- `case_sensitive: true` compares strings exactly; otherwise both sides are lower-cased first.
  `negate: true` matches exactly the users the filter without it does not match (those without the
  attribute included).
- `is_dynamic_value: true`: `value` is `{{UserAttribute['name']}}` (or `{{ user.name }}`) and the
  attribute is compared with that attribute of the same user, read as the filter's data type
  (a user without it, or with an array there, does not match). Operators: string is, in, contains,
  containsInTheFollowing, startWithInTheFollowing, endsWithInTheFollowing; double in, lessThan,
  greaterThan; bool is; datetime on (same UTC day), before, after.

Reading a value needs no clock: relative windows stay relative until `resolve_period(…, now)`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import JsonValue

from herald.audience.attributes import MAX_STRING_LENGTH
from herald.audience.segmentation.periods import (
    UNITS,
    Period,
    RelativeWindow,
    Today,
    parse_date,
    parse_instant,
    period_after,
    period_before,
    period_between,
    period_on,
)
from herald.campaigns.schemas.filters import (
    OPERATORS_BY_DATA_TYPE,
    VALUELESS_OPERATORS,
    FilterDataType,
    FilterOperator,
    UserAttributeFilter,
)
from herald.problems import Problem, join_path

MAX_VALUES = 1000
MAX_AMOUNT = 1_000_000

_O = FilterOperator
Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Present:
    """`exists`: the user has a value of the filter's data type."""


@dataclass(frozen=True, slots=True)
class BoolEquals:
    value: bool


@dataclass(frozen=True, slots=True)
class NumberIn:
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class NumberRange:
    low: float | None
    high: float | None
    low_inclusive: bool = True
    high_inclusive: bool = True


class TextMode(StrEnum):
    EQUALS = "equals"
    CONTAINS = "contains"
    STARTS = "starts"
    ENDS = "ends"


@dataclass(frozen=True, slots=True)
class TextMatch:
    """The value matches one of `values` in `mode`."""

    mode: TextMode
    values: tuple[str, ...]
    case_sensitive: bool


class Relation(StrEnum):
    """How a dynamic value (another attribute of the same user) is compared."""

    EQUALS = "equals"
    CONTAINS = "contains"
    STARTS = "starts"
    ENDS = "ends"
    LESS = "less"
    GREATER = "greater"
    SAME_DAY = "same_day"
    BEFORE = "before"
    AFTER = "after"


@dataclass(frozen=True, slots=True)
class SameUserAttribute:
    attribute: str
    relation: Relation
    case_sensitive: bool


Condition = (
    Present
    | BoolEquals
    | NumberIn
    | NumberRange
    | TextMatch
    | Period
    | RelativeWindow
    | Today
    | SameUserAttribute
)


@dataclass(frozen=True, slots=True)
class Criterion:
    """One user-attribute filter, read: the attribute, its data type, the test, and `negate`."""

    name: str
    data_type: FilterDataType
    condition: Condition
    negate: bool


_TEXT_MODES = {
    _O.IS: TextMode.EQUALS,
    _O.IN: TextMode.EQUALS,
    _O.CONTAINS: TextMode.CONTAINS,
    _O.CONTAINS_IN_THE_FOLLOWING: TextMode.CONTAINS,
    _O.START_WITH_IN_THE_FOLLOWING: TextMode.STARTS,
    _O.ENDS_WITH_IN_THE_FOLLOWING: TextMode.ENDS,
}
_DYNAMIC_RELATIONS: dict[tuple[FilterDataType, FilterOperator], Relation] = {
    **{(FilterDataType.STRING, op): Relation(mode.value) for op, mode in _TEXT_MODES.items()},
    (FilterDataType.DOUBLE, _O.IN): Relation.EQUALS,
    (FilterDataType.DOUBLE, _O.LESS_THAN): Relation.LESS,
    (FilterDataType.DOUBLE, _O.GREATER_THAN): Relation.GREATER,
    (FilterDataType.BOOL, _O.IS): Relation.EQUALS,
    (FilterDataType.DATETIME, _O.ON): Relation.SAME_DAY,
    (FilterDataType.DATETIME, _O.BEFORE): Relation.BEFORE,
    (FilterDataType.DATETIME, _O.AFTER): Relation.AFTER,
}
_REFERENCE = re.compile(
    r"^\{\{\s*(?:UserAttribute\[\s*'([^'\]]+)'\s*\]|UserAttribute\[\s*\"([^\"\]]+)\"\s*\]"
    r"|user\.([A-Za-z_][A-Za-z0-9_]*))\s*\}\}$"
)


class _Invalid(Exception):
    """A value that does not fit its operator (internal; becomes a Problem)."""

    def __init__(self, code: str, where: Path, message: str) -> None:
        super().__init__(message)
        self.code, self.where, self.message = code, where, message


def read_criterion(item: UserAttributeFilter, path: Path) -> tuple[Criterion | None, list[Problem]]:
    """Read a user-attribute filter at `path`; a problem for each thing that does not fit."""
    allowed = OPERATORS_BY_DATA_TYPE[item.data_type]
    if item.operator not in allowed:
        names = ", ".join(sorted(op.value for op in allowed))
        return None, [
            Problem(
                "INVALID_ENUM_VALUE",
                join_path(*path, "operator"),
                f"Operator '{item.operator.value}' does not apply to data_type "
                f"'{item.data_type.value}'; use one of: {names}.",
            )
        ]
    if item.operator not in VALUELESS_OPERATORS and item.value is None:
        return None, [
            Problem(
                "REQUIRED_FIELD_MISSING",
                join_path(*path, "value"),
                f"'value' is required with operator '{item.operator.value}'.",
            )
        ]
    try:
        condition = _condition(item)
    except _Invalid as invalid:
        return None, [Problem(invalid.code, join_path(*path, "value", *invalid.where), invalid.message)]
    return Criterion(item.name, item.data_type, condition, bool(item.negate)), []


def check_value(item: UserAttributeFilter, path: Path) -> list[Problem]:
    """The problems of a filter's `value` alone (operator/data type fit is checked elsewhere)."""
    if item.operator not in OPERATORS_BY_DATA_TYPE[item.data_type] or item.value is None:
        return []
    return read_criterion(item, path)[1]


# What an action's `attributes` may hold: its event's attributes are tested, nothing else.
ON_EVENTS_ONLY_USER_ATTRIBUTES = "Only 'user_attributes' filters apply to the attributes of an action."


def dynamic_reference(value: JsonValue) -> str | None:
    """The user attribute a dynamic value names, or None when it names none."""
    if not isinstance(value, str):
        return None
    found = _REFERENCE.fullmatch(value.strip())
    if found is None:
        return None
    return next(group for group in found.groups() if group is not None)


def _condition(item: UserAttributeFilter) -> Condition:
    operator, data_type, value = item.operator, item.data_type, item.value
    case_sensitive = bool(item.case_sensitive)
    if operator is _O.EXISTS:
        return Present()
    if item.is_dynamic_value:
        return _dynamic(data_type, operator, value, case_sensitive)
    if data_type is FilterDataType.BOOL:
        if not isinstance(value, bool):
            raise _Invalid("INVALID_TYPE", (), "Expected true or false.")
        return BoolEquals(value)
    if data_type is FilterDataType.DOUBLE:
        return _number_condition(operator, value)
    if data_type is FilterDataType.STRING:
        return _text_condition(operator, value, case_sensitive)
    return _datetime_condition(operator, value)


def _dynamic(
    data_type: FilterDataType, operator: FilterOperator, value: JsonValue, case_sensitive: bool
) -> SameUserAttribute:
    relation = _DYNAMIC_RELATIONS.get((data_type, operator))
    if relation is None:
        raise _Invalid(
            "INVALID_TYPE", (), f"A dynamic value cannot be used with operator '{operator.value}'."
        )
    name = dynamic_reference(value)
    if name is None:
        raise _Invalid(
            "INVALID_TYPE",
            (),
            "A dynamic value must name one attribute of the user, like {{UserAttribute['city']}}.",
        )
    return SameUserAttribute(name, relation, case_sensitive)


def _number(value: JsonValue, where: Path = ()) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid("INVALID_TYPE", where, "Expected a number.")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Invalid("OUT_OF_RANGE", where, "Numbers must be finite.")
    return float(value) if isinstance(value, float) else value


def _many(value: JsonValue) -> list[tuple[JsonValue, Path]]:
    """A scalar as a one-item list; a list as its items, each with its index."""
    if not isinstance(value, list):
        return [(value, ())]
    if not value:
        raise _Invalid("OUT_OF_RANGE", (), "Give at least one value.")
    if len(value) > MAX_VALUES:
        raise _Invalid("OUT_OF_RANGE", (), f"Give at most {MAX_VALUES} values.")
    return [(item, (index,)) for index, item in enumerate(value)]


def _number_condition(operator: FilterOperator, value: JsonValue) -> Condition:
    if operator is _O.IN:
        return NumberIn(tuple(_number(item, where) for item, where in _many(value)))
    if operator is _O.BETWEEN:
        if not isinstance(value, list) or len(value) != 2:
            raise _Invalid("INVALID_TYPE", (), "Expected [low, high], two numbers.")
        low, high = _number(value[0], (0,)), _number(value[1], (1,))
        if low > high:
            raise _Invalid("OUT_OF_RANGE", (), "The low end must not be greater than the high end.")
        return NumberRange(low, high)
    bound = _number(value)
    if operator is _O.LESS_THAN:
        return NumberRange(None, bound, high_inclusive=False)
    return NumberRange(bound, None, low_inclusive=False)


def _text_condition(operator: FilterOperator, value: JsonValue, case_sensitive: bool) -> TextMatch:
    mode = _TEXT_MODES[operator]
    if operator in (_O.IS, _O.CONTAINS):
        items: list[tuple[JsonValue, Path]] = [(value, ())]
    else:
        items = _many(value)
    texts: list[str] = []
    for item, where in items:
        if not isinstance(item, str):
            raise _Invalid("INVALID_TYPE", where, "Expected a string.")
        if mode is not TextMode.EQUALS and not item:
            raise _Invalid("OUT_OF_RANGE", where, "A text to look for must not be empty.")
        if len(item) > MAX_STRING_LENGTH:
            # No stored value is longer, so it could match nothing; and PostgreSQL's regular
            # expression for it grows with its square (150,000 characters: 37 s, then refused).
            raise _Invalid(
                "OUT_OF_RANGE", where, f"A text to look for has at most {MAX_STRING_LENGTH:,} characters."
            )
        texts.append(item)
    return TextMatch(mode, tuple(texts), case_sensitive)


def _window(operator: FilterOperator, value: JsonValue) -> RelativeWindow:
    unit: JsonValue = "days"
    amount = value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"value", "unit", "value_type"})
        if unknown:
            raise _Invalid("UNKNOWN_FIELD", (unknown[0],), f"'{unknown[0]}' is not part of a time window.")
        if "unit" in value and "value_type" in value:
            raise _Invalid("MUTUALLY_EXCLUSIVE", ("value_type",), "Give 'unit' or 'value_type', not both.")
        if "value" not in value:
            raise _Invalid("REQUIRED_FIELD_MISSING", ("value",), "'value' (how many units) is required.")
        amount = value["value"]
        unit = value.get("unit", value.get("value_type", "days"))
    where: Path = ("value",) if isinstance(value, dict) else ()
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise _Invalid("INVALID_TYPE", where, "Expected a whole number of units.")
    if not 0 <= amount <= MAX_AMOUNT:
        raise _Invalid("OUT_OF_RANGE", where, f"Expected 0 to {MAX_AMOUNT:,} units.")
    unit_key = ("value_type",) if isinstance(value, dict) and "value_type" in value else ("unit",)
    if not isinstance(unit, str) or unit.lower() not in UNITS:
        raise _Invalid("INVALID_ENUM_VALUE", unit_key, f"Unit must be one of: {', '.join(UNITS)}.")
    return RelativeWindow(amount, unit.lower(), future=operator is _O.IN_THE_NEXT)


def _moment(value: JsonValue, where: Path = ()) -> tuple[datetime, bool]:
    """A date (True) or a date-time (False) of a request, as a UTC instant."""
    if isinstance(value, str):
        day = parse_date(value)
        if day is not None:
            return datetime(day.year, day.month, day.day, tzinfo=UTC), True
        instant = parse_instant(value)
        if instant is not None:
            return instant, False
    raise _Invalid(
        "INVALID_TYPE", where, "Expected a date (2026-03-01) or an ISO 8601 date-time (2026-03-01T09:30:00Z)."
    )


def _datetime_condition(operator: FilterOperator, value: JsonValue) -> Condition:
    if operator is _O.TODAY:
        return Today()
    if operator in (_O.IN_THE_LAST, _O.IN_THE_NEXT):
        return _window(operator, value)
    if operator is _O.BETWEEN:
        if not isinstance(value, list) or len(value) != 2:
            raise _Invalid("INVALID_TYPE", (), "Expected [from, to], two dates or date-times.")
        period = period_between(_moment(value[0], (0,)), _moment(value[1], (1,)))
        if period is None:
            raise _Invalid("OUT_OF_RANGE", (), "'from' must not be later than 'to'.")
        return period
    moment = _moment(value)
    if operator is _O.ON:
        return period_on(moment)
    if operator is _O.BEFORE:
        return period_before(moment)
    return period_after(moment)
