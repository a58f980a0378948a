"""Rules for `campaign_content`: variations, locale and variation keys, and Push template types."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from herald.campaigns.schemas.basic_details import PushBasicDetails, PushTemplateType
from herald.campaigns.schemas.campaign import CampaignDocument
from herald.campaigns.schemas.content import (
    DEFAULT_LOCALE,
    VARIATION_PREFIX,
    CampaignContent,
    DistributionType,
    PushCampaignContent,
    PushPlatformContent,
    VariationDetails,
)
from herald.campaigns.validation.context import Context, Stage, not_applicable, out_of_range, required
from herald.campaigns.validation.sendable import filled, present
from herald.problems import Problem, join_path

FieldPath = tuple[str, ...]
_TITLE_AND_MESSAGE: tuple[FieldPath, ...] = (("basic_details", "title"), ("basic_details", "message"))

# What each Push template type needs before it can be sent, as paths inside a platform object.
# The spec names only BASIC's (title and message) and Custom's (custom_template_id); for the rest
# we require what the template visibly renders beyond title and message: the carousel's slides,
# the banner's image, the timer's settings.
REQUIRED_BY_TEMPLATE: dict[PushTemplateType, tuple[FieldPath, ...]] = {
    PushTemplateType.BASIC: _TITLE_AND_MESSAGE,
    PushTemplateType.STYLIZED_BASIC: _TITLE_AND_MESSAGE,
    PushTemplateType.SIMPLE_IMAGE_CAROUSEL: (*_TITLE_AND_MESSAGE, ("carousel_content",)),
    PushTemplateType.IMAGE_BANNER_WITH_TEXT: (*_TITLE_AND_MESSAGE, ("basic_details", "image_url")),
    PushTemplateType.TIMER: (*_TITLE_AND_MESSAGE, ("timer",)),
    PushTemplateType.TIMER_WITH_PROGRESS_BAR: (*_TITLE_AND_MESSAGE, ("timer",)),
    PushTemplateType.CUSTOM: (("custom_template_id",),),
}

CONTENT_ROOT: FieldPath = ("campaign_content", "content")


def variation_count(content: CampaignContent) -> int:
    return content.variation_details.no_of_variations if content.variation_details else 1


def variation_keys(count: int) -> list[str]:
    return [f"{VARIATION_PREFIX}{n}" for n in range(1, count + 1)]


def effective_template_type(obj: PushPlatformContent, campaign: CampaignDocument) -> PushTemplateType | None:
    """The platform object's own type, else the one `basic_details` names for every platform."""
    if obj.template_type is not None:
        return PushTemplateType(obj.template_type)
    details = campaign.basic_details
    return details.template_type if isinstance(details, PushBasicDetails) else None


def missing_template_fields(
    obj: PushPlatformContent, template_type: PushTemplateType, template: Mapping[str, Any] | None = None
) -> list[FieldPath]:
    """What `template_type` needs that the platform object lacks; `template`: the body of the
    custom template it names, whose fields count as its own (`sendable`)."""
    data: Any = filled(obj, template)
    missing: list[FieldPath] = []
    for path in REQUIRED_BY_TEMPLATE[template_type]:
        value = data
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if not present(value):
            missing.append(path)
    return missing


Slot = tuple[str, str, str]  # (locale, variation, platform key)


def push_objects(
    content: PushCampaignContent,
) -> Iterator[tuple[FieldPath, Slot, PushPlatformContent]]:
    """(path from the body root, slot, object) for every platform object.

    The slot names the object's place independently of the content form: flat content is the
    `default` locale's `variation_1`.
    """
    for entry_path, platforms in content.entries():
        locale, variation = entry_path[:2] if len(entry_path) == 3 else (DEFAULT_LOCALE, variation_keys(1)[0])
        for _, key, obj in platforms.by_platform():
            yield (*CONTENT_ROOT, *entry_path, key), (locale, variation, key), obj


def check_campaign_content(ctx: Context) -> list[Problem]:
    content = ctx.campaign.campaign_content
    if content is None:
        return []
    problems = _check_variation_details(content.variation_details)
    problems += _check_content_keys(content)
    if isinstance(content, PushCampaignContent):
        problems += _check_custom_templates(ctx, content)
    return problems


