"""Rules for `basic_details` (spec rule 4 and the geofence table) and across the body's top level."""

from __future__ import annotations

import math

from herald.audience.attributes import is_printable_name
from herald.audience.schemas import ACTION_NAME_LENGTH
from herald.campaigns.schemas.basic_details import (
    TEMPLATE_TYPES_BY_PLATFORM,
    Geofence,
    GeofenceTrigger,
    PushBasicDetails,
)
from herald.campaigns.schemas.common import DELIVERY_TYPES_BY_CHANNEL, DeliveryType, Platform
from herald.campaigns.validation.context import (
    Context,
    invalid_type,
    invalid_value,
    out_of_range,
    required,
    too_long,
)
from herald.problems import Problem, join_path

_BLA = DeliveryType.BROADCAST_LIVE_ACTIVITY


def check_channel_delivery_type(ctx: Context) -> list[Problem]:
    """Spec "Delivery types": DEVICE/LOCATION_TRIGGERED and BROADCAST_LIVE_ACTIVITY are Push only."""
    allowed = DELIVERY_TYPES_BY_CHANNEL.get(ctx.channel, frozenset())
    if ctx.delivery_type in allowed:
        return []
    return [
        invalid_value(
            "campaign_delivery_type",
            f"{ctx.delivery_type.value} campaigns are not available on the {ctx.channel.value} channel.",
        )
    ]


def check_basic_details(ctx: Context) -> list[Problem]:
    details = ctx.campaign.basic_details
    if details is None:
        return []
    problems: list[Problem] = []
    if ctx.delivery_type is DeliveryType.BUSINESS_EVENT_TRIGGERED and not details.business_event:
        problems.append(
            required(
                "basic_details.business_event",
                "'business_event' is required for BUSINESS_EVENT_TRIGGERED campaigns.",
            )
        )
    elif details.business_event:
        problems += _check_business_event(details.business_event)
    if isinstance(details, PushBasicDetails):
        problems += _check_geofences(ctx, details)
    return problems


def _check_business_event(name: str) -> list[Problem]:
    """A name the business-event route could raise (its `name`, `ActionName`): a campaign waiting
    for one it refuses would never start."""
    target = "basic_details.business_event"
    if not is_printable_name(name):
        return [
            invalid_type(target, "A business event's name must not be blank nor contain control characters.")
        ]
    if len(name) > ACTION_NAME_LENGTH:
        return [out_of_range(target, f"A business event's name has at most {ACTION_NAME_LENGTH} characters.")]
    return []


def _check_geofences(ctx: Context, details: PushBasicDetails) -> list[Problem]:
    if not details.geofences:  # none, or an empty list: nothing could fire
        if ctx.delivery_type is DeliveryType.LOCATION_TRIGGERED:
            return [
                required(
                    "basic_details.geofences",
                    "'geofences' is required for LOCATION_TRIGGERED campaigns.",
                )
            ]
        return []
    fences: list[tuple[tuple[str | int, ...], Geofence]]
    if isinstance(details.geofences, list):
        fences = [(("basic_details", "geofences", i), fence) for i, fence in enumerate(details.geofences)]
    else:
        fences = [(("basic_details", "geofences"), details.geofences)]
    problems: list[Problem] = []
    seen: set[str] = set()
    for path, fence in fences:
        problems += _check_geofence(fence, path)
        if fence.name in seen:
            problems.append(
                Problem(
                    "INVALID_TYPE", join_path(*path, "name"), f"Geofence name '{fence.name}' is used twice."
                )
            )
        seen.add(fence.name)
    return problems


def _check_geofence(fence: Geofence, path: tuple[str | int, ...]) -> list[Problem]:
    problems: list[Problem] = []
    if not -90 <= float(fence.latitude) <= 90:
        problems.append(out_of_range(join_path(*path, "latitude"), "latitude must be between -90 and 90."))
    if not -180 <= float(fence.longitude) <= 180:
        problems.append(
            out_of_range(join_path(*path, "longitude"), "longitude must be between -180 and 180.")
        )
    # Finite too: "9" repeated 400 times reads as infinity, a fence round the whole earth.
    if not 0 < float(fence.radius) < math.inf:
        problems.append(
            out_of_range(
                join_path(*path, "radius"), "radius must be a finite number of meters greater than 0."
            )
        )
    problems += too_long(
        join_path(*path, "response_time_value"), fence.response_time_value, fence.response_time_granularity
    )
    problems += too_long(
        join_path(*path, "dwell_time_value"), fence.dwell_time_value, fence.dwell_time_granularity
    )
    if fence.triggered_at is GeofenceTrigger.DWELL:
        for name in ("dwell_time_value", "dwell_time_granularity"):
            if getattr(fence, name) is None:
                problems.append(
                    required(join_path(*path, name), f"'{name}' is required when triggered_at is 'dwell'.")
                )
    return problems


def check_platforms(ctx: Context) -> list[Problem]:
    """Platforms against the delivery type and the template type named in `basic_details`."""
    details = ctx.campaign.basic_details
    if not isinstance(details, PushBasicDetails) or details.platforms is None:
        return []
    problems: list[Problem] = []
    if ctx.delivery_type is _BLA and details.platforms != [Platform.IOS]:
        problems.append(
            invalid_value(
                "basic_details.platforms",
                'BROADCAST_LIVE_ACTIVITY campaigns are iOS only: platforms must be ["IOS"].',
            )
        )
    if details.template_type is not None:
        for platform in details.platforms:
            if details.template_type not in TEMPLATE_TYPES_BY_PLATFORM[platform]:
                problems.append(
                    invalid_value(
                        "basic_details.template_type",
                        f"Template type '{details.template_type.value}' is not available on {platform.value}.",
                    )
                )
    return problems
