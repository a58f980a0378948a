"""Offer use cases. Services never commit; the request's unit of work does."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.ids import offer_public_id, tag_public_id
from herald.offers import cursor as offers_cursor
from herald.offers import repository
from herald.offers.list_query import OffersListQuery
from herald.offers.status import effective_status
from herald.timefmt import rfc3339


async def list_offers(
    session: AsyncSession, workspace_id: str, query: OffersListQuery, now: datetime
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Items (only the selected fields) and the pagination block of one O1 page."""
    rows, total = await repository.list_page(session, workspace_id, query, now)
    has_more = len(rows) > query.limit
    rows = rows[: query.limit]
    selected = query.selected_fields
    items = [_summary(row, selected, now) for row in rows]
    pagination = {
        "next_cursor": offers_cursor.encode(rows[-1].id) if has_more else None,
        "limit": query.limit,
        "has_more": has_more,
        "total_count": total,
    }
    return items, pagination


def _summary(row: Any, selected: tuple[str, ...], now: datetime) -> dict[str, Any]:
    """The selected fields of one row, in the summary's order; absent values are left out."""
    item: dict[str, Any] = {}
    for name in selected:
        if name == "id":
            item["id"] = offer_public_id(row.id)
        elif name == "status":
            item["status"] = effective_status(
                row.stored_status, row.start_datetime, row.expiry_datetime, now
            ).value
        elif name == "tags":
            if row.tags:
                item["tags"] = [tag_public_id(tag) for tag in row.tags]
        elif name == "created_at":
            item["created_at"] = rfc3339(row.created_at)
        elif (value := getattr(row, name)) is not None:  # name, created_by
            item[name] = value
    return item
