"""Who receives a campaign: minimum audience, control group, and the feature-gated audience cap."""

from __future__ import annotations

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    ALL_FEATURES,
    EMAIL_BUSINESS_EVENT,
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    EMAIL_PERIODIC,
    PUSH_BROADCAST_LIVE_ACTIVITY,
    PUSH_DEVICE_TRIGGERED,
    PUSH_EVENT_TRIGGERED,
    PUSH_ONE_TIME,
    PUSH_PERIODIC,
    Case,
    check,
    fails,
    passes,
    problems,
)

C = Stage.DRAFT_CREATE
SEG = "segmentation_details"
CG = "control_group_details"
AL = "campaign_audience_limit"
NO_LIMIT_FEATURE = ALL_FEATURES - {"campaign_audience_limit"}
_ENABLED = {"is_campaign_audience_limit_enabled": True, "metric": "SENT", "frequency": "TOTAL", "limit": 10}


@pytest.mark.parametrize(
    "case",
    [
        # minimum audience: all users, or at least one included filter
        fails(
            "no-audience",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{SEG}.included_filters"),
            {SEG: {"is_all_user_campaign": False}},
            stage=C,
        ),
        fails(
            "empty-included",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{SEG}.included_filters"),
            {f"{SEG}.included_filters.filters": []},
            stage=C,
        ),
        fails(
            "only-excluded",
            EMAIL_PERIODIC,
            ("REQUIRED_FIELD_MISSING", f"{SEG}.included_filters"),
            {SEG: {"excluded_filters": PUSH_ONE_TIME[SEG]["excluded_filters"]}},
            stage=C,
        ),
        fails("no-segmentation", EMAIL_ONE_TIME_PROMOTIONAL, ("REQUIRED_FIELD_MISSING", SEG), drop=(SEG,)),
        fails(
            "live-activity-no-segmentation",
            PUSH_BROADCAST_LIVE_ACTIVITY,
            ("REQUIRED_FIELD_MISSING", SEG),
            drop=(SEG,),
        ),
        # a business event starts a run to the campaign's segment, as a one-time campaign does
        fails(
            "business-event-no-audience",
            EMAIL_BUSINESS_EVENT,
            ("REQUIRED_FIELD_MISSING", f"{SEG}.included_filters"),
            {SEG: {}},
            stage=C,
        ),
        # without one it is sent to every user: contract C4 asks the non-triggered types only
        passes("business-event-no-segmentation", EMAIL_BUSINESS_EVENT, drop=(SEG,)),
        passes("all-users", PUSH_ONE_TIME, {SEG: {"is_all_user_campaign": True}}),
        passes("one-filter", PUSH_ONE_TIME),
        passes("triggered-needs-no-segment", PUSH_EVENT_TRIGGERED, {SEG: {"is_all_user_campaign": False}}),
        passes("device-needs-no-segment", PUSH_DEVICE_TRIGGERED),
        fails(
            "opt-out-not-bool",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{SEG}.send_campaign_to_opt_out_users"),
            {f"{SEG}.send_campaign_to_opt_out_users": "false"},
            stage=C,
        ),
        # control group: percentage 0-100, required when enabled
        fails(
            "enabled-no-percentage",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{CG}.campaign_control_group_percentage"),
            drop=(f"{CG}.campaign_control_group_percentage",),
            stage=C,
        ),
        fails(
            "percentage-101",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{CG}.campaign_control_group_percentage"),
            {f"{CG}.campaign_control_group_percentage": 101},
            stage=C,
        ),
        fails(
            "percentage-negative",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{CG}.campaign_control_group_percentage"),
            {f"{CG}.campaign_control_group_percentage": -1},
            stage=C,
        ),
        fails(
            "percentage-fraction",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{CG}.campaign_control_group_percentage"),
            {f"{CG}.campaign_control_group_percentage": 12.5},
            stage=C,
        ),
        passes("percentage-0", PUSH_ONE_TIME, {f"{CG}.campaign_control_group_percentage": 0}),
        passes("percentage-100", PUSH_ONE_TIME, {f"{CG}.campaign_control_group_percentage": 100}),
        passes("disabled-no-percentage", EMAIL_ONE_TIME_PROMOTIONAL),
        # campaign_audience_limit: feature-gated
        fails(
            "limit-feature-off",
            PUSH_ONE_TIME,
            ("FEATURE_NOT_ENABLED", AL),
            features=NO_LIMIT_FEATURE,
            stage=C,
        ),
        fails(
            "limit-feature-off-even-disabled",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("FEATURE_NOT_ENABLED", AL),
            features=NO_LIMIT_FEATURE,
            stage=C,
        ),
        fails(
            "limit-feature-off-at-publish",
            PUSH_PERIODIC,
            ("FEATURE_NOT_ENABLED", AL),
            features=NO_LIMIT_FEATURE,
        ),
        passes("no-limit-feature-off", PUSH_ONE_TIME, drop=(AL,), features=NO_LIMIT_FEATURE),
        # all or nothing
        fails(
            "enabled-no-metric",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{AL}.metric"),
            drop=(f"{AL}.metric",),
            stage=C,
        ),
        fails(
            "enabled-no-frequency",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{AL}.frequency"),
            drop=(f"{AL}.frequency",),
            stage=C,
        ),
        fails(
            "enabled-no-limit",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{AL}.limit"),
            drop=(f"{AL}.limit",),
            stage=C,
        ),
        fails(
            "disabled-with-limit",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("UNKNOWN_FIELD", f"{AL}.limit"),
            {f"{AL}.limit": 5},
            stage=C,
        ),
        fails(
            "disabled-with-metric",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("UNKNOWN_FIELD", f"{AL}.metric"),
            {f"{AL}.metric": "SENT"},
            stage=C,
        ),
        fails(
            "flag-missing",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{AL}.is_campaign_audience_limit_enabled"),
            drop=(f"{AL}.is_campaign_audience_limit_enabled",),
            stage=C,
        ),
        # metric SENT only; INSTANCE only for PERIODIC Push; not for live activities
        fails(
            "metric-opened",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{AL}.metric"),
            {f"{AL}.metric": "OPENED"},
            stage=C,
        ),
        fails(
            "instance-one-time-push",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{AL}.frequency"),
            {f"{AL}.frequency": "INSTANCE"},
            stage=C,
        ),
        fails(
            "instance-periodic-email",
            EMAIL_PERIODIC,
            ("INVALID_ENUM_VALUE", f"{AL}.frequency"),
            {f"{AL}.frequency": "INSTANCE"},
            stage=C,
        ),
        fails(
            "instance-event-push",
            PUSH_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{AL}.frequency"),
            {AL: {**_ENABLED, "frequency": "INSTANCE"}},
            stage=C,
        ),
        passes("instance-periodic-push", PUSH_PERIODIC),
        passes("total-event-email", EMAIL_EVENT_TRIGGERED, {AL: _ENABLED}),
        fails("live-activity", PUSH_BROADCAST_LIVE_ACTIVITY, ("UNKNOWN_FIELD", AL), {AL: _ENABLED}, stage=C),
        # limit 1 .. 9,999,999,999
        fails("limit-0", PUSH_ONE_TIME, ("OUT_OF_RANGE", f"{AL}.limit"), {f"{AL}.limit": 0}, stage=C),
        fails(
            "limit-too-big",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{AL}.limit"),
            {f"{AL}.limit": 10_000_000_000},
            stage=C,
        ),
        fails("limit-string", PUSH_ONE_TIME, ("INVALID_TYPE", f"{AL}.limit"), {f"{AL}.limit": "10"}, stage=C),
        passes("limit-1", PUSH_ONE_TIME, {f"{AL}.limit": 1}),
        passes("limit-max", EMAIL_PERIODIC),
    ],
)
def test_audience_rules(case: Case) -> None:
    check(case)


def test_feature_not_enabled_is_the_only_audience_limit_problem() -> None:
    raw = {**PUSH_ONE_TIME, AL: {"is_campaign_audience_limit_enabled": True, "frequency": "INSTANCE"}}
    found = problems(raw, C, NO_LIMIT_FEATURE)
    assert [(p.code, p.target) for p in found] == [("FEATURE_NOT_ENABLED", AL)]
    assert "not enabled for this workspace" in found[0].message
