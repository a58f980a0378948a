"""Rules for `utm_params` and `conversion_goal_details`."""

from __future__ import annotations

from collections.abc import Sequence

from herald.campaigns.schemas.common import Granularity
from herald.campaigns.schemas.utm import MAX_CUSTOM_UTM_KEYS, UTM_PREFIX, UtmParams
from herald.campaigns.validation.context import Context, not_applicable, out_of_range, required, too_long
from herald.problems import Problem, fields_at_fault, join_path

_UTM = "utm_params"
_NAMED_KEYS = frozenset(UtmParams.model_fields)


def check_utm_params(ctx: Context) -> list[Problem]:
    utm = ctx.campaign.utm_params
    if utm is None:
        return []
    return _custom_key_problems(utm.custom_keys())


def unparsed_utm_params(raw: object, problems: Sequence[Problem]) -> list[Problem]:
    """The custom keys' rules of a body's `utm_params` that did not parse (`problems` name it: a
    named key missing, say), read from the keys as sent: the rules of a component that did not
    parse are otherwise never reached, and a client would learn of its keys only once the types
    were fixed (contract §3: all violations in one response)."""
    utm = raw.get(_UTM) if isinstance(raw, dict) else None
    # Refused as a whole (not an object, or not a component of this campaign): nothing to add.
    whole = any(problem.target == _UTM for problem in problems)
    if not isinstance(utm, dict) or _UTM not in fields_at_fault(problems) or whole:
        return []
    return _custom_key_problems([key for key in utm if key not in _NAMED_KEYS])


def _custom_key_problems(custom: list[str]) -> list[Problem]:
    problems = [
        not_applicable(
            join_path(_UTM, key), f"Custom UTM keys must start with '{UTM_PREFIX}'; '{key}' does not."
        )
        for key in custom
        if not key.startswith(UTM_PREFIX)
    ]
    if len(custom) > MAX_CUSTOM_UTM_KEYS:
        problems.append(
            out_of_range(
                _UTM, f"At most {MAX_CUSTOM_UTM_KEYS} custom UTM keys are allowed; {len(custom)} were sent."
            )
        )
    return problems


def check_conversion_goal_details(ctx: Context) -> list[Problem]:
    details = ctx.campaign.conversion_goal_details
    if details is None:
        return []
    problems = too_long(
        "conversion_goal_details.attribution_window_in_hours",
        details.attribution_window_in_hours,
        Granularity.HOURS,
    )
    for index, goal in enumerate(details.goals or []):
        attribute = goal.goal_event_attribute
        # `between` compares against two bounds: value and value1.
        if attribute is not None and attribute.condition == "between" and attribute.value1 is None:
            problems.append(
                required(
                    join_path("conversion_goal_details", "goals", index, "goal_event_attribute", "value1"),
                    "'value1' (the upper bound) is required when condition is 'between'.",
                )
            )
    return problems
