"""A conversion goal's `goal_event_attribute` read as a filter of the one filter language.

The goal's condition is written the way the spec writes it (`condition`, upper-case `data_type`,
`value` and `value1` as strings, `is_case_sensitive`); this module turns it into the
`user_attributes` filter of an action's attributes that means the same, so the compiler evaluates
it like any other event-attribute filter (`compiler.event_predicate`):

- `data_type`: STRING and ARRAY_STRING → string, DOUBLE, NUMBER and ARRAY_DOUBLE → double (an array
  attribute matches when any element does), BOOL → bool, DATETIME → datetime; absent → string.
  GEOPOINT, OBJECT and ARRAY_OBJECT have no counterpart: such a goal is reported as a problem and
  never converts.
- `condition`: an operator of the filter language, compared without case, spaces or underscores
  (`is`, `LESS_THAN`, `greaterThan`, `between`, `contains`, `inTheLast`, ...); absent → `is`.
- `value`: read per data type: a number for double (for `between`: `[value, value1]`), `true` or
  `false` for bool, the text itself for string and datetime (for `between`: `[value, value1]`);
  `inTheLast`/`inTheNext` take a whole number of `value_type` units (days when absent).
"""

from __future__ import annotations

import math
from typing import Any

from herald.campaigns.schemas.filters import (
    FilterDataType,
    FilterGroup,
    FilterJoin,
    FilterOperator,
    UserAttributeFilter,
)
from herald.campaigns.schemas.goals import GoalAttributeDataType, GoalEventAttribute
from herald.problems import Problem, join_path

Path = tuple[str | int, ...]

_D = GoalAttributeDataType
_DATA_TYPES = {
    _D.STRING: FilterDataType.STRING,
    _D.ARRAY_STRING: FilterDataType.STRING,
    _D.DOUBLE: FilterDataType.DOUBLE,
    _D.NUMBER: FilterDataType.DOUBLE,
    _D.ARRAY_DOUBLE: FilterDataType.DOUBLE,
    _D.BOOL: FilterDataType.BOOL,
    _D.DATETIME: FilterDataType.DATETIME,
}
_OPERATORS = {op.value.lower(): op for op in FilterOperator}
_O = FilterOperator


def _key(text: str) -> str:
    return text.replace("_", "").replace(" ", "").lower()


def _number(text: str | None, path: Path) -> float:
    try:
        number = float(text) if text is not None else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise _Unreadable(Problem("INVALID_TYPE", join_path(*path), "Expected a number."))
    return number


class _Unreadable(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _value(
    attribute: GoalEventAttribute, data_type: FilterDataType, operator: FilterOperator, path: Path
) -> Any:
    value, upper = attribute.value, attribute.value1
    at, upper_at = (*path, "value"), (*path, "value1")
    if operator in (_O.EXISTS, _O.TODAY):
        return None
    if data_type is FilterDataType.BOOL:
        if value is None or value.strip().lower() not in ("true", "false"):
            raise _Unreadable(Problem("INVALID_TYPE", join_path(*at), "Expected 'true' or 'false'."))
        return value.strip().lower() == "true"
    if data_type is FilterDataType.DOUBLE:
        if operator is _O.BETWEEN:
            return [_number(value, at), _number(upper, upper_at)]
        return _number(value, at)
    if operator is _O.BETWEEN:
        return [value, upper]
    if operator in (_O.IN_THE_LAST, _O.IN_THE_NEXT):
        try:
            amount = int(value or "")
        except ValueError:
            raise _Unreadable(
                Problem("INVALID_TYPE", join_path(*at), "Expected a whole number of units.")
            ) from None
        return {"value": amount, "unit": (attribute.value_type or "days").lower()}
    return value


def goal_filter(attribute: GoalEventAttribute, path: Path = ()) -> tuple[FilterGroup | None, list[Problem]]:
    """The filter group over an event's attributes that `attribute` means, or why there is none.

    Problems found here are of the translation only; the compiler then reads the value like any
    filter's (`conditions.read_criterion`) and reports its own."""
    data_type = _DATA_TYPES.get(attribute.data_type or _D.STRING)
    if data_type is None:
        return None, [
            Problem(
                "INVALID_ENUM_VALUE",
                join_path(*path, "data_type"),
                f"Goal conditions on {attribute.data_type} attributes cannot be evaluated.",
            )
        ]
    operator = _OPERATORS.get(_key(attribute.condition or "is"))
    if operator is None:
        return None, [
            Problem(
                "INVALID_ENUM_VALUE",
                join_path(*path, "condition"),
                f"'{attribute.condition}' is not a condition of the filter language.",
            )
        ]
    try:
        value = _value(attribute, data_type, operator, path)
    except _Unreadable as unreadable:
        return None, [unreadable.problem]
    item = UserAttributeFilter(
        filter_type="user_attributes",
        data_type=data_type,
        name=attribute.name,
        operator=operator,
        value=value,
        case_sensitive=attribute.is_case_sensitive,
        negate=attribute.negate,
    )
    return FilterGroup(filter_operator=FilterJoin.AND, filters=[item]), []
