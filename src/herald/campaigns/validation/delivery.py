"""Rules for `delivery_controls` and `advanced`: which fields apply to which delivery type."""

from __future__ import annotations

from herald.campaigns.schemas.common import Feature, Granularity
from herald.campaigns.schemas.delivery_controls import PUSH_FIELD_DELIVERY_TYPES, PushDeliveryControls
from herald.campaigns.validation.context import Context, not_applicable, out_of_range, required, too_long
from herald.problems import Problem, join_path

_BASE = "delivery_controls"


# The controls that are durations in hours (each at most `durations.LONGEST`).
_HOURS = (
    "minimum_delay_between_two_notification_in_hour",
    "max_time_to_show_message_of_same_camapign",
    "expiry_time_of_sync_data_in_hour",
    "send_limit_granularity_in_hours",
    "queue_duration",
)


def check_delivery_controls(ctx: Context) -> list[Problem]:
    controls = ctx.campaign.delivery_controls
    if controls is None:
        return []
    lengths = [
        problem
        for name in _HOURS
        for problem in too_long(join_path(_BASE, name), getattr(controls, name, None), Granularity.HOURS)
    ]
    # Email carries only its five fields, which the Email model already enforces.
    if not isinstance(controls, PushDeliveryControls):
        return lengths
    problems = lengths + [
        not_applicable(
            join_path(_BASE, name),
            f"'{name}' does not apply to {ctx.delivery_type.value} campaigns.",
        )
        for name, delivery_types in PUSH_FIELD_DELIVERY_TYPES.items()
        if getattr(controls, name) is not None and ctx.delivery_type not in delivery_types
    ]
    # A send limit is a count per a number of hours: one without the other would limit nothing.
    # Where the limit does not apply, each was reported above: asking for its companion too
    # would contradict that.
    limit, hours = "send_limit_value", "send_limit_granularity_in_hours"
    if ctx.delivery_type not in PUSH_FIELD_DELIVERY_TYPES[limit]:
        return problems + _queuing_problems(ctx, controls)
    for name, companion in ((limit, hours), (hours, limit)):
        if getattr(controls, name) is not None and getattr(controls, companion) is None:
            problems.append(
                required(join_path(_BASE, companion), f"'{companion}' is required when '{name}' is set.")
            )
    granularity = controls.send_limit_granularity_in_hours
    if granularity is not None and int(granularity) == 0:
        # A window of no time holds no message: the limit would limit nothing.
        problems.append(out_of_range(join_path(_BASE, hours), f"'{hours}' must be at least 1 hour."))
    count = controls.send_limit_value
    if count is not None and int(count) == 0:
        # At most no message a window: the campaign could never send (to stop it, STOP or PAUSE it).
        problems.append(out_of_range(join_path(_BASE, limit), f"'{limit}' must be at least 1 message."))
    return problems + _queuing_problems(ctx, controls)


def _queuing_problems(ctx: Context, controls: PushDeliveryControls) -> list[Problem]:
    if not (controls.queuing_enabled and ctx.enabled(Feature.QUEUING)):
        return []
    target = join_path(_BASE, "queue_duration")
    if controls.queue_duration is None:
        return [required(target, "'queue_duration' is required when queuing_enabled is true.")]
    if controls.queue_duration <= 0:
        return [out_of_range(target, "queue_duration must be greater than 0 hours when queuing is enabled.")]
    return []


def check_advanced(ctx: Context) -> list[Problem]:
    advanced = ctx.campaign.advanced
    if advanced is None or advanced.expiration_settings is None:
        return []
    settings = advanced.expiration_settings
    base = ("advanced", "expiration_settings")
    problems: list[Problem] = []
    # A duration is a number and a unit; one without the other cannot be applied.
    for value_name, type_name in (
        ("expire_notification_after_value", "expire_notification_after_type"),
        ("remove_from_inbox_after_value", "remove_from_inbox_after_type"),
    ):
        has_value, has_type = (
            getattr(settings, value_name) is not None,
            getattr(settings, type_name) is not None,
        )
        if has_value and not has_type:
            problems.append(
                required(join_path(*base, type_name), f"'{type_name}' is required with {value_name}.")
            )
        if has_type and not has_value:
            problems.append(
                required(join_path(*base, value_name), f"'{value_name}' is required with {type_name}.")
            )
    return problems
