"""Rules for `trigger_condition`: where it belongs, and the fields each delay type needs."""

from __future__ import annotations

from herald.campaigns import durations
from herald.campaigns.schemas.common import Channel, DeliveryType
from herald.campaigns.schemas.trigger import (
    DELAY_FIELDS,
    IntelligentDelayOptimization,
    TriggerCondition,
    TriggerDelayType,
    TriggerRelation,
)
from herald.campaigns.validation.context import (
    Context,
    invalid_value,
    not_applicable,
    out_of_range,
    required,
    too_long,
)
from herald.campaigns.validation.filters import check_filter_group
from herald.problems import Problem, join_path

_BASE = "trigger_condition"

# Spec: not used by these delivery types, whose sends are scheduled or caused by a business event.
TRIGGER_NOT_USED: frozenset[DeliveryType] = frozenset(
    {DeliveryType.BUSINESS_EVENT_TRIGGERED, DeliveryType.ONE_TIME, DeliveryType.PERIODIC}
)
# Spec: required for these (per channel); checked when publishing.
TRIGGER_REQUIRED: dict[Channel, frozenset[DeliveryType]] = {
    Channel.PUSH: frozenset(
        {DeliveryType.EVENT_TRIGGERED, DeliveryType.DEVICE_TRIGGERED, DeliveryType.LOCATION_TRIGGERED}
    ),
    Channel.EMAIL: frozenset({DeliveryType.EVENT_TRIGGERED}),
}
# Fired only by a user's action matching `included_filters` (a device-triggered campaign is
# evaluated exactly as an event-triggered one): published without such a filter, they never send.
FIRED_BY_ACTIONS: frozenset[DeliveryType] = frozenset(
    {DeliveryType.EVENT_TRIGGERED, DeliveryType.DEVICE_TRIGGERED}
)


def check_trigger_condition(ctx: Context) -> list[Problem]:
    trigger = ctx.campaign.trigger_condition
    if trigger is None:
        return []
    if ctx.delivery_type in TRIGGER_NOT_USED:
        return [
            not_applicable(_BASE, f"trigger_condition is not used by {ctx.delivery_type.value} campaigns.")
        ]
    problems = _check_delay(ctx, trigger)
    problems += too_long(
        join_path(_BASE, "trigger_delay_value"),
        trigger.trigger_delay_value,
        trigger.trigger_delay_granularity,
    )
    problems += check_filter_group(trigger.included_filters, (_BASE, "included_filters"))
    problems += check_filter_group(trigger.secondary_included_filters, (_BASE, "secondary_included_filters"))
    if ctx.publishing and ctx.delivery_type is DeliveryType.DEVICE_TRIGGERED:
        # Contract C4: a device trigger fires on the device itself, with no server-side delay.
        problems += [
            not_applicable(join_path(_BASE, name), f"'{name}' does not apply to DEVICE_TRIGGERED campaigns.")
            for name in DELAY_FIELDS
            if getattr(trigger, name) is not None
        ]
    return problems


def _check_delay(ctx: Context, trigger: TriggerCondition) -> list[Problem]:
    problems: list[Problem] = []
    delay_type = trigger.trigger_delay_type
    if ctx.channel is not Channel.PUSH:
        if delay_type is TriggerDelayType.INTELLIGENT_DELAY:
            problems.append(
                invalid_value(
                    join_path(_BASE, "trigger_delay_type"),
                    "INTELLIGENT_DELAY is available for Push campaigns only.",
                )
            )
        if trigger.intelligent_delay_optimization is not None:
            problems.append(
                not_applicable(
                    join_path(_BASE, "intelligent_delay_optimization"),
                    "intelligent_delay_optimization is available for Push campaigns only.",
                )
            )
    if delay_type is TriggerDelayType.DELAY:
        for name in ("trigger_delay_value", "trigger_delay_granularity", "trigger_relation"):
            if getattr(trigger, name) is None:
                problems.append(
                    required(
                        join_path(_BASE, name), f"'{name}' is required when trigger_delay_type is DELAY."
                    )
                )
    if trigger.trigger_relation is TriggerRelation.BEFORE and not trigger.trigger_attr_name():
        problems.append(
            required(
                join_path(_BASE, "trigger_attr", "name"),
                "'trigger_attr.name' (the time attribute to send before) is required when trigger_relation "
                "is BEFORE.",
            )
        )
    optimization = trigger.intelligent_delay_optimization
    if delay_type is TriggerDelayType.INTELLIGENT_DELAY and ctx.channel is Channel.PUSH:
        if optimization is None:
            problems.append(
                required(
                    join_path(_BASE, "intelligent_delay_optimization"),
                    "'intelligent_delay_optimization' is required when trigger_delay_type is INTELLIGENT_DELAY.",
                )
            )
        else:
            problems += _check_optimization_window(optimization)
    return problems


def _check_optimization_window(optimization: IntelligentDelayOptimization) -> list[Problem]:
    base = join_path(_BASE, "intelligent_delay_optimization")
    problems = too_long(
        join_path(base, "min_delay_value"), optimization.min_delay_value, optimization.min_delay_granularity
    )
    problems += too_long(
        join_path(base, "max_delay_value"), optimization.max_delay_value, optimization.max_delay_granularity
    )
    if problems:
        return problems
    low = durations.duration(optimization.min_delay_value, optimization.min_delay_granularity)
    high = durations.duration(optimization.max_delay_value, optimization.max_delay_granularity)
    if low <= high:
        return []
    return [
        out_of_range(
            join_path(base, "max_delay_value"),
            "The maximum delay must not be shorter than the minimum delay.",
        )
    ]