def _check_variation_details(details: VariationDetails | None) -> list[Problem]:
    if details is None:
        return []
    base = ("campaign_content", "variation_details")
    count = details.no_of_variations
    problems: list[Problem] = []
    if details.distribution_type is None and count > 1:
        problems.append(
            required(
                join_path(*base, "distribution_type"), "'distribution_type' is required with variations."
            )
        )
    if details.distribution_type is DistributionType.MANUAL:
        problems += _check_manual_split(details, base)
    if details.distribution_type is DistributionType.SHERPA:
        for name in ("sherpa_campaign_duration", "sherpa_distribution_metric"):
            if getattr(details, name) is None:
                problems.append(
                    required(
                        join_path(*base, name), f"'{name}' is required when distribution_type is SHERPA."
                    )
                )
    return problems


def _check_manual_split(details: VariationDetails, base: FieldPath) -> list[Problem]:
    target = join_path(*base, "manual_distribution_percentage")
    split = details.manual_distribution_percentage
    if split is None:
        return [
            required(target, "'manual_distribution_percentage' is required when distribution_type is MANUAL.")
        ]
    expected = variation_keys(details.no_of_variations)
    problems = [
        not_applicable(join_path(target, key), f"Expected only the keys {', '.join(expected)}.")
        for key in split
        if key not in expected
    ]
    problems += [required(join_path(target, key)) for key in expected if key not in split]
    if not problems and sum(split.values()) != 100:
        problems.append(out_of_range(target, f"Percentages must add up to 100, not {sum(split.values())}."))
    return problems


def _check_content_keys(content: CampaignContent) -> list[Problem]:
    count = variation_count(content)
    if not isinstance(content.content, dict):  # flat form: one locale, one variation
        if count > 1:
            return [
                required(
                    join_path(*CONTENT_ROOT, DEFAULT_LOCALE),
                    f"With {count} variations, content must be keyed by locale and variation "
                    f"(content.default.variation_1 ...).",
                )
            ]
        return []
    problems: list[Problem] = []
    if DEFAULT_LOCALE not in content.content:
        problems.append(
            required(join_path(*CONTENT_ROOT, DEFAULT_LOCALE), "The 'default' locale is required.")
        )
    listed = set(content.locales or ())
    expected = variation_keys(count)
    for locale, variations in content.content.items():
        locale_path = (*CONTENT_ROOT, locale)
        if locale != DEFAULT_LOCALE and locale not in listed:
            problems.append(
                not_applicable(
                    join_path(*locale_path), f"Locale '{locale}' is not listed in campaign_content.locales."
                )
            )
        problems += [
            not_applicable(
                join_path(*locale_path, key),
                f"Variation keys must be {', '.join(expected)} (variation_details.no_of_variations is {count}).",
            )
            for key in variations
            if key not in expected
        ]
        problems += [required(join_path(*locale_path, key)) for key in expected if key not in variations]
    return problems


def _check_custom_templates(ctx: Context, content: PushCampaignContent) -> list[Problem]:
    # Spec rule 2: a Custom template is rendered from a stored template, which must be named.
    problems: list[Problem] = []
    for path, _, obj in push_objects(content):
        if (
            effective_template_type(obj, ctx.campaign) is PushTemplateType.CUSTOM
            and not obj.custom_template_id
        ):
            problems.append(
                required(
                    join_path(*path, "custom_template_id"),
                    "'custom_template_id' is required for Custom templates.",
                )
            )
    return problems


def check_template_changes(ctx: Context) -> list[Problem]:
    """Spec rule 2: changing the template type needs every field of the new type in the same request.

    Only an update changes a type, and only where the stored campaign had a different one at the
    same locale, variation and platform. The type is the platform object's own or, without one,
    the one `basic_details` names: a change of either is a change, so this runs whichever of the
    two components the request sends.
    """
    previous = ctx.previous
    content = ctx.campaign.campaign_content
    if ctx.stage is not Stage.DRAFT_PATCH or previous is None:
        return []
    if not isinstance(previous.campaign_content, PushCampaignContent):
        return []
    if not isinstance(content, PushCampaignContent):
        return []
    before = {
        slot: effective_template_type(obj, previous)
        for _, slot, obj in push_objects(previous.campaign_content)
    }
    problems: list[Problem] = []
    for path, slot, obj in push_objects(content):
        new, old = effective_template_type(obj, ctx.campaign), before.get(slot)
        if new is None or old is None or new is old:
            continue
        for field in missing_template_fields(obj, new):
            problems.append(
                required(
                    join_path(*path, *field),
                    f"'{field[-1]}' is required by template type {new.value} "
                    f"(changed from {old.value}) and must be sent with the change.",
                )
            )
    return problems
