"""Offer queries. Every query is scoped to one workspace through `scoped()`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.offers.list_query import OffersListQuery
from herald.offers.models import Offer, OfferTag
from herald.offers.status import status_predicate


def scoped(workspace_id: str) -> Select[tuple[Offer]]:
    return select(Offer).where(Offer.workspace_id == workspace_id)


def _filters(workspace_id: str, query: OffersListQuery, now: datetime) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [Offer.workspace_id == workspace_id]
    if query.id is not None:
        conditions.append(Offer.id == query.id.removeprefix("offer_"))
    if query.name_contains:
        conditions.append(func.lower(Offer.name).contains(query.name_contains.lower(), autoescape=True))
    if query.statuses:
        conditions.append(or_(*(status_predicate(status, now) for status in query.statuses)))
    for tag in query.tags:
        conditions.append(
            exists().where(
                OfferTag.workspace_id == Offer.workspace_id,
                OfferTag.offer_id == Offer.id,
                OfferTag.tag_id == tag.removeprefix("tag_"),
            )
        )
    if query.created_from is not None:
        conditions.append(Offer.created_at >= datetime.combine(query.created_from, time(), UTC))
    if query.created_until is not None:
        day_after = datetime.combine(query.created_until, time(), UTC) + timedelta(days=1)
        conditions.append(Offer.created_at < day_after)
    if query.creators:
        conditions.append(Offer.created_by.in_(query.creators))
    return conditions


_SUMMARY_COLUMNS: tuple[Any, ...] = (
    Offer.id,
    Offer.name,
    Offer.stored_status,
    Offer.start_datetime,
    Offer.expiry_datetime,
    Offer.tags,
    Offer.created_at,
    Offer.created_by,
)


async def list_page(
    session: AsyncSession, workspace_id: str, query: OffersListQuery, now: datetime
) -> tuple[Sequence[Any], int]:
    """One page (limit + 1 rows, newest first, after the cursor) and the count of all matches."""
    conditions = _filters(workspace_id, query, now)
    page = select(*_SUMMARY_COLUMNS).where(*conditions)
    if query.after_id is not None:
        page = page.where(Offer.id < query.after_id)
    page = page.order_by(Offer.id.desc()).limit(query.limit + 1)
    rows = (await session.execute(page)).all()
    total = await session.scalar(select(func.count()).select_from(Offer).where(*conditions))
    return rows, int(total or 0)
