"""Offer queries. Every query is scoped to one workspace through `scoped()`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, exists, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.offers.list_query import OffersListQuery
from herald.offers.models import STORED_ARCHIVED, Offer, OfferTag
from herald.offers.status import status_predicate
from herald.workspaces.models import OfferTemplate, Tag

LIVE_NAME_INDEX = "uq_offers_workspace_id_name_live"


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
    """One page (limit + 1 rows, newest first, after the cursor) and the count of all matches.

    The count rides along as an uncorrelated scalar subquery, evaluated once, so page and count
    come from one statement and one snapshot on every engine and isolation level, while the page
    still walks the primary key and stops early. Only an empty page needs a query of its own.
    """
    conditions = _filters(workspace_id, query, now)
    count = select(func.count()).select_from(Offer).where(*conditions)
    page = select(*_SUMMARY_COLUMNS, count.scalar_subquery().label("total_count")).where(*conditions)
    if query.after_id is not None:
        page = page.where(Offer.id < query.after_id)
    page = page.order_by(Offer.id.desc()).limit(query.limit + 1)
    # Through the Core connection: plain rows of the selected columns, without the ORM's result
    # machinery (a quarter of an O1 request's CPU when run through `session.execute`).
    connection = await session.connection()
    rows = (await connection.execute(page)).all()
    total = rows[0].total_count if rows else (await connection.execute(count)).scalar()
    return rows, int(total or 0)


async def get_for_update(session: AsyncSession, workspace_id: str, offer_id: str) -> Offer | None:
    """The offer, locked until the transaction ends (PostgreSQL; SQLite writers hold the database)."""
    query = scoped(workspace_id).where(Offer.id == offer_id).with_for_update()
    return (await session.scalars(query)).first()


async def existing_tags(session: AsyncSession, workspace_id: str, tag_ids: Sequence[str]) -> frozenset[str]:
    if not tag_ids:
        return frozenset()
    query = select(Tag.id).where(Tag.workspace_id == workspace_id, Tag.id.in_(set(tag_ids)))
    return frozenset((await session.scalars(query)).all())


async def template_fields(
    session: AsyncSession, workspace_id: str, template_ids: Sequence[str]
) -> dict[str, list[str]]:
    """Required fields of the named templates that exist in the workspace."""
    if not template_ids:
        return {}
    query = select(OfferTemplate.id, OfferTemplate.fields).where(
        OfferTemplate.workspace_id == workspace_id, OfferTemplate.id.in_(set(template_ids))
    )
    return {row.id: list(row.fields or []) for row in await session.execute(query)}


async def live_names(
    session: AsyncSession, workspace_id: str, names: Sequence[str], except_id: str | None = None
) -> frozenset[str]:
    """Which of `names` a non-archived offer (other than `except_id`) already has."""
    if not names:
        return frozenset()
    query = select(Offer.name).where(
        Offer.workspace_id == workspace_id,
        Offer.name.in_(set(names)),
        Offer.stored_status != STORED_ARCHIVED,
    )
    if except_id is not None:
        query = query.where(Offer.id != except_id)
    return frozenset((await session.scalars(query)).all())


async def replace_tags(
    session: AsyncSession, workspace_id: str, offer_id: str, tag_ids: Sequence[str]
) -> None:
    await session.execute(
        delete(OfferTag).where(OfferTag.workspace_id == workspace_id, OfferTag.offer_id == offer_id)
    )
    if tag_ids:
        await session.execute(
            insert(OfferTag),
            [{"workspace_id": workspace_id, "tag_id": tag, "offer_id": offer_id} for tag in tag_ids],
        )


def is_duplicate_name(exc: IntegrityError) -> bool:
    """Whether a failed write broke the live-name index (a concurrent create or rename won)."""
    text = str(exc.orig)
    return LIVE_NAME_INDEX in text or "offers.workspace_id, offers.name" in text
