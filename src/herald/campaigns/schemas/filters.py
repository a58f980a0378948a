"""Filters: the FilterGroup grammar shared by `trigger_condition` and `segmentation_details`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, JsonValue

from herald.campaigns.schemas.common import Flag, NonEmptyText, NonNegativeInt, Text
from herald.schemas import APIModel

# Herald's limit (the spec names none): each filter is a term of one SQL condition, and SQLite
# refuses conditions nested about 1,000 deep (PostgreSQL takes seconds to plan a few thousand).
MAX_FILTERS = 100


class FilterJoin(StrEnum):
    AND = "and"
    OR = "or"


class FilterDataType(StrEnum):
    STRING = "string"
    DOUBLE = "double"
    DATETIME = "datetime"
    BOOL = "bool"


class FilterOperator(StrEnum):
    IS = "is"
    EXISTS = "exists"
    IN = "in"
    BETWEEN = "between"
    LESS_THAN = "lessThan"
    GREATER_THAN = "greaterThan"
    CONTAINS = "contains"
    CONTAINS_IN_THE_FOLLOWING = "containsInTheFollowing"
    START_WITH_IN_THE_FOLLOWING = "startWithInTheFollowing"
    ENDS_WITH_IN_THE_FOLLOWING = "endsWithInTheFollowing"
    IN_THE_LAST = "inTheLast"
    ON = "on"
    BEFORE = "before"
    AFTER = "after"
    IN_THE_NEXT = "inTheNext"
    TODAY = "today"


_O = FilterOperator

# Spec "Operators by data_type".
OPERATORS_BY_DATA_TYPE: dict[FilterDataType, frozenset[FilterOperator]] = {
    FilterDataType.BOOL: frozenset({_O.IS, _O.EXISTS}),
    FilterDataType.DOUBLE: frozenset({_O.IN, _O.BETWEEN, _O.LESS_THAN, _O.GREATER_THAN, _O.EXISTS}),
    FilterDataType.STRING: frozenset(
        {
            _O.IN,
            _O.CONTAINS,
            _O.CONTAINS_IN_THE_FOLLOWING,
            _O.START_WITH_IN_THE_FOLLOWING,
            _O.ENDS_WITH_IN_THE_FOLLOWING,
            _O.EXISTS,
            _O.IS,
        }
    ),
    FilterDataType.DATETIME: frozenset(
        {_O.IN_THE_LAST, _O.ON, _O.BETWEEN, _O.BEFORE, _O.AFTER, _O.IN_THE_NEXT, _O.EXISTS, _O.TODAY}
    ),
}

# Operators that test presence or the current day and so take no `value`.
VALUELESS_OPERATORS: frozenset[FilterOperator] = frozenset({_O.EXISTS, _O.TODAY})


class UserAttributeFilter(APIModel):
    filter_type: Literal["user_attributes"]
    data_type: FilterDataType
    category: Text | None = None
    name: NonEmptyText
    operator: FilterOperator
    value: JsonValue = None
    case_sensitive: Flag | None = None
    negate: Flag | None = None
    project_name: Text | None = None
    # Contract §5: `value` is a personalization expression resolved at send time.
    is_dynamic_value: Flag | None = None


class ExecutionType(StrEnum):
    ATLEAST = "atleast"
    ATMOST = "atmost"
    EXACTLY = "exactly"


class Execution(APIModel):
    type: ExecutionType
    count: NonNegativeInt


class ActionFilter(APIModel):
    filter_type: Literal["actions"]
    action_name: NonEmptyText
    execution: Execution | None = None
    executed: Flag | None = None
    attributes: FilterGroup | None = None  # conditions on the event's attributes
    condition: Text | None = None


class CustomSegmentFilter(APIModel):
    filter_type: Literal["custom_segments"]
    name: NonEmptyText
    id: NonEmptyText


Filter = Annotated[
    UserAttributeFilter | ActionFilter | CustomSegmentFilter, Field(discriminator="filter_type")
]


class FilterGroup(APIModel):
    filter_operator: FilterJoin
    filters: Annotated[list[Filter], Field(max_length=MAX_FILTERS)]


ActionFilter.model_rebuild()
