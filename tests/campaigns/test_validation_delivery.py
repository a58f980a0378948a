"""delivery_controls: which fields apply to which delivery type, and feature-gated queuing."""

from __future__ import annotations

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    ALL_FEATURES,
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
    problems,
)

C = Stage.DRAFT_CREATE
DC = "delivery_controls"
NO_QUEUING = ALL_FEATURES - {"queuing"}


@pytest.mark.parametrize(
    "case",
    [
        # campaign_throttle_rpm: not for device-, location- and event-triggered
        fails(
            "throttle-event",
            PUSH_EVENT_TRIGGERED,
            ("UNKNOWN_FIELD", f"{DC}.campaign_throttle_rpm"),
            {f"{DC}.campaign_throttle_rpm": 100},
            stage=C,
        ),
        fails(
            "throttle-device",
            PUSH_DEVICE_TRIGGERED,
            ("UNKNOWN_FIELD", f"{DC}.campaign_throttle_rpm"),
            {f"{DC}.campaign_throttle_rpm": 100},
            stage=C,
        ),
        fails(
            "throttle-location",
            PUSH_LOCATION_TRIGGERED,
            ("UNKNOWN_FIELD", f"{DC}.campaign_throttle_rpm"),
            {f"{DC}.campaign_throttle_rpm": 100},
            stage=C,
        ),
        passes("throttle-one-time", PUSH_ONE_TIME),
        passes("throttle-live-activity", PUSH_BROADCAST_LIVE_ACTIVITY, {DC: {"campaign_throttle_rpm": 100}}),
        # device-triggered only
        fails(
            "max-time-one-time",
            PUSH_ONE_TIME,
            ("UNKNOWN_FIELD", f"{DC}.max_time_to_show_message_of_same_camapign"),
            {f"{DC}.max_time_to_show_message_of_same_camapign": "4"},
            stage=C,
        ),
        fails(
            "sync-expiry-event",
            PUSH_EVENT_TRIGGERED,
            ("UNKNOWN_FIELD", f"{DC}.expiry_time_of_sync_data_in_hour"),
            {f"{DC}.expiry_time_of_sync_data_in_hour": "4"},
            stage=C,
        ),
        fails(
            "offline-location",
            PUSH_LOCATION_TRIGGERED,
            ("UNKNOWN_FIELD", f"{DC}.send_message_in_offline_mode"),
            {f"{DC}.send_message_in_offline_mode": True},
            stage=C,
        ),
        passes("device-fields-on-device", PUSH_DEVICE_TRIGGERED),
        fails(
            "device-hours-not-numeric",
            PUSH_DEVICE_TRIGGERED,
            ("INVALID_TYPE", f"{DC}.expiry_time_of_sync_data_in_hour"),
            {f"{DC}.expiry_time_of_sync_data_in_hour": "two days"},
            stage=C,
        ),
        fails(
            "device-hours-as-number",
            PUSH_DEVICE_TRIGGERED,
            ("INVALID_TYPE", f"{DC}.max_time_to_show_message_of_same_camapign"),
            {f"{DC}.max_time_to_show_message_of_same_camapign": 24},
            stage=C,
        ),
        # location-triggered only
        fails(
            "send-limit-one-time",
            PUSH_ONE_TIME,
            ("UNKNOWN_FIELD", f"{DC}.send_limit_value"),
            {f"{DC}.send_limit_value": "1"},
            stage=C,
        ),
        fails(
            "send-window-event",
            PUSH_EVENT_TRIGGERED,
            ("UNKNOWN_FIELD", f"{DC}.send_limit_granularity_in_hours"),
            {f"{DC}.send_limit_granularity_in_hours": "1"},
            stage=C,
        ),
        passes("send-limit-location", PUSH_LOCATION_TRIGGERED),
        # a count per a number of hours: neither without the other
        fails(
            "send-limit-without-hours",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{DC}.send_limit_granularity_in_hours"),
            drop=(f"{DC}.send_limit_granularity_in_hours",),
            stage=C,
        ),
        fails(
            "send-hours-without-limit",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{DC}.send_limit_value"),
            drop=(f"{DC}.send_limit_value",),
            stage=C,
        ),
        # event- (and device-) triggered only
        fails(
            "global-delay-one-time",
            PUSH_ONE_TIME,
            ("UNKNOWN_FIELD", f"{DC}.ignore_global_minimum_delay"),
            {f"{DC}.ignore_global_minimum_delay": True},
            stage=C,
        ),
        fails(
            "min-delay-periodic",
            PUSH_PERIODIC,
            ("UNKNOWN_FIELD", f"{DC}.minimum_delay_between_two_notification_in_hour"),
            {f"{DC}.minimum_delay_between_two_notification_in_hour": 3},
            stage=C,
        ),
        passes("min-delay-event", PUSH_EVENT_TRIGGERED),
        passes("min-delay-device", PUSH_DEVICE_TRIGGERED),
        # bypass_dnd required for event-triggered (publish)
        fails(
            "event-no-bypass-dnd",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{DC}.bypass_dnd"),
            drop=(f"{DC}.bypass_dnd",),
        ),
        fails(
            "event-no-delivery-controls",
            PUSH_EVENT_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{DC}.bypass_dnd"),
            drop=(DC,),
        ),
        passes("event-no-bypass-dnd-in-draft", PUSH_EVENT_TRIGGERED, drop=(f"{DC}.bypass_dnd",), stage=C),
        passes("one-time-no-bypass-dnd", PUSH_ONE_TIME, drop=(f"{DC}.bypass_dnd",)),
        # Email carries only its five fields
        fails(
            "email-queuing",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("UNKNOWN_FIELD", f"{DC}.queuing_enabled"),
            {f"{DC}.queuing_enabled": True},
            stage=C,
        ),
        fails(
            "email-offline",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("UNKNOWN_FIELD", f"{DC}.send_message_in_offline_mode"),
            {f"{DC}.send_message_in_offline_mode": True},
            stage=C,
        ),
        passes(
            "email-five-fields",
            EMAIL_ONE_TIME_PROMOTIONAL,
            {
                DC: {
                    "bypass_dnd": True,
                    "campaign_throttle_rpm": 10,
                    "count_for_frequency_capping": True,
                    "ignore_frequency_capping": False,
                    "minimum_delay_between_two_notification_in_hour": 1,
                }
            },
        ),
        # queuing: feature-gated; queue_duration > 0 when enabled
        fails(
            "queuing-feature-off",
            PUSH_PERIODIC,
            ("FEATURE_NOT_ENABLED", f"{DC}.queuing_enabled"),
            features=NO_QUEUING,
            stage=C,
        ),
        fails(
            "queue-duration-feature-off",
            PUSH_PERIODIC,
            ("FEATURE_NOT_ENABLED", f"{DC}.queue_duration"),
            features=NO_QUEUING,
            stage=C,
        ),
        fails(
            "queuing-false-feature-off",
            PUSH_PERIODIC,
            ("FEATURE_NOT_ENABLED", f"{DC}.queuing_enabled"),
            {f"{DC}.queuing_enabled": False},
            drop=(f"{DC}.queue_duration",),
            features=NO_QUEUING,
            stage=C,
        ),
        passes(
            "no-queuing-feature-off",
            PUSH_PERIODIC,
            drop=(f"{DC}.queuing_enabled", f"{DC}.queue_duration"),
            features=NO_QUEUING,
        ),
        fails(
            "queue-duration-zero",
            PUSH_PERIODIC,
            ("OUT_OF_RANGE", f"{DC}.queue_duration"),
            {f"{DC}.queue_duration": 0},
            stage=C,
        ),
        fails(
            "queue-duration-negative",
            PUSH_PERIODIC,
            ("OUT_OF_RANGE", f"{DC}.queue_duration"),
            {f"{DC}.queue_duration": -2},
            stage=C,
        ),
        fails(
            "queue-duration-missing",
            PUSH_PERIODIC,
            ("REQUIRED_FIELD_MISSING", f"{DC}.queue_duration"),
            drop=(f"{DC}.queue_duration",),
            stage=C,
        ),
        passes(
            "queuing-off-duration-zero",
            PUSH_PERIODIC,
            {f"{DC}.queuing_enabled": False, f"{DC}.queue_duration": 0},
        ),
    ],
)
def test_delivery_control_rules(case: Case) -> None:
    check(case)


def test_queuing_message_names_the_workspace() -> None:
    found = problems(PUSH_PERIODIC, C, NO_QUEUING)
    assert {p.message for p in found} == {"The 'queuing' feature is not enabled for this workspace."}


@pytest.mark.parametrize("sent", ["send_limit_value", "send_limit_granularity_in_hours"])
def test_a_send_limit_where_it_does_not_apply_is_reported_once(sent: str) -> None:
    # Not also its companion as missing: the two answers would contradict each other.
    body = {**PUSH_ONE_TIME, DC: {sent: "2"}}
    assert [(p.code, p.target) for p in problems(body, C)] == [("UNKNOWN_FIELD", f"{DC}.{sent}")]
