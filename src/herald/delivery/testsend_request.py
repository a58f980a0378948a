"""The C8 body (contract §5): its models, and reading a raw body into every problem it has.

Two modes: draft (`draft_id`, content from the saved campaign) and inline (`channel` +
`campaign_content`, plus `connector` for Email). Channel-specific parts are read with the campaign
component models of the channel, so a test body is checked exactly like a campaign's content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, JsonValue, Strict, ValidationError

from herald.campaigns.schemas.basic_details import BasicDetails, EmailBasicDetails, PushBasicDetails
from herald.campaigns.schemas.common import Channel, NonEmptyText, Platform
from herald.campaigns.schemas.connector import Connector as ConnectorRef
from herald.campaigns.schemas.content import (
    VARIATION_PREFIX,
    CampaignContent,
    EmailCampaignContent,
    PushCampaignContent,
)
from herald.email_address import RECIPIENT_RULE, is_recipient_address
from herald.errors import ValidationFailed
from herald.json_numbers import Int64, IntegralFloat
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error
from herald.schemas import APIModel

MAX_RECIPIENTS = 10
M = TypeVar("M", bound=BaseModel)


class Identifier(StrEnum):
    # Push
    USER_ATTRIBUTE_UNIQUE_ID = "USER_ATTRIBUTE_UNIQUE_ID"
    USER_ATTRIBUTE_USER_EMAIL = "USER_ATTRIBUTE_USER_EMAIL"
    USER_ATTRIBUTE_USER_MOBILE = "USER_ATTRIBUTE_USER_MOBILE"
    SVC_GAID = "SVC_GAID"
    ADVERTISING_IDENTIFIER = "ADVERTISING_IDENTIFIER"
    PUSH_ID = "PUSH_ID"
    # Email
    EMAIL = "EMAIL"
    ID = "ID"
    MOBILE_NUMBER = "MOBILE_NUMBER"
    # both
    CUSTOM_SEGMENT = "CUSTOM_SEGMENT"


IDENTIFIERS_BY_CHANNEL: dict[Channel, tuple[Identifier, ...]] = {
    Channel.PUSH: (
        Identifier.USER_ATTRIBUTE_UNIQUE_ID,
        Identifier.USER_ATTRIBUTE_USER_EMAIL,
        Identifier.USER_ATTRIBUTE_USER_MOBILE,
        Identifier.SVC_GAID,
        Identifier.ADVERTISING_IDENTIFIER,
        Identifier.PUSH_ID,
        Identifier.CUSTOM_SEGMENT,
    ),
    Channel.EMAIL: (Identifier.EMAIL, Identifier.ID, Identifier.MOBILE_NUMBER, Identifier.CUSTOM_SEGMENT),
}

IdentifierValue = Annotated[str, Strict(), Field(min_length=1, max_length=500)]
Variation = Annotated[str, Strict()] | Annotated[int, Strict(), Int64, IntegralFloat]
RequestId = Annotated[str, Strict(), Field(min_length=1, max_length=128)]


class CampaignTestMeta(APIModel):
    identifier: Identifier
    identifier_values: Annotated[
        list[IdentifierValue],
        Field(
            min_length=1,
            max_length=MAX_RECIPIENTS,
            description="The recipients, named as `identifier` says. With `EMAIL`, each is an "
            f"e-mail address: {RECIPIENT_RULE}.",
        ),
    ]
    platform: Platform | None = None
    locale_name: NonEmptyText | None = None
    # `variation_2`, or just 2.
    variation: Variation | None = None


class PersonalizationDetails(APIModel):
    """Values that win over the recipient's profile (and stand in for the triggering event)."""

    user_attributes: dict[str, JsonValue] | None = None
    event_attributes: dict[str, JsonValue] | None = None


class CampaignTestBody(APIModel):
    """The envelope of the body; channel-specific components are read by `parse_test_body`."""

    request_id: RequestId | None = None
    test_campaign_meta: CampaignTestMeta
    draft_id: NonEmptyText | None = None
    channel: Literal["PUSH", "EMAIL"] | None = None
    campaign_content: dict[str, Any] | None = None
    basic_details: dict[str, Any] | None = None
    connector: dict[str, Any] | None = None
    personalization_details: PersonalizationDetails | None = None


class CampaignTestDoc(CampaignTestBody):
    """The same body with its components typed, for the OpenAPI description."""

    campaign_content: PushCampaignContent | EmailCampaignContent | None = None  # type: ignore[assignment]
    basic_details: PushBasicDetails | EmailBasicDetails | None = None  # type: ignore[assignment]
    connector: ConnectorRef | None = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CampaignTestRequest:
    """A body that passed every check that needs nothing but the body."""

    meta: CampaignTestMeta
    draft_id: str | None
    channel: Channel | None  # inline: required; draft: optional, must match the draft
    content: CampaignContent | None
    basic_details: BasicDetails | None
    connector: ConnectorRef | None
    user_overrides: dict[str, Any] = field(default_factory=dict)
    event_attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def variation_key(self) -> str | None:
        return variation_key(self.meta.variation)


_CONTENT_MODELS: dict[Channel, type[PushCampaignContent] | type[EmailCampaignContent]] = {
    Channel.PUSH: PushCampaignContent,
    Channel.EMAIL: EmailCampaignContent,
}
_BASIC_MODELS: dict[Channel, type[PushBasicDetails] | type[EmailBasicDetails]] = {
    Channel.PUSH: PushBasicDetails,
    Channel.EMAIL: EmailBasicDetails,
}
_VARIATION = re.compile(rf"^{VARIATION_PREFIX}([1-9][0-9]*)$")


