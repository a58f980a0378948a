"""Offer response shapes (documented in the OpenAPI; bodies are built by the service)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class OfferSummary(BaseModel):
    id: str | None = Field(None, examples=["offer_65f1c0ffee0123456789abcd"])
    name: str | None = None
    status: str | None = Field(None, examples=["active"])
    tags: list[str] | None = None
    created_at: str | None = Field(None, examples=["2026-01-15T12:00:00Z"])
    created_by: str | None = None


class Pagination(BaseModel):
    next_cursor: str | None
    limit: int
    has_more: bool
    total_count: int


class OfferListResponse(BaseModel):
    response_id: str
    type: Literal["offer"]
    data: list[OfferSummary]
    pagination: Pagination


class OfferCreated(BaseModel):
    id: str = Field(examples=["offer_65f1c0ffee0123456789abcd"])
    status: str = Field(examples=["scheduled"])
    created_at: str = Field(examples=["2026-01-15T12:00:00Z"])


class OfferChanged(BaseModel):
    id: str = Field(examples=["offer_65f1c0ffee0123456789abcd"])
    status: str = Field(examples=["active"])
    updated_at: str = Field(examples=["2026-01-15T12:00:00Z"])


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
