"""Rules for FilterGroups: operators by data type, and the values operators need."""

from __future__ import annotations

from collections.abc import Iterator

from herald.audience.segmentation import conditions as segmentation_conditions
from herald.campaigns.schemas.filters import (
    OPERATORS_BY_DATA_TYPE,
    VALUELESS_OPERATORS,
    ActionFilter,
    Filter,
    FilterGroup,
    UserAttributeFilter,
)
from herald.campaigns.validation.context import Context, invalid_value, required
from herald.problems import Problem, join_path

FilterPath = tuple[str | int, ...]


def walk_filters(group: FilterGroup | None, path: FilterPath) -> Iterator[tuple[Filter, FilterPath]]:
    """Every filter in a group with its path, including those nested in an action's `attributes`."""
    if group is None:
        return
    for index, item in enumerate(group.filters):
        item_path = (*path, "filters", index)
        yield item, item_path
        if isinstance(item, ActionFilter):
            yield from walk_filters(item.attributes, (*item_path, "attributes"))


def campaign_filter_groups(ctx: Context) -> Iterator[tuple[FilterGroup | None, FilterPath]]:
    """The FilterGroups of the trigger and the segmentation, with their paths."""
    trigger = ctx.campaign.trigger_condition
    if trigger is not None:
        yield trigger.included_filters, ("trigger_condition", "included_filters")
        yield trigger.secondary_included_filters, ("trigger_condition", "secondary_included_filters")
    segmentation = ctx.campaign.segmentation_details
    if segmentation is not None:
        yield segmentation.included_filters, ("segmentation_details", "included_filters")
        yield segmentation.excluded_filters, ("segmentation_details", "excluded_filters")


def check_user_attribute_filter(item: UserAttributeFilter, path: FilterPath) -> list[Problem]:
    problems: list[Problem] = []
    allowed = OPERATORS_BY_DATA_TYPE[item.data_type]
    if item.operator not in allowed:
        names = ", ".join(sorted(op.value for op in allowed))
        problems.append(
            invalid_value(
                join_path(*path, "operator"),
                f"Operator '{item.operator.value}' does not apply to data_type "
                f"'{item.data_type.value}'; use one of: {names}.",
            )
        )
    elif item.operator not in VALUELESS_OPERATORS and item.value is None:
        problems.append(
            required(join_path(*path, "value"), f"'value' is required with operator '{item.operator.value}'.")
        )
    elif not item.is_dynamic_value or segmentation_conditions.dynamic_reference(item.value) is None:
        # The value's shape for its operator; a dynamic value names one attribute of the user (one
        # that does not was refused only at publish).
        problems += segmentation_conditions.check_value(item, path)
    return problems


def check_filter_group(group: FilterGroup | None, path: FilterPath) -> list[Problem]:
    problems: list[Problem] = []
    for item, item_path in walk_filters(group, path):
        if isinstance(item, UserAttributeFilter):
            problems += check_user_attribute_filter(item, item_path)
        elif "attributes" in item_path[len(path) :]:  # an action's attributes: refused only at publish
            problems.append(
                invalid_value(
                    join_path(*item_path, "filter_type"),
                    segmentation_conditions.ON_EVENTS_ONLY_USER_ATTRIBUTES,
                )
            )
    return problems
