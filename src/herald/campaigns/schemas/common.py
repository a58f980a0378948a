"""Enums and constrained types shared by every campaign component.

Scalars are strict (`"5"` is not an integer, `1` is not a boolean) so that what a client sends is
what we store and return: a parsed component dumps back to exactly the JSON it came from.
Date-times stay strings for the same reason; `resolve_datetime` reads them when a rule needs a value.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated
from zoneinfo import ZoneInfo

from pydantic import AfterValidator, Field, JsonValue, Strict
from pydantic_core import PydanticCustomError

from herald.json_numbers import Int64, IntegralFloat
from herald.timefmt import DATE_TIME_PATTERN, as_utc, parse_iso_datetime
from herald.timezones import IANA_NAME_DESCRIPTION, is_timezone


class Channel(StrEnum):
    """Every channel a stored campaign can have; only PUSH and EMAIL can be created in v5."""

    PUSH = "PUSH"
    EMAIL = "EMAIL"
    SMS = "SMS"
    WHATSAPP = "WHATSAPP"
    FACEBOOK = "FACEBOOK"
    GOOGLE_ADS = "GOOGLE ADS"
    CONNECTORS = "CONNECTORS"


CREATABLE_CHANNELS: frozenset[Channel] = frozenset({Channel.PUSH, Channel.EMAIL})


class DeliveryType(StrEnum):
    ONE_TIME = "ONE_TIME"
    PERIODIC = "PERIODIC"
    EVENT_TRIGGERED = "EVENT_TRIGGERED"
    BUSINESS_EVENT_TRIGGERED = "BUSINESS_EVENT_TRIGGERED"
    DEVICE_TRIGGERED = "DEVICE_TRIGGERED"
    LOCATION_TRIGGERED = "LOCATION_TRIGGERED"
    BROADCAST_LIVE_ACTIVITY = "BROADCAST_LIVE_ACTIVITY"


# Spec "Delivery types": which delivery types each creatable channel supports.
DELIVERY_TYPES_BY_CHANNEL: dict[Channel, frozenset[DeliveryType]] = {
    Channel.PUSH: frozenset(DeliveryType),
    Channel.EMAIL: frozenset(
        {
            DeliveryType.ONE_TIME,
            DeliveryType.PERIODIC,
            DeliveryType.EVENT_TRIGGERED,
            DeliveryType.BUSINESS_EVENT_TRIGGERED,
        }
    ),
}

# The delivery types whose sends are caused by something a user or the business does.
TRIGGERED_TYPES: frozenset[DeliveryType] = frozenset(
    {
        DeliveryType.EVENT_TRIGGERED,
        DeliveryType.BUSINESS_EVENT_TRIGGERED,
        DeliveryType.DEVICE_TRIGGERED,
        DeliveryType.LOCATION_TRIGGERED,
    }
)


class CampaignStatus(StrEnum):
    DRAFT = "DRAFT"
    SCHEDULED = "SCHEDULED"
    ACTIVE = "ACTIVE"
    SENDING = "SENDING"
    PAUSED = "PAUSED"
    SENT = "SENT"
    STOPPED = "STOPPED"
    ARCHIVED = "ARCHIVED"


class Platform(StrEnum):
    ANDROID = "ANDROID"
    IOS = "IOS"
    WEB = "WEB"


class Granularity(StrEnum):
    MINUTES = "MINUTES"
    HOURS = "HOURS"
    DAYS = "DAYS"


class Feature(StrEnum):
    """Workspace feature flags that change what a campaign may contain."""

    CAMPAIGN_AUDIENCE_LIMIT = "campaign_audience_limit"
    QUEUING = "queuing"
    PORTFOLIO = "portfolio"
    VERSIONING = "versioning"
    CAMPAIGN_META = "campaign_meta"


# ---- constrained scalar types, declared once -------------------------------------------------

Text = Annotated[str, Strict()]
NonEmptyText = Annotated[str, Strict(), Field(min_length=1)]
# Bounded as their columns are (`campaigns.name`, `campaign_tags.tag`): past them PostgreSQL
# refused the row (a 500) while SQLite kept it whole.
CampaignName = Annotated[str, Strict(), Field(max_length=500)]
TagText = Annotated[str, Strict(), Field(max_length=200)]
Flag = Annotated[bool, Strict()]
Integer = Annotated[int, Strict(), Int64, IntegralFloat]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0), Int64, IntegralFloat]
PositiveInt = Annotated[int, Strict(), Field(ge=1), Int64, IntegralFloat]
Percentage = Annotated[int, Strict(), Field(ge=0, le=100), IntegralFloat]
# Variations a campaign may have: each takes a whole percent at least of a MANUAL split (which sums
# to 100). Unbounded, a count of 15,575,900 made C1 list that many missing variations per locale,
# and the server was killed for its memory (23 GB) before it answered.
MAX_VARIATIONS = 100
VariationCount = Annotated[int, Strict(), Field(ge=1, le=MAX_VARIATIONS), IntegralFloat]
Number = Annotated[int, Strict()] | Annotated[float, Strict()]
JsonObject = dict[str, JsonValue]

# ASCII digits only, and the whole value (`$` would let a trailing newline through): `\d` also
# matches other scripts' digits ("٢٠٠"), which `float` reads.
_UNSIGNED = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def _unsigned_string(value: str) -> str:
    if not _UNSIGNED.fullmatch(value):
        raise PydanticCustomError("INVALID_TYPE", 'Expected a whole number written as a string, like "12".')
    return value


def _decimal_string(value: str) -> str:
    if not _DECIMAL.fullmatch(value):
        raise PydanticCustomError(
            "INVALID_TYPE", 'Expected a decimal number written as a string, like "12.5".'
        )
    return value


# The spec types several counts and coordinates as strings; they must still read as numbers.
NumericString = Annotated[str, Strict(), AfterValidator(_unsigned_string)]
DecimalString = Annotated[str, Strict(), AfterValidator(_decimal_string)]


def _timezone(value: str) -> str:
    if not is_timezone(value):
        raise PydanticCustomError(
            "INVALID_ENUM_VALUE", "'{value}' is not an IANA timezone name.", {"value": value}
        )
    return value


TimezoneName = Annotated[str, Strict(), AfterValidator(_timezone), Field(description=IANA_NAME_DESCRIPTION)]


def _iso_datetime(value: str) -> str:
    if parse_iso_datetime(value) is None:
        raise PydanticCustomError(
            "INVALID_TYPE", "Expected an ISO 8601 date-time such as 2026-03-01T09:30:00Z."
        )
    return value


IsoDateTime = Annotated[
    str, Strict(), AfterValidator(_iso_datetime), Field(json_schema_extra={"pattern": DATE_TIME_PATTERN})
]


def resolve_datetime(value: str, timezone: str | None = None) -> datetime:
    """The instant a request date-time names (contract §3).

    A value with an offset is taken as is; one without is read in the component's `timezone`
    when it has one, else in UTC. The instant is returned in UTC (`timefmt.as_utc`). Raises
    ValueError for text that is not a date-time.
    """
    parsed = parse_iso_datetime(value)
    if parsed is None:
        raise ValueError(f"not an ISO 8601 date-time: {value!r}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=ZoneInfo(timezone) if timezone else UTC)
    return as_utc(parsed)
