"""O1 query parameters, validated together so every problem is reported in one 400 (contract §4)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from herald.control_characters import SPACES
from herald.http.query_model import QUERY_INTEGER
from herald.offers import cursor as offers_cursor
from herald.offers.status import OfferStatus

SUMMARY_FIELDS = ("id", "name", "status", "tags", "created_at", "created_by")


def _csv(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _csv_pattern(words: Iterable[str]) -> str:
    """What `_csv` reads as one or more of `words`, as the OpenAPI document's pattern: parts between
    commas, each one of the words or empty, spaces around them (a control character is refused in
    any query parameter, `guards.query_problems`)."""
    word = "(?:" + "|".join(re.escape(word) for word in words) + ")"
    space = f"[{SPACES}]*"
    return f"^[{SPACES},]*{word}{space}(?:,[{SPACES},]*{word}{space})*[{SPACES},]*$"


def _date(value: str | None, name: str) -> date | None:
    if value is None:
        return None
    try:
        if len(value) != 10:
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise PydanticCustomError("INVALID_TYPE", f"{name} must be a date in YYYY-MM-DD form.") from None


# As the OpenAPI document states them (the validators below check them, with their own codes).
StatusList = Annotated[str, Field(json_schema_extra={"pattern": _csv_pattern(OfferStatus)})]
FieldList = Annotated[str, Field(json_schema_extra={"pattern": _csv_pattern(SUMMARY_FIELDS)})]
# A calendar date (`_date`): as the parameter's format, generated clients send a date's ISO text.
Date = Annotated[str, Field(json_schema_extra={"format": "date"})]


class OffersListQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name_contains: Annotated[str | None, Field(max_length=100)] = None
    status_in: StatusList | None = Field(
        None, description="Comma-separated: active, scheduled, expired, archived, draft."
    )
    tags: list[str] = Field(default_factory=list, description="Repeat the parameter; offers must have ALL.")
    created_date_gte: Date | None = Field(None, description="YYYY-MM-DD")
    created_date_lte: Date | None = Field(None, description="YYYY-MM-DD")
    created_by: list[str] = Field(default_factory=list, description="Repeated or comma-separated e-mails.")
    fields: FieldList | None = Field(None, description="Comma-separated subset of the six summary fields.")
    cursor: str | None = None
    limit: Annotated[int, Field(ge=1, le=100), QUERY_INTEGER] = 20

    @field_validator("status_in")
    @classmethod
    def _known_statuses(cls, value: str | None) -> str | None:
        if value is None:
            return None
        unknown = [part for part in _csv([value]) if part not in OfferStatus.__members__.values()]
        if unknown or not _csv([value]):
            raise PydanticCustomError(
                "INVALID_ENUM_VALUE",
                "status_in accepts active, scheduled, expired, archived, draft; got {unknown}.",
                {"unknown": ", ".join(unknown) or "nothing"},
            )
        return value

    @field_validator("created_date_gte", "created_date_lte")
    @classmethod
    def _dates(cls, value: str | None) -> str | None:
        _date(value, "the date")
        return value

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, value: str | None) -> str | None:
        if value is None:
            return None
        unknown = [part for part in _csv([value]) if part not in SUMMARY_FIELDS]
        if unknown or not _csv([value]):
            raise PydanticCustomError(
                "INVALID_FIELDS_PARAM",
                "fields accepts id, name, status, tags, created_at, created_by; got {unknown}.",
                {"unknown": ", ".join(unknown) or "nothing"},
            )
        return value

    @field_validator("cursor")
    @classmethod
    def _cursor(cls, value: str | None) -> str | None:
        if value is not None and offers_cursor.decode(value) is None:
            raise PydanticCustomError(
                "INVALID_CURSOR", "The cursor is malformed; use pagination.next_cursor."
            )
        return value

    @property
    def statuses(self) -> list[OfferStatus]:
        """The statuses named, each once, in one order: `active` 500 times was a condition of 500
        terms (SQLite refused its depth: a 500) and a statement of its own in the cache."""
        named = set(_csv([self.status_in])) if self.status_in else set()
        return [status for status in OfferStatus if status.value in named]

    @property
    def creators(self) -> list[str]:
        return _csv(self.created_by)

    @property
    def selected_fields(self) -> tuple[str, ...]:
        chosen = set(_csv([self.fields])) if self.fields else set(SUMMARY_FIELDS)
        return tuple(name for name in SUMMARY_FIELDS if name in chosen)

    @property
    def after_id(self) -> str | None:
        return offers_cursor.decode(self.cursor) if self.cursor else None

    @property
    def created_from(self) -> date | None:
        return _date(self.created_date_gte, "created_date_gte")

    @property
    def created_until(self) -> date | None:
        return _date(self.created_date_lte, "created_date_lte")
