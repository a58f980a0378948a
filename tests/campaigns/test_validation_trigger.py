"""trigger_condition rules and the filter rules (operators by data type, values, portfolio)."""

from __future__ import annotations

from typing import Any

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    EMAIL_BUSINESS_EVENT,
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_BROADCAST_LIVE_ACTIVITY,
    PUSH_DEVICE_TRIGGERED,
    PUSH_EVENT_TRIGGERED,
    PUSH_LOCATION_TRIGGERED,
    PUSH_ONE_TIME,
    PUSH_PERIODIC,
    Case,
    check,
    fails,
    passes,
)

C = Stage.DRAFT_CREATE
T = "trigger_condition"
IDO = {
    "min_delay_value": 30,
    "min_delay_granularity": "MINUTES",
    "max_delay_value": 4,
    "max_delay_granularity": "HOURS",
}
_CITY_FILTER = {
    "filter_type": "user_attributes",
    "data_type": "string",
    "category": "Tracked Standard Attribute",
    "name": "city",
    "operator": "in",
    "value": ["Pune"],
    "project_name": "retail-app",
}
_EVENT_FILTER: dict[str, Any] = {
    "filter_operator": "and",
    "filters": [{"filter_type": "actions", "action_name": "App Opened"}],
}


@pytest.mark.parametrize(
    "case",
    [
        # required (at publish) for Push EVENT/DEVICE/LOCATION and Email EVENT
        fails("push-event-without", PUSH_EVENT_TRIGGERED, ("REQUIRED_FIELD_MISSING", T), drop=(T,)),
        fails("push-device-without", PUSH_DEVICE_TRIGGERED, ("REQUIRED_FIELD_MISSING", T), drop=(T,)),
        fails("push-location-without", PUSH_LOCATION_TRIGGERED, ("REQUIRED_FIELD_MISSING", T), drop=(T,)),
        fails("email-event-without", EMAIL_EVENT_TRIGGERED, ("REQUIRED_FIELD_MISSING", T), drop=(T,)),
        passes("draft-without", PUSH_EVENT_TRIGGERED, drop=(T,), stage=C),
        passes("live-activity-without", PUSH_BROADCAST_LIVE_ACTIVITY),
        # not used for BUSINESS_EVENT_TRIGGERED, ONE_TIME, PERIODIC: an error if sent
        fails(
            "one-time-with",
            PUSH_ONE_TIME,
            ("UNKNOWN_FIELD", T),
            {T: {"included_filters": _EVENT_FILTER}},
            stage=C,
        ),
        fails(
            "periodic-with", PUSH_PERIODIC, ("UNKNOWN_FIELD", T), {T: {"trigger_delay_type": "ASAP"}}, stage=C
        ),
        fails("business-event-with", EMAIL_BUSINESS_EVENT, ("UNKNOWN_FIELD", T), {T: {}}, stage=C),
        fails("email-one-time-with", EMAIL_ONE_TIME_PROMOTIONAL, ("UNKNOWN_FIELD", T), {T: {}}),
        # EVENT_TRIGGERED needs a filter to trigger on (publish)
        fails(
            "event-empty-filters",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.included_filters"),
            {f"{T}.included_filters.filters": []},
        ),
        fails(
            "event-no-included",
            EMAIL_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.included_filters"),
            drop=(f"{T}.included_filters",),
        ),
        # ... and one an event can meet: an action done
        fails(
            "event-attributes-only",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.included_filters"),
            {f"{T}.included_filters": {"filter_operator": "and", "filters": [_CITY_FILTER]}},
        ),
        fails(
            "event-action-not-done-only",
            EMAIL_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.included_filters"),
            {
                f"{T}.included_filters": {
                    "filter_operator": "and",
                    "filters": [{"filter_type": "actions", "action_name": "App Opened", "executed": False}],
                }
            },
        ),
        # a device trigger is evaluated as an event trigger: the same two rules
        fails(
            "device-no-filter",
            PUSH_DEVICE_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.included_filters"),
            {T: {}},
        ),
        fails(
            "device-attributes-only",
            PUSH_DEVICE_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.included_filters"),
            {f"{T}.included_filters": {"filter_operator": "and", "filters": [_CITY_FILTER]}},
        ),
        passes(
            "event-attribute-and-action",
            PUSH_EVENT_TRIGGERED,
            {
                f"{T}.included_filters": {
                    "filter_operator": "or",
                    "filters": [_CITY_FILTER, *_EVENT_FILTER["filters"]],
                }
            },
        ),
        passes(
            "event-empty-filters-in-draft",
            PUSH_EVENT_TRIGGERED,
            {f"{T}.included_filters.filters": []},
            stage=C,
        ),
        # a delay of at most ten years
        fails(
            "delay-too-long",
            PUSH_EVENT_TRIGGERED,
            ("OUT_OF_RANGE", f"{T}.trigger_delay_value"),
            {f"{T}.trigger_delay_value": 99999999999, f"{T}.trigger_delay_granularity": "DAYS"},
            stage=C,
        ),
        # DELAY needs value, granularity and relation
        fails(
            "delay-no-value",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.trigger_delay_value"),
            drop=(f"{T}.trigger_delay_value",),
            stage=C,
        ),
        fails(
            "delay-no-granularity",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.trigger_delay_granularity"),
            drop=(f"{T}.trigger_delay_granularity",),
            stage=C,
        ),
        fails(
            "delay-no-relation",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.trigger_relation"),
            drop=(f"{T}.trigger_relation",),
            stage=C,
        ),
        fails(
            "delay-bad-granularity",
            PUSH_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{T}.trigger_delay_granularity"),
            {f"{T}.trigger_delay_granularity": "WEEKS"},
            stage=C,
        ),
        fails(
            "delay-negative",
            PUSH_EVENT_TRIGGERED,
            ("OUT_OF_RANGE", f"{T}.trigger_delay_value"),
            {f"{T}.trigger_delay_value": -1},
            stage=C,
        ),
        passes(
            "asap-without-delay-fields",
            PUSH_EVENT_TRIGGERED,
            {f"{T}.trigger_delay_type": "ASAP"},
            drop=(f"{T}.trigger_delay_value", f"{T}.trigger_delay_granularity", f"{T}.trigger_relation"),
        ),
        # BEFORE needs trigger_attr.name
        fails(
            "before-without-attr",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.trigger_attr.name"),
            {f"{T}.trigger_relation": "BEFORE"},
            stage=C,
        ),
        fails(
            "before-with-empty-attr",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.trigger_attr.name"),
            {f"{T}.trigger_relation": "BEFORE", f"{T}.trigger_attr": {}},
            stage=C,
        ),
        fails(
            "before-with-empty-label",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.trigger_attr.name"),
            {f"{T}.trigger_relation": "BEFORE", f"{T}.trigger_attr": ""},
            stage=C,
        ),
        passes(
            "before-with-attr-object",
            PUSH_EVENT_TRIGGERED,
            {f"{T}.trigger_relation": "BEFORE", f"{T}.trigger_attr": {"name": "subscription_expiry"}},
        ),
        passes(
            "before-with-attr-label",
            PUSH_EVENT_TRIGGERED,
            {f"{T}.trigger_relation": "BEFORE", f"{T}.trigger_attr": "subscription_expiry"},
        ),
        fails(
            "attr-unknown-key",
            PUSH_EVENT_TRIGGERED,
            ("UNKNOWN_FIELD", f"{T}.trigger_attr.type"),
            {f"{T}.trigger_attr": {"name": "x", "type": "datetime"}},
            stage=C,
        ),
        # INTELLIGENT_DELAY: Push only, needs intelligent_delay_optimization
        fails(
            "email-intelligent-delay",
            EMAIL_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{T}.trigger_delay_type"),
            {f"{T}.trigger_delay_type": "INTELLIGENT_DELAY"},
            stage=C,
        ),
        fails(
            "email-optimization",
            EMAIL_EVENT_TRIGGERED,
            ("UNKNOWN_FIELD", f"{T}.intelligent_delay_optimization"),
            {f"{T}.intelligent_delay_optimization": IDO},
            stage=C,
        ),
        fails(
            "intelligent-without-optimization",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.intelligent_delay_optimization"),
            {f"{T}.trigger_delay_type": "INTELLIGENT_DELAY"},
            stage=C,
        ),
        passes(
            "intelligent-with-optimization",
            PUSH_EVENT_TRIGGERED,
            {f"{T}.trigger_delay_type": "INTELLIGENT_DELAY", f"{T}.intelligent_delay_optimization": IDO},
        ),
        fails(
            "optimization-min-above-max",
            PUSH_EVENT_TRIGGERED,
            ("OUT_OF_RANGE", f"{T}.intelligent_delay_optimization.max_delay_value"),
            {
                f"{T}.trigger_delay_type": "INTELLIGENT_DELAY",
                f"{T}.intelligent_delay_optimization": {
                    **IDO,
                    "min_delay_value": 5,
                    "min_delay_granularity": "HOURS",
                },
            },
            stage=C,
        ),
        fails(
            "optimization-max-too-long",
            PUSH_EVENT_TRIGGERED,
            ("OUT_OF_RANGE", f"{T}.intelligent_delay_optimization.max_delay_value"),
            {
                f"{T}.trigger_delay_type": "INTELLIGENT_DELAY",
                f"{T}.intelligent_delay_optimization": {
                    **IDO,
                    "max_delay_value": 99999999999,
                    "max_delay_granularity": "DAYS",
                },
            },
            stage=C,
        ),
        fails(
            "optimization-min-in-days",
            PUSH_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{T}.intelligent_delay_optimization.min_delay_granularity"),
            {f"{T}.intelligent_delay_optimization": {**IDO, "min_delay_granularity": "DAYS"}},
            stage=C,
        ),
        fails(
            "optimization-max-in-minutes",
            PUSH_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{T}.intelligent_delay_optimization.max_delay_granularity"),
            {f"{T}.intelligent_delay_optimization": {**IDO, "max_delay_granularity": "MINUTES"}},
            stage=C,
        ),
        fails(
            "optimization-incomplete",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{T}.intelligent_delay_optimization.max_delay_value"),
            {
                f"{T}.intelligent_delay_optimization": {
                    "min_delay_value": 1,
                    "min_delay_granularity": "HOURS",
                    "max_delay_granularity": "DAYS",
                }
            },
            stage=C,
        ),
        # DEVICE_TRIGGERED carries no delay (publish)
        fails(
            "device-with-delay",
            PUSH_DEVICE_TRIGGERED,
            ("UNKNOWN_FIELD", f"{T}.trigger_delay_type"),
            {f"{T}.trigger_delay_type": "ASAP"},
        ),
        fails(
            "device-with-relation",
            PUSH_DEVICE_TRIGGERED,
            ("UNKNOWN_FIELD", f"{T}.trigger_relation"),
            {f"{T}.trigger_relation": "AFTER"},
        ),
        passes(
            "device-with-delay-in-draft", PUSH_DEVICE_TRIGGERED, {f"{T}.trigger_delay_type": "ASAP"}, stage=C
        ),
    ],
)
def test_trigger_rules(case: Case) -> None:
    check(case)
