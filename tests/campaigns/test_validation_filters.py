"""Filter rules: operators by data type (spec table), values, and project_name under portfolio."""

from __future__ import annotations

import pytest

from herald.campaigns.schemas.filters import (
    MAX_FILTERS,
    OPERATORS_BY_DATA_TYPE,
    FilterDataType,
    FilterOperator,
)
from herald.campaigns.validation import Stage

from .payloads import (
    ALL_FEATURES,
    EMAIL_EVENT_TRIGGERED,
    NO_FEATURES,
    PUSH_EVENT_TRIGGERED,
    PUSH_LOCATION_TRIGGERED,
    PUSH_ONE_TIME,
    Case,
    check,
    codes,
    fails,
    passes,
    problems,
    variant,
)

C = Stage.DRAFT_CREATE

# ---- operators by data type (spec table), every combination --------------------------------------

_COMBINATIONS = [(data_type, operator) for data_type in FilterDataType for operator in FilterOperator]
_F = "segmentation_details.included_filters.filters.0"


@pytest.mark.parametrize(
    ("data_type", "operator"), _COMBINATIONS, ids=[f"{d.value}-{o.value}" for d, o in _COMBINATIONS]
)
def test_operator_must_fit_the_data_type(data_type: FilterDataType, operator: FilterOperator) -> None:
    raw = variant(
        PUSH_ONE_TIME,
        {f"{_F}.data_type": data_type.value, f"{_F}.operator": operator.value, f"{_F}.value": "x"},
    )
    found = codes(problems(raw, C))
    allowed = operator in OPERATORS_BY_DATA_TYPE[data_type]
    assert (("INVALID_ENUM_VALUE", f"{_F}.operator") not in found) is allowed


def test_operator_table_matches_the_spec() -> None:
    table = {
        data_type.value: sorted(op.value for op in ops) for data_type, ops in OPERATORS_BY_DATA_TYPE.items()
    }
    assert table == {
        "bool": ["exists", "is"],
        "double": ["between", "exists", "greaterThan", "in", "lessThan"],
        "string": [
            "contains",
            "containsInTheFollowing",
            "endsWithInTheFollowing",
            "exists",
            "in",
            "is",
            "startWithInTheFollowing",
        ],
        "datetime": ["after", "before", "between", "exists", "inTheLast", "inTheNext", "on", "today"],
    }


_NESTED = "segmentation_details.included_filters.filters.1.attributes.filters.0"
_TRIGGER_F = "trigger_condition.included_filters.filters.0"
_SEGMENT = {"filter_type": "custom_segments", "name": "VIP", "id": "vip"}


@pytest.mark.parametrize(
    "case",
    [
        fails(
            "nested-operator",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{_NESTED}.operator"),
            {f"{_NESTED}.operator": "contains"},
            stage=C,
        ),
        fails(
            "trigger-operator",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{_TRIGGER_F}.operator"),
            {f"{_TRIGGER_F}.operator": "between"},
            stage=C,
        ),
        fails(
            "excluded-operator",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", "segmentation_details.excluded_filters.filters.0.operator"),
            {
                "segmentation_details.excluded_filters.filters.0": {
                    "filter_type": "user_attributes",
                    "data_type": "bool",
                    "name": "x",
                    "operator": "in",
                    "value": True,
                    "project_name": "p",
                }
            },
            stage=C,
        ),
        # `value` is needed except for presence tests
        fails(
            "value-missing",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{_F}.value"),
            drop=(f"{_F}.value",),
            stage=C,
        ),
        passes("exists-without-value", PUSH_ONE_TIME, {f"{_F}.operator": "exists"}, drop=(f"{_F}.value",)),
        passes(
            "today-without-value",
            PUSH_ONE_TIME,
            {f"{_F}.data_type": "datetime", f"{_F}.operator": "today"},
            drop=(f"{_F}.value",),
        ),
        # portfolio: project_name on every user attribute filter, nested ones too
        fails(
            "portfolio-top-level",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{_F}.project_name"),
            drop=(f"{_F}.project_name",),
            stage=C,
        ),
        fails(
            "portfolio-nested",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{_NESTED}.project_name"),
            drop=(f"{_NESTED}.project_name",),
            stage=C,
        ),
        fails(
            "portfolio-trigger",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{_TRIGGER_F}.project_name"),
            drop=(f"{_TRIGGER_F}.project_name",),
            stage=C,
        ),
        fails(
            "portfolio-trigger-nested",
            EMAIL_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{_TRIGGER_F}.attributes.filters.0.project_name"),
            {f"{_TRIGGER_F}.attributes.filters.0.project_name": ""},
        ),
        fails(
            "portfolio-secondary",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", "trigger_condition.secondary_included_filters.filters.0.project_name"),
            {
                "trigger_condition.secondary_included_filters.filters.0": {
                    "filter_type": "user_attributes",
                    "data_type": "bool",
                    "name": "vip",
                    "operator": "is",
                    "value": True,
                }
            },
            stage=C,
        ),
        passes(
            "no-portfolio-no-project",
            PUSH_ONE_TIME,
            drop=(f"{_F}.project_name", f"{_NESTED}.project_name"),
            features=ALL_FEATURES - {"portfolio"},
        ),
        passes("custom-segments-need-no-project", PUSH_ONE_TIME),
        # A text to look for is at most as long as a stored value can be (10,000 characters):
        # longer, it matched nothing, and PostgreSQL's regular expression for it took minutes.
        passes(
            "text-as-long-as-a-stored-value",
            PUSH_ONE_TIME,
            {f"{_F}.data_type": "string", f"{_F}.operator": "contains", f"{_F}.value": "v" * 10_000},
        ),
        fails(
            "text-longer-than-any-stored-value",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{_F}.value"),
            {f"{_F}.data_type": "string", f"{_F}.operator": "contains", f"{_F}.value": "v" * 10_001},
            stage=C,
        ),
        fails(
            "listed-text-longer-than-any-stored-value",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{_F}.value.1"),
            {f"{_F}.data_type": "string", f"{_F}.operator": "in", f"{_F}.value": ["a", "v" * 10_001]},
            stage=C,
        ),
        # Herald's limit: a group holds at most MAX_FILTERS filters (SQLite nests ~1,000 terms at most)
        passes(
            "filters-at-the-limit",
            PUSH_ONE_TIME,
            {"segmentation_details.included_filters.filters": [_SEGMENT] * MAX_FILTERS},
        ),
        fails(
            "filters-over-the-limit",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", "segmentation_details.included_filters.filters"),
            {"segmentation_details.included_filters.filters": [_SEGMENT] * (MAX_FILTERS + 1)},
            stage=C,
        ),
        fails(
            "nested-filters-over-the-limit",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", "segmentation_details.included_filters.filters.1.attributes.filters"),
            {
                "segmentation_details.included_filters.filters.1.attributes.filters": [
                    {"filter_type": "user_attributes", "data_type": "bool", "name": "x", "operator": "exists"}
                ]
                * (MAX_FILTERS + 1)
            },
            stage=C,
        ),
    ],
)
def test_filter_rules(case: Case) -> None:
    check(case)


def test_portfolio_is_required_at_publish_too_and_only_with_the_feature() -> None:
    raw = variant(PUSH_ONE_TIME, drop=(f"{_F}.project_name",))
    assert ("REQUIRED_FIELD_MISSING", f"{_F}.project_name") in codes(problems(raw))
    assert ("REQUIRED_FIELD_MISSING", f"{_F}.project_name") not in codes(problems(raw, features=NO_FEATURES))
