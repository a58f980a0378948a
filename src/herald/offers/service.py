"""Offer use cases. Services never commit; the request's unit of work does."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from herald.direct_reads import DirectReads
from herald.ids import OFFER_PREFIX, tag_public_id
from herald.offers import cursor as offers_cursor
from herald.offers import repository
from herald.offers.list_query import SUMMARY_FIELDS, OffersListQuery


async def list_offers(
    reads: DirectReads, workspace_id: str, query: OffersListQuery, now: datetime
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Items (only the selected fields) and the pagination block of one O1 page."""
    rows, total = await repository.list_page(reads, workspace_id, query, now)
    has_more = len(rows) > query.limit
    rows = rows[: query.limit]
    items = [_item(row) for row in rows]
    selected = query.selected_fields
    if selected != SUMMARY_FIELDS:  # sparse `fields`: the selected ones, in summary order
        items = [{name: item[name] for name in selected if name in item} for item in items]
    pagination = {
        "next_cursor": offers_cursor.encode(rows[-1][0]) if has_more else None,
        "limit": query.limit,
        "has_more": has_more,
        "total_count": total,
    }
    return items, pagination


# `_item` reads a row by these positions (the page's columns follow SUMMARY_FIELDS).
if SUMMARY_FIELDS != ("id", "name", "status", "tags", "created_at", "created_by"):
    raise RuntimeError("offers.service._item reads the page's columns by position: update it")


def _item(row: Sequence[Any]) -> dict[str, Any]:
    """One page row (`repository.list_page`: id, then every summary field in summary order; the
    tags as JSON text, NULL when there are none) as its item, absent tags left out. A dict display
    of fixed positions: a loop over the selected fields cost three times as much, fifty rows a page."""
    tags = row[3]
    if tags is None:
        return {
            "id": OFFER_PREFIX + row[0],
            "name": row[1],
            "status": row[2],
            "created_at": row[4],
            "created_by": row[5],
        }
    return {
        "id": OFFER_PREFIX + row[0],
        "name": row[1],
        "status": row[2],
        "tags": [tag_public_id(tag) for tag in orjson.loads(tags)],
        "created_at": row[4],
        "created_by": row[5],
    }
