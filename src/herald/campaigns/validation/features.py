"""Workspace feature gates: parts of a campaign only allowed, or only required, with a flag on."""

from __future__ import annotations

from herald.campaigns.schemas.common import Feature
from herald.campaigns.schemas.delivery_controls import QUEUING_FIELDS, PushDeliveryControls
from herald.campaigns.schemas.filters import FilterGroup, UserAttributeFilter
from herald.campaigns.validation.context import Context, feature_not_enabled, required
from herald.campaigns.validation.filters import FilterPath, walk_filters
from herald.problems import Problem, join_path


def check_audience_limit_feature(ctx: Context) -> list[Problem]:
    # Spec Errors: sending the component at all is the violation, whatever it holds.
    if ctx.campaign.campaign_audience_limit is None or ctx.enabled(Feature.CAMPAIGN_AUDIENCE_LIMIT):
        return []
    return [feature_not_enabled("campaign_audience_limit", Feature.CAMPAIGN_AUDIENCE_LIMIT)]


def check_queuing_feature(ctx: Context) -> list[Problem]:
    controls = ctx.campaign.delivery_controls
    if not isinstance(controls, PushDeliveryControls) or ctx.enabled(Feature.QUEUING):
        return []
    return [
        feature_not_enabled(join_path("delivery_controls", name), Feature.QUEUING)
        for name in QUEUING_FIELDS
        if name in controls.model_fields_set
    ]


def _project_names(groups: list[tuple[FilterPath, FilterGroup | None]]) -> list[Problem]:
    # Every user attribute filter, nested ones included, names the project it reads from.
    problems: list[Problem] = []
    for path, group in groups:
        for item, item_path in walk_filters(group, path):
            if isinstance(item, UserAttributeFilter) and not item.project_name:
                problems.append(
                    required(
                        join_path(*item_path, "project_name"),
                        "'project_name' is required on user attribute filters when the "
                        "'portfolio' feature is enabled for this workspace.",
                    )
                )
    return problems


def check_trigger_project_names(ctx: Context) -> list[Problem]:
    trigger = ctx.campaign.trigger_condition
    if trigger is None or not ctx.enabled(Feature.PORTFOLIO):
        return []
    base = ("trigger_condition",)
    return _project_names(
        [
            ((*base, "included_filters"), trigger.included_filters),
            ((*base, "secondary_included_filters"), trigger.secondary_included_filters),
        ],
    )


def check_segmentation_project_names(ctx: Context) -> list[Problem]:
    segmentation = ctx.campaign.segmentation_details
    if segmentation is None or not ctx.enabled(Feature.PORTFOLIO):
        return []
    base = ("segmentation_details",)
    return _project_names(
        [
            ((*base, "included_filters"), segmentation.included_filters),
            ((*base, "excluded_filters"), segmentation.excluded_filters),
        ],
    )
