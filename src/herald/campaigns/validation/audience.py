"""Rules for who receives the campaign: segmentation, control group, and the audience cap."""

from __future__ import annotations

from herald.campaigns.schemas.audience_limit import LIMIT_FIELDS, AudienceLimitFrequency
from herald.campaigns.schemas.common import TRIGGERED_TYPES, Channel, DeliveryType, Feature
from herald.campaigns.validation.context import Context, invalid_value, not_applicable, required
from herald.campaigns.validation.filters import check_filter_group
from herald.problems import Problem, join_path

_SEG = "segmentation_details"
_LIMIT = "campaign_audience_limit"

MINIMUM_AUDIENCE_MESSAGE = (
    "The campaign needs an audience: set is_all_user_campaign to true or add a filter to included_filters."
)


# Campaigns fired per user reach whoever triggers them. A business event is raised for the whole
# workspace and starts a run to the campaign's segment, as a one-time run does: it needs one too.
_AUDIENCE_IS_WHO_TRIGGERS = TRIGGERED_TYPES - {DeliveryType.BUSINESS_EVENT_TRIGGERED}


def needs_minimum_audience(ctx: Context) -> bool:
    """Spec "Minimum audience": all users or one included filter, for campaigns sent to a segment."""
    return ctx.delivery_type not in _AUDIENCE_IS_WHO_TRIGGERS


def check_segmentation_details(ctx: Context) -> list[Problem]:
    segmentation = ctx.campaign.segmentation_details
    if segmentation is None:
        return []
    problems = check_filter_group(segmentation.included_filters, (_SEG, "included_filters"))
    problems += check_filter_group(segmentation.excluded_filters, (_SEG, "excluded_filters"))
    if needs_minimum_audience(ctx) and not segmentation.has_minimum_audience():
        problems.append(required(join_path(_SEG, "included_filters"), MINIMUM_AUDIENCE_MESSAGE))
    return problems


def check_control_group_details(ctx: Context) -> list[Problem]:
    group = ctx.campaign.control_group_details
    if group is None or not group.is_campaign_control_group_enabled:
        return []
    if group.campaign_control_group_percentage is not None:
        return []
    return [
        required(
            "control_group_details.campaign_control_group_percentage",
            "'campaign_control_group_percentage' is required when is_campaign_control_group_enabled is true.",
        )
    ]


def check_campaign_audience_limit(ctx: Context) -> list[Problem]:
    limit = ctx.campaign.campaign_audience_limit
    # With the feature off, the one problem is that (reported by the feature rules).
    if limit is None or not ctx.enabled(Feature.CAMPAIGN_AUDIENCE_LIMIT):
        return []
    if ctx.delivery_type is DeliveryType.BROADCAST_LIVE_ACTIVITY:
        return [
            not_applicable(
                _LIMIT, "campaign_audience_limit is not supported for BROADCAST_LIVE_ACTIVITY campaigns."
            )
        ]
    problems: list[Problem] = []
    if limit.is_campaign_audience_limit_enabled:
        # All or nothing: a cap needs what it counts, how often it resets, and the number.
        problems += [
            required(join_path(_LIMIT, name), f"'{name}' is required when the audience limit is enabled.")
            for name in LIMIT_FIELDS
            if getattr(limit, name) is None
        ]
    else:
        problems += [
            not_applicable(
                join_path(_LIMIT, name), f"'{name}' must not be sent when the audience limit is disabled."
            )
            for name in LIMIT_FIELDS
            if name in limit.model_fields_set
        ]
    periodic_push = ctx.channel is Channel.PUSH and ctx.delivery_type is DeliveryType.PERIODIC
    if limit.frequency is AudienceLimitFrequency.INSTANCE and not periodic_push:
        problems.append(
            invalid_value(
                join_path(_LIMIT, "frequency"),
                "frequency INSTANCE applies to PERIODIC Push campaigns only; use TOTAL.",
            )
        )
    return problems
