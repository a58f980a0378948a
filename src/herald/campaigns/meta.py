"""C7 Get campaign meta: lightweight rows for the campaigns that match (contract §5).

Filters, visibility and order are Search's (`campaigns.search`); the page is one SQL query of the
columns a row shows (Core rows, not ORM objects), which also counts each row's child campaigns and
reads its campaign's cached reachability; on PostgreSQL the request's Idempotency-Key is claimed in
that same statement (`Operation.claim_with_read`). Reachability missing or stale for a row that has
it is computed then (`campaigns.reachability`). Off when the workspace's `campaign_meta` flag is off.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from herald.campaigns import reachability
from herald.campaigns.models import Campaign
from herald.campaigns.pages import Criteria, PageQuery
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType, Feature
from herald.campaigns.schemas.search import MetaBody
from herald.campaigns.search import created_bounds, parse_body
from herald.errors import ValidationFailed
from herald.joined_writes import ClaimedRows
from herald.problems import Problem
from herald.timefmt import meta_timestamp


def _not_enabled() -> ValidationFailed:
    return ValidationFailed(
        [
            Problem(
                "FEATURE_NOT_ENABLED",
                Feature.CAMPAIGN_META.value,
                "The 'campaign_meta' feature is not enabled for this workspace.",
            )
        ]
    )


def meta_criteria(body: MetaBody) -> Criteria:
    fields = body.campaign_fields
    children, archived = body.include_child_campaigns, body.include_archive_campaigns
    if fields is None:
        return Criteria(include_children=children, include_archived=archived)
    delivery_types = [
        *([fields.delivery_type] if fields.delivery_type else []),
        *(fields.campaign_delivery_type or []),
    ]
    listed = fields.delivery_type is not None or fields.campaign_delivery_type is not None
    return Criteria(
        ids=(fields.id,) if fields.id else (),
        name=fields.name,
        channels=None if fields.channels is None else tuple(fields.channels),
        statuses=None if fields.status is None else tuple(fields.status),
        delivery_types=tuple(delivery_types) if listed else None,
        created_by=None if fields.created_by is None else tuple(fields.created_by),
        tags=None if fields.tags is None else tuple(fields.tags),
        include_children=children,
        include_archived=archived,
        created=created_bounds(fields.created_date),
    )


def meta_row(row: Any, reach: reachability.Reach | None, *, versioning: bool) -> dict[str, Any]:
    """The wire row of a page row (`ROWS`)."""
    basic = row.basic_details if isinstance(row.basic_details, dict) else {}
    # Contract §5: `[]` for Email (whose basic_details keeps an unknown `platforms` key as sent).
    platforms = basic.get("platforms") if row.channel == "PUSH" else None
    team = basic.get("team")
    out: dict[str, Any] = {"campaign_id": row.campaign_id}
    if versioning:
        out["version_number"] = row.version_number
    out |= {
        "channel": row.channel,
        "platform": [p for p in platforms if isinstance(p, str)] if isinstance(platforms, list) else [],
        "created_by": row.created_by,
        "campaign_delivery_type": row.delivery_type,
        "campaign_name": row.name,
        "campaign_team": team if isinstance(team, str) else None,
        "campaign_tags": list(row.tags or []),
        "campaign_status": row.status,
        "campaign_start_time": meta_timestamp(row.start_at) if row.start_at else None,
    }
    children = row.children
    if row.parent_id is not None:
        out["parent_campaign_id"] = row.parent_id
    elif row.delivery_type == DeliveryType.PERIODIC.value or children:
        out["total_child_campaigns"] = children
    if row.status == CampaignStatus.DRAFT.value and row.rejection_comment:
        out["rejection_comment"] = row.rejection_comment
    out["reachability_details"] = (
        {"count": reach.count, "last_updated_time": meta_timestamp(reach.computed_at)} if reach else None
    )
    return out


# Each row's number of child campaigns (latest versions naming it as parent), correlated to the
# page's row.
_child = aliased(Campaign)
_CHILDREN = (
    select(func.count())
    .where(
        _child.workspace_id == Campaign.workspace_id,
        _child.parent_id == Campaign.campaign_id,
        _child.is_latest,
    )
    .correlate(Campaign)
    .scalar_subquery()
)
# The rows of a meta page: the columns a row shows (of the components, only `basic_details`), the
# number of its children and its campaign's cached reachability; `id` and `created_at` order the
# page (`NEWEST_FIRST`), `workspace_id` and `id` find the row whose audience is counted.
ROWS = PageQuery(
    reachability.with_cached(
        select(
            Campaign.workspace_id,
            Campaign.id,
            Campaign.campaign_id,
            Campaign.version_number,
            Campaign.channel,
            Campaign.components["basic_details"].label("basic_details"),
            Campaign.created_by,
            Campaign.delivery_type,
            Campaign.name,
            Campaign.tags,
            Campaign.status,
            Campaign.start_at,
            Campaign.parent_id,
            Campaign.rejection_comment,
            Campaign.created_at,
            _CHILDREN.label("children"),
        )
    )
)
NEWEST_FIRST = ("created_at", "id")


def parse(features: frozenset[str], raw: object) -> MetaBody:
    """The request's body; 400 when the workspace's `campaign_meta` flag is off or the body is wrong."""
    if Feature.CAMPAIGN_META.value not in features:
        raise _not_enabled()
    return parse_body(MetaBody, raw)


async def campaign_meta(
    session: AsyncSession,
    workspace_id: str,
    features: frozenset[str],
    body: MetaBody | None,
    now: datetime,
    read: ClaimedRows,
) -> list[dict[str, Any]]:
    """The page `body` asks for (None: the request was refused, `read` answers it after the claim);
    `read` runs its statement, with the request's Idempotency-Key claim (`Operation.claim_with_read`)."""
    if body is None:
        await read(session, None, {})
        return []
    versioning = Feature.VERSIONING.value in features
    statement, parameters = ROWS.page(
        workspace_id,
        meta_criteria(body),
        versioning=versioning,
        limit=body.limit,
        page=body.page,
        dialect=session.get_bind().dialect.name,
    )
    rows = await read(session, statement, parameters, NEWEST_FIRST)
    if not rows:
        return []
    reaches = await reachability.reaches(session, rows, now)
    return [
        meta_row(
            row,
            reaches.get(row.campaign_id) if reachability.eligible(row.status, row.delivery_type) else None,
            versioning=versioning,
        )
        for row in rows
    ]
