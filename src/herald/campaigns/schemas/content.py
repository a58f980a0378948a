"""`campaign_content`: locales, A/B variations and the per-channel message objects.

`content` comes in two forms (contract §5):
- flat: `{"push": {"android": P, "ios": P, "web": P}}` or `{"email": E}` — one locale, one variation;
- keyed: `{"default": {"variation_1": {"push": ...}, ...}, "es-ES": {...}}`.
The Push platform objects and the Email object are "not shown" beyond the names the contract lists,
so they keep unknown keys verbatim.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, JsonValue, Tag, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from herald.campaigns.schemas.common import (
    Integer,
    JsonObject,
    NonEmptyText,
    Percentage,
    Platform,
    PositiveInt,
    Text,
    VariationCount,
)
from herald.schemas import APIModel, OpenModel

DEFAULT_LOCALE = "default"
VARIATION_PREFIX = "variation_"

# Per-platform template types (spec rule 2; Web per the contract), the values of PushTemplateType.
AndroidTemplateType = Literal[
    "BASIC",
    "STYLIZED_BASIC",
    "SIMPLE_IMAGE_CAROUSEL",
    "IMAGE_BANNER_WITH_TEXT",
    "TIMER",
    "TIMER_WITH_PROGRESS_BAR",
    "Custom",
]
IosTemplateType = Literal["BASIC", "STYLIZED_BASIC", "SIMPLE_IMAGE_CAROUSEL", "Custom"]
WebTemplateType = Literal["BASIC"]

TemplateVersion = Text | Integer


class PushMessage(OpenModel):
    """The visible notification of one platform (`P.basic_details`)."""

    title: Text | None = None
    message: Text | None = None
    summary: Text | None = None
    subtitle: Text | None = None
    image_url: Text | None = None
    notification_channel: Text | None = None
    default_click_action: Text | None = None
    default_click_action_value: Text | None = None
    key_value_pairs: list[JsonObject] | None = None


class PushPlatformContent(OpenModel):
    """Fields shared by the Android, iOS and Web objects; `template_type` differs per platform."""

    template_type: str | None = None  # narrowed per platform below
    custom_template_id: NonEmptyText | None = None
    custom_template_version: TemplateVersion | None = None
    basic_details: PushMessage | None = None
    buttons: list[JsonObject] | None = None
    advanced: JsonObject | None = None
    template_backup: JsonObject | None = None
    timer: JsonObject | None = None
    carousel_content: JsonValue = None


class AndroidContent(PushPlatformContent):
    template_type: AndroidTemplateType | None = None


class IosContent(PushPlatformContent):
    template_type: IosTemplateType | None = None


class WebContent(PushPlatformContent):
    template_type: WebTemplateType | None = None


class PushPlatforms(APIModel):
    android: AndroidContent | None = None
    ios: IosContent | None = None
    web: WebContent | None = None

    def by_platform(self) -> Iterator[tuple[Platform, str, PushPlatformContent]]:
        """(platform, content key, object) for every platform object present."""
        for platform, key, value in (
            (Platform.ANDROID, "android", self.android),
            (Platform.IOS, "ios", self.ios),
            (Platform.WEB, "web", self.web),
        ):
            if value is not None:
                yield platform, key, value


class PushChannelContent(APIModel):
    push: PushPlatforms


class EmailContent(OpenModel):
    subject: Text | None = None
    preview_text: Text | None = None
    sender_name: Text | None = None
    from_address: Text | None = None
    reply_to_address: Text | None = None
    cc_ids: list[Text] | None = None
    bcc_ids: list[Text] | None = None
    # Declared before html_content so the exclusivity check below can see it.
    custom_template_id: NonEmptyText | None = None
    custom_template_version: TemplateVersion | None = None
    html_content: Text | None = None
    email_editor: Text | None = None
    # Kept as written; what a sent mail needs of each is `delivery.attachments` (validate and
    # publish report the rest).
    attachments: list[JsonObject] | None = Field(
        default=None,
        description="Files the mail carries: an item `{file_name, content, content_type?}` holds the file "
        "inline (`content`: its bytes in base64; validate reports, and publish and test sends refuse, one "
        "that cannot be carried). Any other item is kept as written (and not carried by SMTP).",
    )

    @field_validator("html_content")
    @classmethod
    def _not_with_custom_template(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Spec rule 1: the body comes either from a stored custom template or inline, never both.
        if value is not None and info.data.get("custom_template_id") is not None:
            raise PydanticCustomError(
                "MUTUALLY_EXCLUSIVE", "custom_template_id and html_content cannot both be sent."
            )
        return value


class EmailChannelContent(APIModel):
    email: EmailContent


class DistributionType(StrEnum):
    MANUAL = "MANUAL"
    SHERPA = "SHERPA"


class SherpaMetric(StrEnum):
    OPEN_RATE = "OPEN_RATE"
    CLICK_RATE = "CLICK_RATE"
    BOTH = "BOTH"


class VariationDetails(APIModel):
    distribution_type: DistributionType | None = None
    no_of_variations: VariationCount
    manual_distribution_percentage: dict[str, Percentage] | None = None
    sherpa_campaign_duration: PositiveInt | None = None
    sherpa_distribution_metric: SherpaMetric | None = None


# The keys that make a content body the flat form: a channel's name. SMS (which C9 previews) is
# one too, so a body of another channel's content is read as the flat form of the wrong channel
# (its own key missing, the other unknown), not as a locale holding odd variations.
CHANNEL_KEYS = frozenset({"push", "email", "sms"})


def _content_form(value: object) -> str:
    # A flat body names a channel at the top; anything else is read as locale -> variation.
    # (Also called with the parsed value when serializing.)
    if isinstance(value, PushChannelContent | EmailChannelContent):
        return "flat_form"
    if isinstance(value, dict) and not CHANNEL_KEYS.isdisjoint(value):
        return "flat_form"
    return "keyed_form"


def _disjoint_forms(schema: dict[str, Any]) -> None:
    """The JSON Schema of the two forms, stated as `_content_form` tells them apart: a keyed body has
    no `push` or `email` key, so the forms are disjoint and `anyOf` says what `oneOf` would (and
    schema tools can reason about `anyOf`: negating a `oneOf` of objects defeats some generators)."""
    flat, keyed = schema.pop("oneOf")
    keyed["propertyNames"] = {"not": {"enum": sorted(CHANNEL_KEYS)}}
    schema["anyOf"] = [flat, keyed]


PushContentForm = Annotated[
    Annotated[PushChannelContent, Tag("flat_form")]
    | Annotated[dict[str, dict[str, PushChannelContent]], Tag("keyed_form")],
    Discriminator(_content_form),
    Field(json_schema_extra=_disjoint_forms),
]
EmailContentForm = Annotated[
    Annotated[EmailChannelContent, Tag("flat_form")]
    | Annotated[dict[str, dict[str, EmailChannelContent]], Tag("keyed_form")],
    Discriminator(_content_form),
    Field(json_schema_extra=_disjoint_forms),
]

ContentPath = tuple[str, ...]


class PushCampaignContent(APIModel):
    locales: list[NonEmptyText] | None = None
    variation_details: VariationDetails | None = None
    content: PushContentForm

    def entries(self) -> Iterator[tuple[ContentPath, PushPlatforms]]:
        """Every (locale, variation) message set, with its path below `campaign_content.content`."""
        if isinstance(self.content, PushChannelContent):
            yield ("push",), self.content.push
            return
        for locale, variations in self.content.items():
            for variation, body in variations.items():
                yield (locale, variation, "push"), body.push


class EmailCampaignContent(APIModel):
    locales: list[NonEmptyText] | None = None
    variation_details: VariationDetails | None = None
    content: EmailContentForm

    def entries(self) -> Iterator[tuple[ContentPath, EmailContent]]:
        if isinstance(self.content, EmailChannelContent):
            yield ("email",), self.content.email
            return
        for locale, variations in self.content.items():
            for variation, body in variations.items():
                yield (locale, variation, "email"), body.email


CampaignContent = PushCampaignContent | EmailCampaignContent
