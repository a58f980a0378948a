"""advanced (Push only), utm_params and conversion goal rules."""

from __future__ import annotations

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_ONE_TIME,
    Case,
    check,
    fails,
    passes,
)

C = Stage.DRAFT_CREATE
EXP = "advanced.expiration_settings"
IOS = "advanced.platform_level_priority.ios_specific_priority"
UTM = "utm_params"
GOAL = "conversion_goal_details.goals.0"


@pytest.mark.parametrize(
    "case",
    [
        # advanced: Push only (the Email model has no such component)
        fails(
            "email-advanced",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("UNKNOWN_FIELD", "advanced"),
            {"advanced": {}},
            stage=C,
        ),
        # remove_from_inbox_after_type: DAY only
        fails(
            "inbox-hour",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{EXP}.remove_from_inbox_after_type"),
            {f"{EXP}.remove_from_inbox_after_type": "HOUR"},
            stage=C,
        ),
        fails(
            "inbox-week",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{EXP}.remove_from_inbox_after_type"),
            {f"{EXP}.remove_from_inbox_after_type": "WEEK"},
            stage=C,
        ),
        passes("expire-hour", PUSH_ONE_TIME, {f"{EXP}.expire_notification_after_type": "HOUR"}),
        fails(
            "expire-minute",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{EXP}.expire_notification_after_type"),
            {f"{EXP}.expire_notification_after_type": "MINUTE"},
            stage=C,
        ),
        fails(
            "expire-value-without-type",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{EXP}.expire_notification_after_type"),
            drop=(f"{EXP}.expire_notification_after_type",),
            stage=C,
        ),
        fails(
            "inbox-type-without-value",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{EXP}.remove_from_inbox_after_value"),
            drop=(f"{EXP}.remove_from_inbox_after_value",),
            stage=C,
        ),
        # iOS priority values
        fails(
            "apns-2",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{IOS}.apns_priority"),
            {f"{IOS}.apns_priority": "2"},
            stage=C,
        ),
        fails(
            "apns-int",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{IOS}.apns_priority"),
            {f"{IOS}.apns_priority": 10},
            stage=C,
        ),
        passes("apns-5", PUSH_ONE_TIME, {f"{IOS}.apns_priority": "5"}),
        fails(
            "relevance-0.7",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{IOS}.relevance_score"),
            {f"{IOS}.relevance_score": 0.7},
            stage=C,
        ),
        fails(
            "relevance-text",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{IOS}.relevance_score"),
            {f"{IOS}.relevance_score": "1"},
            stage=C,
        ),
        passes("relevance-half", PUSH_ONE_TIME, {f"{IOS}.relevance_score": 0.5}),
        passes("relevance-zero", PUSH_ONE_TIME, {f"{IOS}.relevance_score": 0}),
        passes("interruption-upper-snake", PUSH_ONE_TIME, {f"{IOS}.interruption_level": "CRITICAL"}),
        fails(
            "interruption-unknown",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{IOS}.interruption_level"),
            {f"{IOS}.interruption_level": "Loud"},
            stage=C,
        ),
        fails(
            "android-priority-text",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", "advanced.platform_level_priority.android_specific_priority.send_with_priority"),
            {"advanced.platform_level_priority.android_specific_priority.send_with_priority": "high"},
            stage=C,
        ),
        # utm_params: source and medium required; up to 5 custom keys, each prefixed utm_
        fails(
            "utm-no-source",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{UTM}.utm_source"),
            drop=(f"{UTM}.utm_source",),
            stage=C,
        ),
        fails(
            "utm-no-medium",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{UTM}.utm_medium"),
            drop=(f"{UTM}.utm_medium",),
            stage=C,
        ),
        fails("utm-unprefixed", PUSH_ONE_TIME, ("UNKNOWN_FIELD", f"{UTM}.ref"), {f"{UTM}.ref": "x"}, stage=C),
        fails(
            "utm-six-custom",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", UTM),
            {f"{UTM}.utm_{n}": "v" for n in range(6)},
            stage=C,
        ),
        passes(
            "utm-five-custom", PUSH_ONE_TIME, {f"{UTM}.utm_{n}": "v" for n in range(4)}
        ),  # + utm_id already there
        fails(
            "utm-custom-not-text",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{UTM}.utm_id"),
            {f"{UTM}.utm_id": 7},
            stage=C,
        ),
        fails(
            "utm-term-not-text",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{UTM}.utm_term"),
            {f"{UTM}.utm_term": ["a"]},
            stage=C,
        ),
        passes(
            "utm-optional-named",
            EMAIL_EVENT_TRIGGERED,
            {
                UTM: {
                    "utm_source": "s",
                    "utm_medium": "m",
                    "utm_campaign": "c",
                    "utm_term": "t",
                    "utm_content": "x",
                }
            },
        ),
        # conversion goals
        fails(
            "between-without-upper-bound",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{GOAL}.goal_event_attribute.value1"),
            drop=(f"{GOAL}.goal_event_attribute.value1",),
            stage=C,
        ),
        passes(
            "is-without-upper-bound",
            PUSH_ONE_TIME,
            {f"{GOAL}.goal_event_attribute.condition": "is"},
            drop=(f"{GOAL}.goal_event_attribute.value1",),
        ),
        fails(
            "goal-without-event",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{GOAL}.goal_event_name"),
            drop=(f"{GOAL}.goal_event_name",),
            stage=C,
        ),
        fails(
            "attribution-zero",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", "conversion_goal_details.attribution_window_in_hours"),
            {"conversion_goal_details.attribution_window_in_hours": 0},
            stage=C,
        ),
        passes(
            "goal-array-object-filters",
            PUSH_ONE_TIME,
            {
                f"{GOAL}.goal_event_attribute": {
                    "name": "items",
                    "data_type": "ARRAY_OBJECT",
                    "condition": "contains",
                    "array_filter_type": "any",
                    "filters": [{"name": "sku", "value": "A1"}],
                }
            },
        ),
    ],
)
def test_advanced_utm_and_goal_rules(case: Case) -> None:
    check(case)
