"""Campaign validation: pure rules from a campaign to a list of Problems (no I/O, no clock).

One entry point serves create, update, validate and publish; the stage says how much it demands:

- DRAFT_CREATE: the components sent, each alone (with the body's channel and delivery type);
- DRAFT_PATCH: the components sent, in full, plus the checks across components on the merged draft;
- DRAFT_PUBLISH: every component, plus completeness (contract §5 C4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from herald.campaigns.schemas.campaign import COMPONENT_NAMES, CampaignDocument
from herald.campaigns.validation import (
    audience,
    basic,
    content,
    delivery,
    features,
    publish,
    scheduling,
    templates,
    tracking,
    trigger,
)
from herald.campaigns.validation.context import Context, Stage, TemplateCheck
from herald.campaigns.validation.parse import (
    SoundPart,
    UpdateModels,
    load_document,
    parse_create,
    parse_update,
    sound_part,
)
from herald.campaigns.validation.sendable import TemplateBodies
from herald.campaigns.validation.templates import balanced_delimiters
from herald.campaigns.validation.tracking import unparsed_utm_params
from herald.problems import Problem

__all__ = [
    "SoundPart",
    "Stage",
    "TemplateCheck",
    "UpdateModels",
    "balanced_delimiters",
    "load_document",
    "parse_create",
    "parse_update",
    "sound_part",
    "unparsed_utm_params",
    "validate_campaign",
]

Rule = Callable[[Context], list[Problem]]

# The rules of each component, run when the component is validated.
COMPONENT_RULES: dict[str, tuple[Rule, ...]] = {
    "basic_details": (basic.check_basic_details,),
    "campaign_content": (content.check_campaign_content,),
    "connector": (),  # its shape is the model; whether it is configured is a publish check
    "trigger_condition": (trigger.check_trigger_condition, features.check_trigger_project_names),
    "segmentation_details": (audience.check_segmentation_details, features.check_segmentation_project_names),
    "scheduling_details": (scheduling.check_scheduling_details,),
    "delivery_controls": (features.check_queuing_feature, delivery.check_delivery_controls),
    "conversion_goal_details": (tracking.check_conversion_goal_details,),
    "control_group_details": (audience.check_control_group_details,),
    "utm_params": (tracking.check_utm_params,),
    "campaign_audience_limit": (
        features.check_audience_limit_feature,
        audience.check_campaign_audience_limit,
    ),
    "advanced": (delivery.check_advanced,),
}

# Rules on the body's top level and across components; they run at every stage.
CAMPAIGN_RULES: tuple[Rule, ...] = (
    basic.check_channel_delivery_type,
    basic.check_platforms,
    content.check_template_changes,
)


def validate_campaign(
    campaign: CampaignDocument,
    stage: Stage,
    features: frozenset[str],
    sent: frozenset[str] | None = None,
    *,
    configured_connectors: Mapping[str, str] | None = None,
    push_connectors: frozenset[str] | None = None,
    connector_senders: Mapping[str, Sequence[str]] | None = None,
    check_template: TemplateCheck | None = None,
    custom_templates: TemplateBodies | None = None,
    previous: CampaignDocument | None = None,
) -> list[Problem]:
    """Every problem of `campaign` at `stage`, in a stable order, each (code, target) once.

    - `features`: the workspace's feature flags that are on.
    - `sent`: the component names the request carried (create and patch); None means all present.
    - `configured_connectors`: the workspace's e-mail connectors, name → type; None skips that check.
    - `push_connectors`: names of the workspace's push connectors; None skips that check.
    - `connector_senders`: the verified senders of the e-mail connectors that list some, by name;
      None skips that check.
    - `check_template`: personalization parser (message or None); defaults to `balanced_delimiters`.
    - `custom_templates`: the bodies of the custom templates the content names (by message path):
      what they supply is not missing at DRAFT_PUBLISH.
    - `previous`: the stored campaign on DRAFT_PATCH, to detect a change of Push template type.
    """
    ctx = Context(
        campaign=campaign,
        stage=stage,
        features=features,
        check_template=check_template or balanced_delimiters,
        configured_connectors=configured_connectors,
        push_connectors=push_connectors,
        connector_senders=connector_senders,
        custom_templates=custom_templates or {},
        previous=previous,
    )
    if stage is Stage.DRAFT_PUBLISH or sent is None:
        names: tuple[str, ...] = COMPONENT_NAMES
    else:
        names = tuple(name for name in COMPONENT_NAMES if name in sent)
    problems: list[Problem] = []
    for campaign_rule in CAMPAIGN_RULES:
        problems += campaign_rule(ctx)
    for name in names:
        for rule in COMPONENT_RULES[name]:
            problems += rule(ctx)
    if stage is Stage.DRAFT_PUBLISH:
        problems += publish.check_publish(ctx)
        problems += templates.check_personalization(ctx)
    return _unique(problems)


def _unique(problems: list[Problem]) -> list[Problem]:
    # Publish completeness and a component rule may flag the same field; report it once.
    seen: set[tuple[str, str]] = set()
    unique: list[Problem] = []
    for problem in problems:
        key = (problem.code, problem.target)
        if key not in seen:
            seen.add(key)
            unique.append(problem)
    return unique
