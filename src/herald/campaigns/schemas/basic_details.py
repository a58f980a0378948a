"""`basic_details`: the campaign's name, audience platforms, business event and geofences.

The spec names only `platforms`, `template_type`, `business_event` and `geofences`; the contract
adds the other known fields per channel. The shape is otherwise "not shown", so unknown keys are
kept verbatim (OpenModel). Geofences have a full table in the spec and stay strict.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Discriminator, Tag

from herald.campaigns.schemas.common import (
    CampaignName,
    DecimalString,
    Flag,
    Granularity,
    JsonObject,
    NonEmptyText,
    NumericString,
    Platform,
    TagText,
    Text,
)
from herald.schemas import APIModel, OpenModel


class PushTemplateType(StrEnum):
    BASIC = "BASIC"
    STYLIZED_BASIC = "STYLIZED_BASIC"
    SIMPLE_IMAGE_CAROUSEL = "SIMPLE_IMAGE_CAROUSEL"
    IMAGE_BANNER_WITH_TEXT = "IMAGE_BANNER_WITH_TEXT"
    TIMER = "TIMER"
    TIMER_WITH_PROGRESS_BAR = "TIMER_WITH_PROGRESS_BAR"
    CUSTOM = "Custom"  # mixed case, exactly as the spec spells it


# Spec rule 2 (and the contract for Web): the template types each platform accepts.
TEMPLATE_TYPES_BY_PLATFORM: dict[Platform, frozenset[PushTemplateType]] = {
    Platform.ANDROID: frozenset(PushTemplateType),
    Platform.IOS: frozenset(
        {
            PushTemplateType.BASIC,
            PushTemplateType.STYLIZED_BASIC,
            PushTemplateType.SIMPLE_IMAGE_CAROUSEL,
            PushTemplateType.CUSTOM,
        }
    ),
    Platform.WEB: frozenset({PushTemplateType.BASIC}),
}


class GeofenceTrigger(StrEnum):
    ENTRY = "ENTRY"
    EXIT = "EXIT"
    DWELL = "dwell"  # lowercase in the spec


class Geofence(APIModel):
    name: NonEmptyText
    latitude: DecimalString
    longitude: DecimalString
    radius: DecimalString
    triggered_at: GeofenceTrigger
    dwell_time_value: NumericString | None = None
    dwell_time_granularity: Granularity | None = None
    response_time_value: NumericString
    response_time_granularity: Granularity


def _geofences_form(value: object) -> str:
    return "list" if isinstance(value, list) else "object"


# The contract calls `geofences` an object while the spec's "unique name" implies several; both a
# single geofence object and an array of them are accepted and kept as sent.
Geofences = Annotated[
    Annotated[list[Geofence], Tag("list")] | Annotated[Geofence, Tag("object")],
    Discriminator(_geofences_form),
]


class PushBasicDetails(OpenModel):
    name: CampaignName | None = None
    platforms: list[Platform] | None = None
    template_type: PushTemplateType | None = None
    tags: list[TagText] | None = None
    team: Text | None = None
    business_event: NonEmptyText | None = None
    geofences: Geofences | None = None
    send_to_triggered_platform_only: Flag | None = None
    platform_specific_details: JsonObject | None = None


class EmailContentType(StrEnum):
    PROMOTIONAL = "PROMOTIONAL"
    TRANSACTIONAL = "TRANSACTIONAL"


class EmailBasicDetails(OpenModel):
    name: CampaignName | None = None
    content_type: EmailContentType | None = None
    subscription_category: Text | None = None
    user_attribute_identifier: Text | None = None
    tags: list[TagText] | None = None
    team: Text | None = None
    business_event: NonEmptyText | None = None


BasicDetails = PushBasicDetails | EmailBasicDetails
