"""`scheduling_details`: when a campaign sends, repeats, and stops."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, Strict
from pydantic_core import PydanticCustomError

from herald.campaigns.schemas.common import (
    Flag,
    IsoDateTime,
    PositiveInt,
    Text,
    TimezoneName,
)
from herald.json_numbers import IntegralFloat
from herald.schemas import APIModel
from herald.timefmt import parse_iso_datetime


class SchedulingDeliveryType(StrEnum):
    ASAP = "ASAP"
    AT_FIXED_TIME = "AT_FIXED_TIME"
    SEND_IN_BTS = "SEND_IN_BTS"
    SEND_IN_USER_TIMEZONE = "SEND_IN_USER_TIMEZONE"


# Spec: these delivery types name a moment, so `start_time` is required with them.
NEEDS_START_TIME: frozenset[SchedulingDeliveryType] = frozenset(
    {
        SchedulingDeliveryType.AT_FIXED_TIME,
        SchedulingDeliveryType.SEND_IN_BTS,
        SchedulingDeliveryType.SEND_IN_USER_TIMEZONE,
    }
)
# Contract §5: a wall-clock start needs a zone to be read in before publishing.
NEEDS_TIMEZONE: frozenset[SchedulingDeliveryType] = frozenset(
    {SchedulingDeliveryType.AT_FIXED_TIME, SchedulingDeliveryType.SEND_IN_BTS}
)


class SendingFrequency(StrEnum):
    DAILY = "DAILY"
    WEEKLY = "WEEKLY"
    MONTHLY = "MONTHLY"


class DayOfWeek(StrEnum):
    MONDAY = "MONDAY"
    TUESDAY = "TUESDAY"
    WEDNESDAY = "WEDNESDAY"
    THURSDAY = "THURSDAY"
    FRIDAY = "FRIDAY"
    SATURDAY = "SATURDAY"
    SUNDAY = "SUNDAY"


class WeekGranularity(StrEnum):
    FIRST = "FIRST"
    SECOND = "SECOND"
    THIRD = "THIRD"
    FOURTH = "FOURTH"
    LAST = "LAST"


DayOfMonth = Annotated[int, Strict(), Field(ge=1, le=31), IntegralFloat]


class DaysOfWeekForMonth(APIModel):
    week_granularity: WeekGranularity
    # At least one: "the first of no day" named no date, and the campaign ran on the start's date.
    repeat_on_days_of_week: Annotated[list[DayOfWeek], Field(min_length=1)]


class PeriodicDetails(APIModel):
    sending_frequency: SendingFrequency
    repeat_frequency: PositiveInt | None = None
    no_of_occurences: PositiveInt | None = None  # spelling as the spec gives it
    repeat_on_date_of_month: list[DayOfMonth] | None = None
    repeat_on_days_of_week: list[DayOfWeek] | None = None
    repeat_on_days_of_week_for_month: list[DaysOfWeekForMonth] | None = None


# Spec: which repeat fields go with which sending frequency.
REPEAT_FIELDS_BY_FREQUENCY: dict[str, frozenset[SendingFrequency]] = {
    "repeat_on_date_of_month": frozenset({SendingFrequency.MONTHLY}),
    "repeat_on_days_of_week": frozenset({SendingFrequency.WEEKLY, SendingFrequency.MONTHLY}),
    "repeat_on_days_of_week_for_month": frozenset({SendingFrequency.MONTHLY}),
}


class BtsDetails(APIModel):
    send_in_bts: Flag | None = None
    if_user_bts_is_not_available: Text | None = None
    if_user_bts_outside_time_window: Text | None = None
    window_end_time: Text | None = None


class UserTimezoneDetails(APIModel):
    send_in_user_timezone: Flag | None = None
    send_if_user_timezone_has_passed: Flag | None = None


class NotificationSchedule(StrEnum):
    ALWAYS = "ALWAYS"
    LIMITED_TIME = "LIMITED_TIME"


_TIME_OF_DAY = re.compile(r"^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?$")


TIME_BOUND_MESSAGE = "Expected an ISO 8601 time (HH:MM or HH:MM:SS) or date-time."


def is_time_bound(value: str) -> bool:
    """A daily time of day or a full date-time, both ISO 8601 (geofence windows, the BTS window's end)."""
    return _TIME_OF_DAY.fullmatch(value) is not None or parse_iso_datetime(value) is not None


def _time_bound(value: str) -> str:
    if is_time_bound(value):
        return value
    raise PydanticCustomError("INVALID_TYPE", TIME_BOUND_MESSAGE)


TimeBound = Annotated[str, Strict(), AfterValidator(_time_bound)]


class Timebound(APIModel):
    start_time: TimeBound
    end_time: TimeBound


class GeoFenceTimeLimit(APIModel):
    notification_schedule: NotificationSchedule
    timebounds: list[Timebound] | None = None


class SchedulingDetails(APIModel):
    delivery_type: SchedulingDeliveryType | None = None
    start_time: IsoDateTime | None = None
    expiry_time: IsoDateTime | None = None
    timezone: TimezoneName | None = None
    periodic_details: PeriodicDetails | None = None
    bts_details: BtsDetails | None = None
    user_timezone_details: UserTimezoneDetails | None = None
    geo_fence_timelimit: GeoFenceTimeLimit | None = None
