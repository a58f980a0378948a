"""Effective offering status: stored `draft`/`archived`, otherwise derived from the schedule now."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, and_, case, false, literal, or_

from herald.offers.models import STORED_ARCHIVED, STORED_DRAFT, STORED_PUBLISHED, Offer


class OfferStatus(StrEnum):
    ACTIVE = "active"
    SCHEDULED = "scheduled"
    EXPIRED = "expired"
    ARCHIVED = "archived"
    DRAFT = "draft"


def effective_status(
    stored: str, start: datetime | None, expiry: datetime | None, now: datetime
) -> OfferStatus:
    if stored == STORED_ARCHIVED:
        return OfferStatus.ARCHIVED
    if stored == STORED_DRAFT:
        return OfferStatus.DRAFT
    if start is not None and now < start:
        return OfferStatus.SCHEDULED
    if expiry is not None and now >= expiry:
        return OfferStatus.EXPIRED
    return OfferStatus.ACTIVE


def status_predicate(status: OfferStatus, now: datetime | ColumnElement[Any]) -> ColumnElement[bool]:
    """SQL twin of `effective_status(...) == status`, written so indexes on the columns apply.
    `now` is a value or a bound parameter (a statement built once for many requests)."""
    published = Offer.stored_status == STORED_PUBLISHED
    started = or_(Offer.start_datetime.is_(None), Offer.start_datetime <= now)
    expired = and_(Offer.expiry_datetime.is_not(None), Offer.expiry_datetime <= now)
    match status:
        case OfferStatus.ARCHIVED:
            return Offer.stored_status == STORED_ARCHIVED
        case OfferStatus.DRAFT:
            return Offer.stored_status == STORED_DRAFT
        case OfferStatus.SCHEDULED:
            return and_(published, Offer.start_datetime > now)
        case OfferStatus.EXPIRED:
            return and_(published, started, expired)
        case OfferStatus.ACTIVE:
            return and_(published, started, ~expired)
    return false()


def status_column(now: ColumnElement[Any]) -> ColumnElement[str]:
    """SQL twin of `effective_status(...).value`, for a page whose rows are formatted without Python
    date-times (the row then carries the status as text)."""
    return case(
        (Offer.stored_status == STORED_ARCHIVED, literal(OfferStatus.ARCHIVED.value)),
        (Offer.stored_status == STORED_DRAFT, literal(OfferStatus.DRAFT.value)),
        (Offer.start_datetime > now, literal(OfferStatus.SCHEDULED.value)),
        (Offer.expiry_datetime <= now, literal(OfferStatus.EXPIRED.value)),
        else_=literal(OfferStatus.ACTIVE.value),
    )
