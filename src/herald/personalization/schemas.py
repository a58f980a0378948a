"""The C9 request body (contract §5): channel, user, inline campaign content, event attributes.

Push and Email content are the campaign models (campaigns.schemas.content); SMS content, which v5
can preview but not create, is `{content: {sms: {message}}}` in the same flat or locale/variation form.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, RootModel, Tag, ValidationError

from herald.campaigns.schemas.campaign import RequestId
from herald.campaigns.schemas.common import NonEmptyText, Text
from herald.campaigns.schemas.content import (
    CHANNEL_KEYS,
    EmailCampaignContent,
    PushCampaignContent,
    VariationDetails,
)
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error
from herald.schemas import APIModel, OpenModel


class IdentificationType(StrEnum):
    USER_ATTRIBUTE_UNIQUE_ID = "USER_ATTRIBUTE_UNIQUE_ID"
    EMAIL = "EMAIL"
    SVC_GAID = "SVC_GAID"
    PUSH_ID = "PUSH_ID"


class UserIdentification(APIModel):
    type: IdentificationType
    value: Annotated[NonEmptyText, Field(max_length=500)]


class SmsMessage(OpenModel):
    message: Text


class SmsChannelContent(APIModel):
    sms: SmsMessage


def _sms_form(value: object) -> str:
    # As the campaign content forms tell theirs apart (`content._content_form`).
    if isinstance(value, SmsChannelContent) or (
        isinstance(value, dict) and not CHANNEL_KEYS.isdisjoint(value)
    ):
        return "flat_form"
    return "keyed_form"


SmsContentForm = Annotated[
    Annotated[SmsChannelContent, Tag("flat_form")]
    | Annotated[dict[str, dict[str, SmsChannelContent]], Tag("keyed_form")],
    Discriminator(_sms_form),
]


class SmsCampaignContent(APIModel):
    locales: list[NonEmptyText] | None = None
    variation_details: VariationDetails | None = None
    content: SmsContentForm


EventAttributes = dict[str, Text]


class _PreviewFields(APIModel):
    request_id: RequestId
    user_identification: UserIdentification
    event_attributes: EventAttributes | None = None


class PushPreview(_PreviewFields):
    channel: Literal["PUSH"]
    campaign_content: PushCampaignContent


class EmailPreview(_PreviewFields):
    channel: Literal["EMAIL"]
    campaign_content: EmailCampaignContent


class SmsPreview(_PreviewFields):
    channel: Literal["SMS"]
    campaign_content: SmsCampaignContent


class _AnyChannelPreview(_PreviewFields):
    """A body whose channel is missing or unknown: its other fields are still checked."""

    channel: Any = None
    campaign_content: Any


PreviewBody = PushPreview | EmailPreview | SmsPreview


class PreviewRequest(RootModel[Annotated[PreviewBody, Field(discriminator="channel")]]):
    """The request body as documented (the route reads it with `parse_preview`)."""


class MissingValue(BaseModel):
    field: str
    expression: str


class PreviewData(BaseModel):
    personalized_content: dict[str, Any]
    missing: list[MissingValue]


class PreviewResponse(BaseModel):
    """The 200 body (documentation only: the route writes it directly)."""

    response_id: str
    type: Literal["personalization"]
    data: PreviewData


_MODELS: dict[str, type[PushPreview] | type[EmailPreview] | type[SmsPreview]] = {
    "PUSH": PushPreview,
    "EMAIL": EmailPreview,
    "SMS": SmsPreview,
}


def parse_preview(raw: object) -> tuple[PreviewBody | None, list[Problem]]:
    """The body as a model, or None and every problem found in it."""
    if not isinstance(raw, Mapping):
        return None, [Problem("INVALID_TYPE", "", "The request body must be a JSON object.")]
    data = dict(raw)
    problems: list[Problem] = []
    if "draft_id" in data:
        del data["draft_id"]
        problems.append(
            Problem(
                "UNKNOWN_FIELD",
                "draft_id",
                "Preview takes inline campaign_content only; a saved draft cannot be previewed by id.",
            )
        )
    channel = data.get("channel")
    model = _MODELS.get(channel) if isinstance(channel, str) else None
    if model is None:
        if "channel" not in data:
            problems.append(Problem("REQUIRED_FIELD_MISSING", "channel", "'channel' is required."))
        else:
            problems.append(Problem("INVALID_ENUM_VALUE", "channel", "channel must be PUSH, EMAIL or SMS."))
        try:
            _AnyChannelPreview.model_validate(data)
        except ValidationError as exc:
            problems += problems_from_validation_error(exc, data)
        return None, problems
    try:
        body = model.model_validate(data)
    except ValidationError as exc:
        return None, [*problems, *problems_from_validation_error(exc, data)]
    return (None, problems) if problems else (body, [])
