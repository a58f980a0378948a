"""Wire shapes of stored campaigns (C2 and the rows of search)."""

from __future__ import annotations

from typing import Any

from herald.campaigns.models import Campaign
from herald.timefmt import campaign_timestamp


def etag(row: Campaign) -> str:
    return etag_of(row.id, row.revision)


def etag_of(row_id: str, revision: int) -> str:
    """The ETag of a version row at one revision (what `If-Match` names)."""
    return f'"{row_id}-{revision}"'


def campaign_view(row: Campaign, *, versioning: bool) -> dict[str, Any]:
    """The stored campaign: identity, lifecycle, provenance, then every stored component."""
    view: dict[str, Any] = {"id": row.id, "campaign_id": row.campaign_id}
    if versioning:
        view["version_number"] = row.version_number
    view |= {
        "status": row.status,
        "channel": row.channel,
        "campaign_delivery_type": row.delivery_type,
        "created_by": row.created_by,
        "updated_by": row.updated_by,
        "created_at": campaign_timestamp(row.created_at),
        "updated_at": campaign_timestamp(row.updated_at),
    }
    optional = {
        "sent_time": campaign_timestamp(row.sent_time) if row.sent_time else None,
        "flow_id": row.flow_id,
        "flow_name": row.flow_name,
        "parent_id": row.parent_id,
        "sender_name": row.sender_name,
    }
    view |= {key: value for key, value in optional.items() if value is not None}
    view |= row.components
    return view
