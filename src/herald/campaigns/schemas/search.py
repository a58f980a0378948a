"""Bodies of Search campaigns (C6) and Get campaign meta (C7), contract §5.

Both page with `limit` (1-15) and `page` (from 1), both required. There is no `sender_name` filter:
like any unknown field it is refused (UNKNOWN_FIELD).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, TypeVar

from pydantic import AfterValidator, Field, Strict, model_validator
from pydantic_core import PydanticCustomError

from herald.campaigns.schemas.common import (
    CampaignStatus,
    Channel,
    DeliveryType,
    Flag,
    NonEmptyText,
    resolve_datetime,
)
from herald.db import INTEGER_MAX
from herald.json_numbers import IntegralFloat
from herald.schemas import APIModel
from herald.timefmt import DATE_OR_DATE_TIME_PATTERN, LATEST, day_end, day_start

MAX_PAGE_SIZE = 15  # spec, Limits: at most 15 campaigns per page

_DATE_ONLY = 10  # len("YYYY-MM-DD")


_DATE_BOUND = re.compile(DATE_OR_DATE_TIME_PATTERN)


def _date_bound(value: str) -> str:
    if not _DATE_BOUND.fullmatch(value):
        raise PydanticCustomError(
            "INVALID_TYPE",
            "Expected a date (YYYY-MM-DD) or an ISO 8601 date-time such as 2026-03-01T09:30:00Z.",
        )
    return value


DateBound = Annotated[
    str,
    Strict(),
    AfterValidator(_date_bound),
    Field(json_schema_extra={"pattern": DATE_OR_DATE_TIME_PATTERN}),
]


def bound_instant(value: str, *, end: bool) -> datetime:
    """A date bound as a UTC instant: a whole date starts at 00:00 UTC; as an end it includes its day
    (the instant returned is then exclusive); a date-time without zone is UTC. Bounds beyond what a
    date-time holds (the day after 9999-12-31, a year-1 time east of UTC) are the nearest one that is."""
    if len(value) == _DATE_ONLY:
        day = date.fromisoformat(value)
        return (day_end(day) or LATEST) if end else day_start(day)
    return resolve_datetime(value)  # checked by DateBound


class CreatedDate(APIModel):
    from_date: DateBound | None = None
    to_date: DateBound | None = None

    @model_validator(mode="after")
    def _ordered(self) -> CreatedDate:
        if self.from_date and self.to_date:
            start = bound_instant(self.from_date, end=False)
            if bound_instant(self.to_date, end=True) <= start:
                raise PydanticCustomError("OUT_OF_RANGE", "to_date must not be before from_date.")
        return self


Name = Annotated[str, Strict(), Field(min_length=1, max_length=500)]
VersionNumber = Annotated[int, Strict(), Field(ge=1, le=INTEGER_MAX), IntegralFloat]


# Values one filter list may hold: each is a parameter of the statement, and a driver takes at
# most 32,767 (a longer list answered 500 on PostgreSQL); a thousand is more than any screen sends.
MAX_FILTER_VALUES = 1000
T = TypeVar("T")
Values = Annotated[list[T], Field(max_length=MAX_FILTER_VALUES)]


class _CommonFields(APIModel):
    name: Name | None = None  # case-insensitive substring
    channels: Values[Channel] | None = None
    status: Values[CampaignStatus] | None = None
    created_by: Values[NonEmptyText] | None = None
    tags: Values[NonEmptyText] | None = None  # any of them
    created_date: CreatedDate | None = None


class SearchFields(_CommonFields):
    ids: Values[NonEmptyText] | None = None  # a campaign_id (every version) or a version's id
    campaign_delivery_type: Values[DeliveryType] | None = None
    version_number: VersionNumber | None = None


class MetaFields(_CommonFields):
    id: NonEmptyText | None = None
    delivery_type: DeliveryType | None = None
    campaign_delivery_type: Values[DeliveryType] | None = None  # accepted too; any of both


PageSize = Annotated[int, Strict(), Field(ge=1, le=MAX_PAGE_SIZE), IntegralFloat]
# Bounded so that the page's OFFSET stays a 64-bit integer; no workspace has that many pages.
PageNumber = Annotated[int, Strict(), Field(ge=1, le=INTEGER_MAX), IntegralFloat]


class _PageBody(APIModel):
    limit: PageSize
    page: PageNumber
    request_id: Annotated[str, Strict(), Field(min_length=1, max_length=128)] | None = None
    # Rows with a parent (periodic children) or a flow (flow nodes) only when true.
    include_child_campaigns: Flag = False
    # ARCHIVED rows only when true, whatever `status` lists.
    include_archive_campaigns: Flag = False


class SearchBody(_PageBody):
    campaign_fields: SearchFields | None = None


class MetaBody(_PageBody):
    campaign_fields: MetaFields | None = None
