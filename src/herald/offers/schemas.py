"""Offer response shapes (documented in the OpenAPI; bodies are built by the service)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from herald.ids import OFFER_ID_PATTERN
from herald.offers.status import OfferStatus
from herald.timefmt import RFC3339_PATTERN

OfferId = Annotated[str, Field(pattern=OFFER_ID_PATTERN, examples=["offer_65f1c0ffee0123456789abcd"])]
# The offers' timestamps: RFC 3339 in UTC with `Z` (`timefmt.rfc3339`).
Instant = Annotated[
    str,
    Field(
        json_schema_extra={"format": "date-time", "pattern": RFC3339_PATTERN},
        examples=["2026-01-15T12:00:00Z"],
    ),
]


def _sparse(schema: dict[str, Any]) -> None:
    # `fields` selects the fields an item carries: none is required, and one left out is absent,
    # never null (`service.list_offers`).
    del schema["required"]


class OfferSummary(BaseModel):
    """An offering as O1 lists it: these six fields, or those `fields` selects. `tags` is absent
    when the offering has none."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_sparse)

    id: OfferId
    name: str
    status: OfferStatus = Field(examples=["active"])
    tags: list[str]
    created_at: Instant
    created_by: str


class Pagination(BaseModel):
    next_cursor: str | None
    limit: int
    has_more: bool
    total_count: int = Field(ge=0, json_schema_extra={"format": "int64"})


class OfferListResponse(BaseModel):
    response_id: str
    type: Literal["offer"]
    data: list[OfferSummary]
    pagination: Pagination


class OfferCreated(BaseModel):
    id: OfferId
    status: OfferStatus = Field(examples=["scheduled"])
    created_at: Instant


class OfferChanged(BaseModel):
    id: OfferId
    status: OfferStatus = Field(examples=["active"])
    updated_at: Instant


class OfferCreatedResponse(BaseModel):
    response_id: str
    type: Literal["offer"]
    data: OfferCreated


class OfferChangedResponse(BaseModel):
    response_id: str
    type: Literal["offer"]
    data: OfferChanged


class TemplateItem(BaseModel):
    id: str
    value: str = Field(description="Equals id.")
    label: str
    template_type: list[str]


class TemplateListResponse(BaseModel):
    response_id: str
    type: Literal["template"]
    data: list[TemplateItem]
    pagination: Pagination
