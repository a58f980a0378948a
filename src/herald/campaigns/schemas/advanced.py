"""`advanced` (Push only): notification expiry and per-platform delivery priority."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from herald.campaigns.schemas.common import Flag, NonNegativeInt, Number
from herald.schemas import APIModel


class ExpireAfterType(StrEnum):
    HOUR = "HOUR"
    DAY = "DAY"


class ExpirationSettings(APIModel):
    expire_notification_after_value: NonNegativeInt | None = None
    expire_notification_after_type: ExpireAfterType | None = None
    remove_from_inbox_after_value: NonNegativeInt | None = None
    remove_from_inbox_after_type: Literal["DAY"] | None = None  # spec: DAY only; others fail


class AndroidSpecificPriority(APIModel):
    send_with_priority: Flag | None = None


class InterruptionLevel(StrEnum):
    # The spec's spellings, and the upper-snake forms clients also send (contract §5).
    PASSIVE = "Passive"
    ACTIVE = "Active"
    TIME_SENSITIVE = "Time sensitive"
    CRITICAL = "Critical"
    PASSIVE_UPPER = "PASSIVE"
    ACTIVE_UPPER = "ACTIVE"
    TIME_SENSITIVE_UPPER = "TIME_SENSITIVE"
    CRITICAL_UPPER = "CRITICAL"

    @property
    def canonical(self) -> InterruptionLevel:
        """The spec's spelling of this level."""
        return _CANONICAL.get(self, self)


_CANONICAL = {
    InterruptionLevel.PASSIVE_UPPER: InterruptionLevel.PASSIVE,
    InterruptionLevel.ACTIVE_UPPER: InterruptionLevel.ACTIVE,
    InterruptionLevel.TIME_SENSITIVE_UPPER: InterruptionLevel.TIME_SENSITIVE,
    InterruptionLevel.CRITICAL_UPPER: InterruptionLevel.CRITICAL,
}

# Described as two enums, the spec's spellings then the upper-snake ones: one enum of all eight would
# have two members per name once a generator makes identifiers of them (`Passive` and `PASSIVE`).
_INTERRUPTION_LEVEL_SCHEMA = {
    "description": "The spec's spellings; the upper-snake forms are accepted too (and kept as sent).",
    "anyOf": [
        {"type": "string", "enum": [level.value for level in _CANONICAL.values()]},
        {"type": "string", "enum": [level.value for level in _CANONICAL]},
    ],
}
InterruptionLevelField = Annotated[InterruptionLevel, WithJsonSchema(_INTERRUPTION_LEVEL_SCHEMA)]

RELEVANCE_SCORES = (0, 0.5, 1)
# Exactly those three, said as bounds and a step: client generators take a number's bounds, not an
# enum of numbers (one refused the schema whole).
_RELEVANCE_SCHEMA = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "multipleOf": 0.5,
    "description": "0, 0.5 or 1.",
}


def _relevance(value: float) -> float:
    if value not in RELEVANCE_SCORES:
        raise PydanticCustomError("INVALID_ENUM_VALUE", "relevance_score must be 0, 0.5 or 1.")
    return value


class IosSpecificPriority(APIModel):
    apns_priority: Literal["1", "5", "10"] | None = None
    interruption_level: InterruptionLevelField | None = None
    # int or float as sent (1 stays 1), restricted to the spec's three values.
    relevance_score: (
        Annotated[
            Number,
            AfterValidator(_relevance),
            WithJsonSchema(_RELEVANCE_SCHEMA),
        ]
        | None
    ) = None


class PlatformLevelPriority(APIModel):
    android_specific_priority: AndroidSpecificPriority | None = None
    ios_specific_priority: IosSpecificPriority | None = None


class Advanced(APIModel):
    expiration_settings: ExpirationSettings | None = None
    platform_level_priority: PlatformLevelPriority | None = None