def variation_key(value: str | int | None) -> str | None:
    """`variation_<n>` for a variation given as that key or as n; None when it is neither."""
    if isinstance(value, int):
        return f"{VARIATION_PREFIX}{value}" if value >= 1 else None
    if isinstance(value, str) and _VARIATION.fullmatch(value):
        return value
    return None


def _read(model: type[M], raw: object, prefix: str) -> tuple[M | None, list[Problem]]:
    try:
        return model.model_validate(raw), []
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, raw, (prefix,))


def parse_test_body(raw: object) -> tuple[CampaignTestRequest | None, list[Problem]]:
    """The request, or None and every problem the body alone shows (contract §5 C8)."""
    if not isinstance(raw, dict):
        return None, [Problem("INVALID_TYPE", "", "The request body must be a JSON object.")]
    body, problems = _read_envelope(raw)
    if body is None:
        return None, problems
    problems += _mode_problems(body)
    variation = body.test_campaign_meta.variation
    if variation is not None and variation_key(variation) is None:
        problems.append(
            Problem(
                "INVALID_TYPE",
                "test_campaign_meta.variation",
                "variation must be a key such as 'variation_2', or its number (2).",
            )
        )
    channel = Channel(body.channel) if body.channel else None
    content = basic = connector = None
    if channel is not None:
        if body.campaign_content is not None:
            content, found = _read(_CONTENT_MODELS[channel], body.campaign_content, "campaign_content")
            problems += found
        if body.basic_details is not None:
            basic, found = _read(_BASIC_MODELS[channel], body.basic_details, "basic_details")
            problems += found
    if body.connector is not None:
        connector, found = _read(ConnectorRef, body.connector, "connector")
        problems += found
    if problems:
        return None, problems
    overrides = body.personalization_details or PersonalizationDetails()
    return CampaignTestRequest(
        meta=body.test_campaign_meta,
        draft_id=body.draft_id,
        channel=channel,
        content=content,
        basic_details=basic,
        connector=connector,
        user_overrides=dict(overrides.user_attributes or {}),
        event_attributes=dict(overrides.event_attributes or {}),
    ), []


def check_test_body(raw: object) -> CampaignTestRequest:
    """`parse_test_body`, every problem raised (400): what the route refuses before reading
    anything, and what the guard answers with a refused head (`Operation.body_check`)."""
    request, problems = parse_test_body(raw)
    if request is None:
        raise ValidationFailed(problems)
    return request


def _read_envelope(raw: dict[str, Any]) -> tuple[CampaignTestBody | None, list[Problem]]:
    body, problems = _read(CampaignTestBody, raw, "")
    if body is not None:
        return body, []
    # Report the components' own problems too when the envelope fails, so one answer lists all.
    channel = raw.get("channel")
    if channel in ("PUSH", "EMAIL"):
        for name, models in (("campaign_content", _CONTENT_MODELS), ("basic_details", _BASIC_MODELS)):
            if isinstance(raw.get(name), dict):
                problems += _read(models[Channel(channel)], raw[name], name)[1]
    return None, problems


def _mode_problems(body: CampaignTestBody) -> list[Problem]:
    """Draft mode xor inline mode, and what each mode requires or forbids."""
    problems: list[Problem] = []
    if body.draft_id is not None:
        for name in ("campaign_content", "basic_details"):
            if getattr(body, name) is not None:
                problems.append(
                    Problem(
                        "MUTUALLY_EXCLUSIVE",
                        name,
                        f"'{name}' cannot be sent with draft_id: a draft test uses the saved campaign.",
                    )
                )
        return problems
    if body.campaign_content is None:
        problems.append(
            Problem(
                "REQUIRED_FIELD_MISSING",
                "draft_id" if body.channel is None else "campaign_content",
                "Send draft_id (test a saved campaign) or channel and campaign_content (test inline content).",
            )
        )
    if body.channel is None and body.campaign_content is not None:
        problems.append(
            Problem("REQUIRED_FIELD_MISSING", "channel", "'channel' is required with campaign_content.")
        )
    if body.channel == Channel.EMAIL and body.connector is None:
        problems.append(
            Problem(
                "REQUIRED_FIELD_MISSING",
                "connector",
                "An inline Email test names the connector to send through.",
            )
        )
    return problems


def channel_problems(request: CampaignTestRequest, channel: Channel) -> list[Problem]:
    """What depends on the channel (known from the body, or from the draft)."""
    problems: list[Problem] = []
    meta = request.meta
    if meta.identifier not in IDENTIFIERS_BY_CHANNEL[channel]:
        allowed = ", ".join(IDENTIFIERS_BY_CHANNEL[channel])
        problems.append(
            Problem(
                "INVALID_ENUM_VALUE",
                "test_campaign_meta.identifier",
                f"{meta.identifier.value} does not identify {channel.value} recipients; use one of {allowed}.",
            )
        )
    if meta.identifier is Identifier.EMAIL:
        # The rule a user's `email` passes at ingestion: a test goes where a live message would.
        problems += [
            Problem(
                "INVALID_TYPE",
                f"test_campaign_meta.identifier_values.{index}",
                f"'{value}' is not an e-mail address.",
            )
            for index, value in enumerate(meta.identifier_values)
            if not is_recipient_address(value)
        ]
    if meta.platform is not None and channel is Channel.EMAIL:
        problems.append(
            Problem("INVALID_ENUM_VALUE", "test_campaign_meta.platform", "platform narrows Push tests only.")
        )
    return problems
