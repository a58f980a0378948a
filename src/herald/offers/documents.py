"""An offer as one JSON document, and how it maps onto the `offers` row.

Columns hold what is queried (name, priority, creator, tags, the schedule's instants); `document`
holds the rest exactly as sent, `scheduling` included, so an update can rebuild the whole offer,
merge the change into it and validate the result like a create.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from herald.ids import parse_tag_id, tag_public_id
from herald.offers.models import StoredOffer
from herald.offers.rules.scheduling import parse_zulu

COLUMN_FIELDS = frozenset({"name", "priority", "created_by", "tags"})


@dataclass(frozen=True)
class RowValues:
    name: str
    priority: int | None
    created_by: str
    tags: list[str]  # raw ids, first mention kept, duplicates dropped
    start_datetime: datetime | None
    expiry_datetime: datetime | None
    document: dict[str, Any]


def current_document(row: StoredOffer) -> dict[str, Any]:
    """The stored offer in request form."""
    document = dict(row.document or {})
    if isinstance(document.get("conversion"), dict):
        document["conversion"] = _revenue_names(document["conversion"])
    document["name"] = row.name
    document["created_by"] = row.created_by
    if row.priority is not None:
        document["priority"] = row.priority
    if row.tags:
        document["tags"] = [tag_public_id(tag) for tag in row.tags]
    return document


def _revenue_names(conversion: dict[str, Any]) -> dict[str, Any]:
    """Offers stored before `revenue_amount` became an attribute name may hold a number there.

    It reads back as that number's text, which is a valid attribute name, so such an offer can still
    be updated (an update validates the whole merged offer) without a data migration.
    """

    def goal(value: Any) -> Any:
        amount = value.get("revenue_amount") if isinstance(value, dict) else None
        if isinstance(amount, int | float) and not isinstance(amount, bool):
            return {**value, "revenue_amount": str(amount)}
        return value

    converted = dict(conversion)
    if "primary" in converted:
        converted["primary"] = goal(converted["primary"])
    if isinstance(converted.get("secondary"), list):
        converted["secondary"] = [goal(item) for item in converted["secondary"]]
    return converted


def merge(current: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """O3 semantics: a sent field replaces the stored one, null removes it; `scheduling` is patched
    end by end (so an active offer's expiry can move without resending its start)."""
    merged = dict(current)
    for name, value in change.items():
        if name == "scheduling" and isinstance(value, dict):
            scheduling = {**(current.get("scheduling") or {}), **value}
            merged[name] = {key: item for key, item in scheduling.items() if item is not None}
        elif value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


def row_values(document: dict[str, Any]) -> RowValues:
    """Column values of a validated document (name and creator are present by then)."""
    scheduling = document.get("scheduling") or {}
    tags = list(dict.fromkeys(parse_tag_id(tag) for tag in document.get("tags") or []))
    return RowValues(
        name=document["name"],
        priority=document.get("priority"),
        created_by=document["created_by"],
        tags=tags,
        start_datetime=_instant(scheduling.get("start_datetime")),
        expiry_datetime=_instant(scheduling.get("expiry_datetime")),
        document={name: value for name, value in document.items() if name not in COLUMN_FIELDS},
    )


def _instant(value: Any) -> datetime | None:
    return parse_zulu(value) if isinstance(value, str) else None
