"""scheduling_details rules: companions per delivery type, periodic details, time zones and order."""

from __future__ import annotations

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    EMAIL_BUSINESS_EVENT,
    EMAIL_ONE_TIME_PROMOTIONAL,
    EMAIL_PERIODIC,
    PUSH_EVENT_TRIGGERED,
    PUSH_LOCATION_TRIGGERED,
    PUSH_MULTI_LOCALE_AB,
    PUSH_ONE_TIME,
    PUSH_PERIODIC,
    PUSH_WEB,
    Case,
    check,
    fails,
    passes,
)

C = Stage.DRAFT_CREATE
S = "scheduling_details"
PD = f"{S}.periodic_details"
GF = f"{S}.geo_fence_timelimit"


@pytest.mark.parametrize(
    "case",
    [
        # start_time for AT_FIXED_TIME, SEND_IN_BTS, SEND_IN_USER_TIMEZONE
        fails(
            "fixed-time-no-start",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{S}.start_time"),
            drop=(f"{S}.start_time", f"{S}.expiry_time"),
            stage=C,
        ),
        fails(
            "bts-no-start",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{S}.start_time"),
            drop=(f"{S}.start_time",),
            stage=C,
        ),
        fails(
            "user-tz-no-start",
            PUSH_WEB,
            ("REQUIRED_FIELD_MISSING", f"{S}.start_time"),
            drop=(f"{S}.start_time",),
            stage=C,
        ),
        passes("asap-no-start", PUSH_MULTI_LOCALE_AB),
        # companions of BTS and user time zone
        fails(
            "bts-no-details",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{S}.bts_details"),
            drop=(f"{S}.bts_details",),
            stage=C,
        ),
        fails(
            "user-tz-no-details",
            PUSH_WEB,
            ("REQUIRED_FIELD_MISSING", f"{S}.user_timezone_details"),
            drop=(f"{S}.user_timezone_details",),
            stage=C,
        ),
        fails(
            "bts-flag-not-bool",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("INVALID_TYPE", f"{S}.bts_details.send_in_bts"),
            {f"{S}.bts_details.send_in_bts": "yes"},
            stage=C,
        ),
        fails(
            "bad-delivery-type",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{S}.delivery_type"),
            {f"{S}.delivery_type": "LATER"},
            stage=C,
        ),
        # ONE_TIME / PERIODIC need a schedule and a delivery type
        fails("one-time-no-schedule", PUSH_ONE_TIME, ("REQUIRED_FIELD_MISSING", S), drop=(S,)),
        fails("periodic-no-schedule", EMAIL_PERIODIC, ("REQUIRED_FIELD_MISSING", S), drop=(S,)),
        passes("one-time-no-schedule-in-draft", PUSH_ONE_TIME, drop=(S,), stage=C),
        passes("triggered-no-schedule", PUSH_EVENT_TRIGGERED, drop=(S,)),
        fails(
            "one-time-no-delivery-type",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{S}.delivery_type"),
            drop=(f"{S}.delivery_type",),
            stage=C,
        ),
        passes("business-event-bounds-only", EMAIL_BUSINESS_EVENT),
        # PERIODIC uses AT_FIXED_TIME with periodic_details
        fails("periodic-no-details", PUSH_PERIODIC, ("REQUIRED_FIELD_MISSING", PD), drop=(PD,), stage=C),
        fails(
            "periodic-asap",
            PUSH_PERIODIC,
            ("INVALID_ENUM_VALUE", f"{S}.delivery_type"),
            {f"{S}.delivery_type": "ASAP"},
            stage=C,
        ),
        fails(
            "periodic-details-on-one-time",
            PUSH_ONE_TIME,
            ("UNKNOWN_FIELD", PD),
            {PD: PUSH_PERIODIC[S]["periodic_details"]},
            stage=C,
        ),
        fails(
            "periodic-no-frequency",
            PUSH_PERIODIC,
            ("REQUIRED_FIELD_MISSING", f"{PD}.sending_frequency"),
            drop=(f"{PD}.sending_frequency",),
            stage=C,
        ),
        fails(
            "periodic-zero-repeat",
            PUSH_PERIODIC,
            ("OUT_OF_RANGE", f"{PD}.repeat_frequency"),
            {f"{PD}.repeat_frequency": 0},
            stage=C,
        ),
        fails(
            "periodic-bad-day",
            PUSH_PERIODIC,
            ("INVALID_ENUM_VALUE", f"{PD}.repeat_on_days_of_week.1"),
            {f"{PD}.repeat_on_days_of_week.1": "FUNDAY"},
            stage=C,
        ),
        fails(
            "date-of-month-32",
            EMAIL_PERIODIC,
            ("OUT_OF_RANGE", f"{PD}.repeat_on_date_of_month.1"),
            {f"{PD}.repeat_on_date_of_month.1": 32},
            stage=C,
        ),
        fails(
            "date-of-month-0",
            EMAIL_PERIODIC,
            ("OUT_OF_RANGE", f"{PD}.repeat_on_date_of_month.0"),
            {f"{PD}.repeat_on_date_of_month.0": 0},
            stage=C,
        ),
        fails(
            "date-of-month-with-weekly",
            PUSH_PERIODIC,
            ("UNKNOWN_FIELD", f"{PD}.repeat_on_date_of_month"),
            {f"{PD}.repeat_on_date_of_month": [1]},
            stage=C,
        ),
        fails(
            "week-of-month-with-daily",
            PUSH_PERIODIC,
            ("UNKNOWN_FIELD", f"{PD}.repeat_on_days_of_week_for_month"),
            {f"{PD}.sending_frequency": "DAILY", f"{PD}.repeat_on_days_of_week_for_month": []},
            drop=(f"{PD}.repeat_on_days_of_week",),
            stage=C,
        ),
        fails(
            "days-of-week-with-daily",
            PUSH_PERIODIC,
            ("UNKNOWN_FIELD", f"{PD}.repeat_on_days_of_week"),
            {f"{PD}.sending_frequency": "DAILY"},
            stage=C,
        ),
        fails(
            "bad-week-granularity",
            EMAIL_PERIODIC,
            ("INVALID_ENUM_VALUE", f"{PD}.repeat_on_days_of_week_for_month.0.week_granularity"),
            {f"{PD}.repeat_on_days_of_week_for_month.0.week_granularity": "FIFTH"},
            stage=C,
        ),
        fails(
            "week-of-month-without-days",
            EMAIL_PERIODIC,
            ("OUT_OF_RANGE", f"{PD}.repeat_on_days_of_week_for_month.0.repeat_on_days_of_week"),
            {f"{PD}.repeat_on_days_of_week_for_month.0.repeat_on_days_of_week": []},
            stage=C,
        ),
        passes("days-of-week-with-monthly", EMAIL_PERIODIC, {f"{PD}.repeat_on_days_of_week": ["MONDAY"]}),
        passes(
            "daily",
            PUSH_PERIODIC,
            {f"{PD}.sending_frequency": "DAILY"},
            drop=(f"{PD}.repeat_on_days_of_week",),
        ),
        # time zones: IANA names; required with AT_FIXED_TIME and SEND_IN_BTS at publish
        fails(
            "timezone-not-iana",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{S}.timezone"),
            {f"{S}.timezone": "IST"},
            stage=C,
        ),
        fails(
            "timezone-path",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{S}.timezone"),
            {f"{S}.timezone": "../etc/passwd"},
            stage=C,
        ),
        fails(
            "fixed-time-no-timezone",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{S}.timezone"),
            drop=(f"{S}.timezone",),
        ),
        fails(
            "bts-no-timezone",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{S}.timezone"),
            drop=(f"{S}.timezone",),
        ),
        passes("fixed-time-no-timezone-in-draft", PUSH_ONE_TIME, drop=(f"{S}.timezone",), stage=C),
        passes("user-timezone-needs-none", PUSH_WEB),
        passes("utc-name", PUSH_ONE_TIME, {f"{S}.timezone": "UTC"}),
        # ISO 8601 date-times; expiry after start, naive values read in `timezone`
        fails(
            "start-not-iso",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{S}.start_time"),
            {f"{S}.start_time": "20/10/2030 09:30"},
            stage=C,
        ),
        fails(
            "start-date-only",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{S}.start_time"),
            {f"{S}.start_time": "2030-10-20"},
            stage=C,
        ),
        fails(
            "expiry-bad-month",
            PUSH_ONE_TIME,
            ("INVALID_TYPE", f"{S}.expiry_time"),
            {f"{S}.expiry_time": "2030-13-01T00:00:00Z"},
            stage=C,
        ),
        passes(
            "z-and-offsets",
            PUSH_ONE_TIME,
            {f"{S}.start_time": "2030-10-20T04:00:00Z", f"{S}.expiry_time": "2030-10-20T09:31:00+05:30"},
        ),
        fails(
            "expiry-before-start",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{S}.expiry_time"),
            {f"{S}.expiry_time": "2030-10-19T09:30:00"},
            stage=C,
        ),
        fails(
            "expiry-equals-start",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{S}.expiry_time"),
            {f"{S}.expiry_time": "2030-10-20T04:00:00Z"},
            stage=C,
        ),
        # 10:00 in Kolkata is 04:30Z, so 05:00Z is after it; read as UTC it would be before.
        passes(
            "naive-start-read-in-timezone",
            PUSH_ONE_TIME,
            {f"{S}.start_time": "2030-10-20T10:00:00", f"{S}.expiry_time": "2030-10-20T05:00:00Z"},
        ),
        fails(
            "naive-start-read-in-utc",
            PUSH_ONE_TIME,
            ("OUT_OF_RANGE", f"{S}.expiry_time"),
            {f"{S}.start_time": "2030-10-20T10:00:00", f"{S}.expiry_time": "2030-10-20T05:00:00Z"},
            drop=(f"{S}.timezone",),
            stage=C,
        ),
        # geo_fence_timelimit (LOCATION_TRIGGERED)
        fails(
            "limited-time-no-bounds",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GF}.timebounds"),
            drop=(f"{GF}.timebounds",),
            stage=C,
        ),
        fails(
            "limited-time-empty-bounds",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GF}.timebounds"),
            {f"{GF}.timebounds": []},
            stage=C,
        ),
        passes(
            "always-no-bounds",
            PUSH_LOCATION_TRIGGERED,
            {f"{GF}.notification_schedule": "ALWAYS"},
            drop=(f"{GF}.timebounds",),
        ),
        fails(
            "bad-schedule",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{GF}.notification_schedule"),
            {f"{GF}.notification_schedule": "SOMETIMES"},
            stage=C,
        ),
        fails(
            "bad-time-of-day",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_TYPE", f"{GF}.timebounds.0.end_time"),
            {f"{GF}.timebounds.0.end_time": "25:00"},
            stage=C,
        ),
        fails(
            "bound-missing-end",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GF}.timebounds.0.end_time"),
            drop=(f"{GF}.timebounds.0.end_time",),
            stage=C,
        ),
        passes(
            "overnight-window",
            PUSH_LOCATION_TRIGGERED,
            {f"{GF}.timebounds.0": {"start_time": "22:00", "end_time": "02:00:00"}},
        ),
        passes(
            "date-time-window",
            PUSH_LOCATION_TRIGGERED,
            {f"{GF}.timebounds.0": {"start_time": "2030-01-01T09:00:00", "end_time": "2030-01-01T18:00:00"}},
        ),
        fails(
            "date-time-window-backwards",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GF}.timebounds.0.end_time"),
            {f"{GF}.timebounds.0": {"start_time": "2030-01-02T09:00:00", "end_time": "2030-01-01T18:00:00"}},
            stage=C,
        ),
        fails(
            # a time of day to a date-time names no window: the engine could not read it
            "time-of-day-to-date-time-window",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_TYPE", f"{GF}.timebounds.0.end_time"),
            {f"{GF}.timebounds.0": {"start_time": "10:00", "end_time": "2030-01-01T18:00:00"}},
            stage=C,
        ),
        # the BTS window's end: a date-time after the start, or a time of day
        fails(
            "bts-window-end-unreadable",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("INVALID_TYPE", f"{S}.bts_details.window_end_time"),
            {f"{S}.bts_details.window_end_time": "garbage"},
            stage=C,
        ),
        fails(
            "bts-window-end-time-of-day-with-newline",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("INVALID_TYPE", f"{S}.bts_details.window_end_time"),
            {f"{S}.bts_details.window_end_time": "20:00\n"},
            stage=C,
        ),
        fails(
            "bts-window-end-before-start",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("OUT_OF_RANGE", f"{S}.bts_details.window_end_time"),
            {f"{S}.bts_details.window_end_time": "2030-04-01T05:00:00Z"},
            stage=C,
        ),
        fails(
            "bts-window-end-at-start-in-the-campaign-zone",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("OUT_OF_RANGE", f"{S}.bts_details.window_end_time"),
            {f"{S}.bts_details.window_end_time": "2030-04-01T08:00:00"},  # 06:00Z in Madrid
            stage=C,
        ),
        passes(
            "bts-window-end-time-of-day-before-the-start-hour",  # the next 05:00 after the start
            EMAIL_ONE_TIME_PROMOTIONAL,
            {f"{S}.bts_details.window_end_time": "05:00"},
        ),
        fails(
            "timelimit-not-location",
            PUSH_EVENT_TRIGGERED,
            ("UNKNOWN_FIELD", GF),
            {GF: {"notification_schedule": "ALWAYS"}},
            stage=C,
        ),
    ],
)
def test_scheduling_rules(case: Case) -> None:
    check(case)
