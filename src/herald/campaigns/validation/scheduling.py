"""Rules for `scheduling_details`: the companions each delivery type needs, and time order."""

from __future__ import annotations

from herald.campaigns.schemas.common import DeliveryType, resolve_datetime
from herald.campaigns.schemas.scheduling import (
    NEEDS_START_TIME,
    REPEAT_FIELDS_BY_FREQUENCY,
    TIME_BOUND_MESSAGE,
    GeoFenceTimeLimit,
    NotificationSchedule,
    PeriodicDetails,
    SchedulingDeliveryType,
    SchedulingDetails,
    is_time_bound,
)
from herald.campaigns.validation.context import (
    Context,
    invalid_type,
    invalid_value,
    not_applicable,
    out_of_range,
    required,
)
from herald.problems import Problem, join_path
from herald.timefmt import parse_iso_datetime

_BASE = "scheduling_details"
_SCHEDULED = frozenset({DeliveryType.ONE_TIME, DeliveryType.PERIODIC})

# Companion objects each scheduling delivery type needs.
_COMPANIONS = {
    SchedulingDeliveryType.SEND_IN_BTS: "bts_details",
    SchedulingDeliveryType.SEND_IN_USER_TIMEZONE: "user_timezone_details",
}


def check_scheduling_details(ctx: Context) -> list[Problem]:
    details = ctx.campaign.scheduling_details
    if details is None:
        return []
    problems: list[Problem] = []
    delivery = details.delivery_type
    if delivery is None and ctx.delivery_type in _SCHEDULED:
        problems.append(
            required(
                join_path(_BASE, "delivery_type"),
                f"'delivery_type' is required for {ctx.delivery_type.value} campaigns.",
            )
        )
    if delivery in NEEDS_START_TIME and details.start_time is None:
        problems.append(
            required(
                join_path(_BASE, "start_time"), f"'start_time' is required when delivery_type is {delivery}."
            )
        )
    for kind, name in _COMPANIONS.items():
        if delivery is kind and getattr(details, name) is None:
            problems.append(
                required(join_path(_BASE, name), f"'{name}' is required when delivery_type is {kind}.")
            )
    problems += _check_periodic(ctx, details)
    problems += _check_time_order(details)
    problems += _check_window_end(details)
    if details.geo_fence_timelimit is not None:
        problems += _check_geo_fence_timelimit(ctx, details.geo_fence_timelimit, details.timezone)
    return problems


def _check_periodic(ctx: Context, details: SchedulingDetails) -> list[Problem]:
    if ctx.delivery_type is not DeliveryType.PERIODIC:
        if details.periodic_details is None:
            return []
        return [
            not_applicable(
                join_path(_BASE, "periodic_details"), "periodic_details applies to PERIODIC campaigns only."
            )
        ]
    problems: list[Problem] = []
    if details.delivery_type not in (None, SchedulingDeliveryType.AT_FIXED_TIME):
        problems.append(
            invalid_value(
                join_path(_BASE, "delivery_type"), "PERIODIC campaigns use delivery_type AT_FIXED_TIME."
            )
        )
    if details.periodic_details is None:
        problems.append(
            required(
                join_path(_BASE, "periodic_details"), "'periodic_details' is required for PERIODIC campaigns."
            )
        )
    else:
        problems += _check_repeat_fields(details.periodic_details)
    return problems


def _check_repeat_fields(periodic: PeriodicDetails) -> list[Problem]:
    frequency = periodic.sending_frequency
    return [
        not_applicable(
            join_path(_BASE, "periodic_details", name),
            f"'{name}' goes with sending_frequency {' or '.join(sorted(allowed))}, not {frequency.value}.",
        )
        for name, allowed in REPEAT_FIELDS_BY_FREQUENCY.items()
        if getattr(periodic, name) is not None and frequency not in allowed
    ]


def _check_time_order(details: SchedulingDetails) -> list[Problem]:
    if details.start_time is None or details.expiry_time is None:
        return []
    start = resolve_datetime(details.start_time, details.timezone)
    expiry = resolve_datetime(details.expiry_time, details.timezone)
    if expiry > start:
        return []
    return [out_of_range(join_path(_BASE, "expiry_time"), "expiry_time must be after start_time.")]


def _check_window_end(details: SchedulingDetails) -> list[Problem]:
    # A rule rather than the field's type: a value stored before it was checked must still let the
    # campaign be read (the engine then sends with the default window) rather than stop its sends.
    end = details.bts_details.window_end_time if details.bts_details else None
    if end is None:
        return []
    target = join_path(_BASE, "bts_details", "window_end_time")
    if not is_time_bound(end):
        return [invalid_type(target, TIME_BOUND_MESSAGE)]
    # A time of day is the next such time after the start; only a date-time can come before it.
    if details.start_time is None or parse_iso_datetime(end) is None:
        return []
    if resolve_datetime(end, details.timezone) > resolve_datetime(details.start_time, details.timezone):
        return []
    return [out_of_range(target, "window_end_time must be after start_time.")]


def _check_geo_fence_timelimit(ctx: Context, limit: GeoFenceTimeLimit, timezone: str | None) -> list[Problem]:
    base = (_BASE, "geo_fence_timelimit")
    if ctx.delivery_type is not DeliveryType.LOCATION_TRIGGERED:
        return [
            not_applicable(
                join_path(*base), "geo_fence_timelimit applies to LOCATION_TRIGGERED campaigns only."
            )
        ]
    if limit.notification_schedule is not NotificationSchedule.LIMITED_TIME:
        return []
    if not limit.timebounds:
        return [required(join_path(*base, "timebounds"), "'timebounds' is required for LIMITED_TIME.")]
    problems: list[Problem] = []
    for index, bound in enumerate(limit.timebounds):
        dated = (
            parse_iso_datetime(bound.start_time) is not None,
            parse_iso_datetime(bound.end_time) is not None,
        )
        if dated[0] != dated[1]:
            # From a time of day (every day) to one date-time names no window.
            problems.append(
                invalid_type(
                    join_path(*base, "timebounds", index, "end_time"),
                    "start_time and end_time must both be times of day or both date-times.",
                )
            )
            continue
        # Times of day may wrap past midnight; only full date-times have a fixed order.
        if not all(dated):
            continue
        if resolve_datetime(bound.end_time, timezone) <= resolve_datetime(bound.start_time, timezone):
            problems.append(
                out_of_range(
                    join_path(*base, "timebounds", index, "end_time"), "end_time must be after start_time."
                )
            )
    return problems
