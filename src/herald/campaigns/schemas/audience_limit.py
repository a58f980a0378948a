"""`campaign_audience_limit`: a cap on how many users a campaign reaches (feature-gated)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, Strict

from herald.campaigns.schemas.common import Flag
from herald.json_numbers import IntegralFloat
from herald.schemas import APIModel

AUDIENCE_LIMIT_MAX = 9_999_999_999

AudienceLimitValue = Annotated[int, Strict(), Field(ge=1, le=AUDIENCE_LIMIT_MAX), IntegralFloat]


class AudienceLimitMetric(StrEnum):
    SENT = "SENT"


class AudienceLimitFrequency(StrEnum):
    TOTAL = "TOTAL"  # lifetime of the campaign
    INSTANCE = "INSTANCE"  # per send; Periodic Push only


class CampaignAudienceLimit(APIModel):
    is_campaign_audience_limit_enabled: Flag
    metric: AudienceLimitMetric | None = None
    frequency: AudienceLimitFrequency | None = None
    limit: AudienceLimitValue | None = None


LIMIT_FIELDS: tuple[str, ...] = ("metric", "frequency", "limit")
