"""What every rule may read besides the campaign: the stage, the workspace's features, and hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from herald.campaigns import durations
from herald.campaigns.schemas.campaign import CampaignDocument
from herald.campaigns.schemas.common import Channel, DeliveryType, Feature, Granularity
from herald.campaigns.validation.sendable import TemplateBodies
from herald.problems import Problem

# A personalization checker: the error message for a text that does not parse, or None.
TemplateCheck = Callable[[str], str | None]


class Stage(StrEnum):
    """How much of a campaign a validation run demands (spec: create, update, validate/publish)."""

    DRAFT_CREATE = "DRAFT_CREATE"  # the components sent, each alone
    DRAFT_PATCH = "DRAFT_PATCH"  # the components sent in full, plus cross-component checks
    DRAFT_PUBLISH = "DRAFT_PUBLISH"  # the whole campaign, complete enough to go live


@dataclass(frozen=True, slots=True)
class Context:
    campaign: CampaignDocument
    stage: Stage
    features: frozenset[str]
    check_template: TemplateCheck
    # The workspace's e-mail connectors, name → type; None skips the check (publish sets it).
    configured_connectors: Mapping[str, str] | None = None
    # Names of the workspace's push connectors; None skips the check (publish sets it).
    push_connectors: frozenset[str] | None = None
    # The verified senders of the e-mail connectors that list some, by name (the others accept
    # any `from_address`); None skips the check (publish sets it).
    connector_senders: Mapping[str, Sequence[str]] | None = None
    # The custom templates the content names, as `sendable.TemplateBodies` (publish loads them):
    # a field one supplies is not missing.
    custom_templates: TemplateBodies = field(default_factory=dict)
    previous: CampaignDocument | None = None

    @property
    def channel(self) -> Channel:
        return self.campaign.channel

    @property
    def delivery_type(self) -> DeliveryType:
        return self.campaign.delivery_type

    @property
    def publishing(self) -> bool:
        return self.stage is Stage.DRAFT_PUBLISH

    def enabled(self, feature: Feature) -> bool:
        return feature.value in self.features


def required(target: str, message: str | None = None) -> Problem:
    field = target.rsplit(".", 1)[-1]
    return Problem("REQUIRED_FIELD_MISSING", target, message or f"'{field}' is required.")


def not_applicable(target: str, message: str) -> Problem:
    """A field sent where the rules say it does not belong (reported like an unknown field)."""
    return Problem("UNKNOWN_FIELD", target, message)


def invalid_value(target: str, message: str) -> Problem:
    return Problem("INVALID_ENUM_VALUE", target, message)


def invalid_type(target: str, message: str) -> Problem:
    """A value of the wrong type or form (as the schemas report a date-time that is not one)."""
    return Problem("INVALID_TYPE", target, message)


def out_of_range(target: str, message: str) -> Problem:
    return Problem("OUT_OF_RANGE", target, message)


def too_long(target: str, value: float | str | None, granularity: Granularity | str | None) -> list[Problem]:
    """A delay, window or period longer than any a campaign may name (`durations.LONGEST`)."""
    if value is None or not durations.too_long(value, granularity):
        return []
    name = target.rsplit(".", 1)[-1]
    return [out_of_range(target, f"{name} must be at most {durations.LONGEST_TEXT}.")]


def feature_not_enabled(target: str, feature: Feature) -> Problem:
    return Problem(
        "FEATURE_NOT_ENABLED",
        target,
        f"The '{feature.value}' feature is not enabled for this workspace.",
    )
