"""Offer use cases. Services never commit; the request's unit of work does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson

from herald.direct_reads import DirectReads
from herald.ids import offer_public_id, tag_public_id
from herald.offers import cursor as offers_cursor
from herald.offers import repository
from herald.offers.list_query import OffersListQuery


async def list_offers(
    reads: DirectReads, workspace_id: str, query: OffersListQuery, now: datetime
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Items (only the selected fields) and the pagination block of one O1 page."""
    rows, total = await repository.list_page(reads, workspace_id, query, now)
    has_more = len(rows) > query.limit
    rows = rows[: query.limit]
    summary = _summary_of(query.selected_fields)
    items = [summary(row) for row in rows]
    pagination = {
        "next_cursor": offers_cursor.encode(rows[-1][0]) if has_more else None,
        "limit": query.limit,
        "has_more": has_more,
        "total_count": total,
    }
    return items, pagination


def _tags(text: str | None) -> list[str] | None:
    tags = orjson.loads(text) if text else None
    return [tag_public_id(tag) for tag in tags] if tags else None


# How each summary field is shown from its column (see `repository.list_page`); absent values are
# left out of the item.
_SHOWN: dict[str, Callable[[Any], Any] | None] = {
    "name": None,  # as read
    "status": None,
    "tags": _tags,
    "created_at": None,
    "created_by": None,
}


@lru_cache(maxsize=64)
def _summary_of(selected: tuple[str, ...]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """The function that makes one item from a page row: the selected fields, in summary order."""
    shown = [(name, _SHOWN[name]) for name in selected if name != "id"]
    with_id = "id" in selected

    def summary(row: Sequence[Any]) -> dict[str, Any]:
        item: dict[str, Any] = {"id": offer_public_id(row[0])} if with_id else {}
        for (name, show), value in zip(shown, row[1:], strict=False):
            if show is not None:
                value = show(value)
            if value is not None:
                item[name] = value
        return item

    return summary
