"""Base models shared by every domain's request and response schemas."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class APIModel(BaseModel):
    """Strict input model: unknown keys are rejected (reported as UNKNOWN_FIELD)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OpenModel(BaseModel):
    """For shapes the spec leaves open ("not shown"): unknown keys are kept verbatim."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ResponseModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
