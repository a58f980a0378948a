"""A conversion goal's `goal_event_attribute` read as a filter of the filter language."""

from __future__ import annotations

from typing import Any

import pytest

from herald.audience.segmentation import goal_filter
from herald.campaigns.schemas.filters import UserAttributeFilter
from herald.campaigns.schemas.goals import GoalEventAttribute


def read(**attribute: Any) -> tuple[UserAttributeFilter | None, list[tuple[str, str]]]:
    group, problems = goal_filter(GoalEventAttribute.model_validate({"name": "x", **attribute}), ("g",))
    found = group.filters[0] if group is not None else None
    assert found is None or isinstance(found, UserAttributeFilter)
    return found, [(p.code, p.target) for p in problems]


@pytest.mark.parametrize(
    ("attribute", "operator", "data_type", "value"),
    [
        ({"condition": "is", "data_type": "STRING", "value": "red"}, "is", "string", "red"),
        ({"value": "red"}, "is", "string", "red"),  # no condition, no data type: string equality
        ({"condition": "GREATER_THAN", "data_type": "DOUBLE", "value": "10"}, "greaterThan", "double", 10.0),
        (
            {"condition": "between", "data_type": "NUMBER", "value": "1", "value1": "2.5"},
            "between",
            "double",
            [1, 2.5],
        ),
        ({"condition": "is", "data_type": "BOOL", "value": "TRUE"}, "is", "bool", True),
        ({"condition": "contains", "data_type": "ARRAY_STRING", "value": "a"}, "contains", "string", "a"),
        (
            {"condition": "inTheLast", "data_type": "DATETIME", "value": "3", "value_type": "HOURS"},
            "inTheLast",
            "datetime",
            {"value": 3, "unit": "hours"},
        ),
        ({"condition": "exists", "data_type": "DOUBLE"}, "exists", "double", None),
    ],
)
def test_conditions_become_the_filter_that_means_the_same(
    attribute: dict[str, Any], operator: str, data_type: str, value: Any
) -> None:
    found, problems = read(**attribute, negate=True, is_case_sensitive=True)
    assert problems == []
    assert found is not None
    assert (found.operator.value, found.data_type.value, found.value) == (operator, data_type, value)
    assert (found.negate, found.case_sensitive) == (True, True)


@pytest.mark.parametrize(
    ("attribute", "problem"),
    [
        ({"condition": "is", "data_type": "GEOPOINT", "value": "1,2"}, ("INVALID_ENUM_VALUE", "g.data_type")),
        ({"condition": "near", "value": "a"}, ("INVALID_ENUM_VALUE", "g.condition")),
        ({"condition": "lessThan", "data_type": "DOUBLE", "value": "ten"}, ("INVALID_TYPE", "g.value")),
        ({"condition": "between", "data_type": "DOUBLE", "value": "1"}, ("INVALID_TYPE", "g.value1")),
        ({"condition": "is", "data_type": "BOOL", "value": "yes"}, ("INVALID_TYPE", "g.value")),
        ({"condition": "inTheLast", "data_type": "DATETIME", "value": "x"}, ("INVALID_TYPE", "g.value")),
    ],
)
def test_conditions_without_a_counterpart_are_problems(
    attribute: dict[str, Any], problem: tuple[str, str]
) -> None:
    assert read(**attribute) == (None, [problem])
