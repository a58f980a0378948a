"""C7 Get campaign meta: lightweight rows for the campaigns that match (contract §5).

Filters, visibility and order are Search's (`campaigns.search`); the page is one SQL query that
also counts each row's child campaigns. Reachability is added for the rows that have it
(`campaigns.reachability`: the page's cached figures in one more query). Off when the workspace's
`campaign_meta` flag is off.
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


def _basic(row: Campaign) -> dict[str, Any]:
    basic = row.components.get("basic_details")
    return basic if isinstance(basic, dict) else {}


def meta_row(
    row: Campaign, children: int, reach: reachability.Reach | None, *, versioning: bool
) -> dict[str, Any]:
    basic = _basic(row)
    platforms = basic.get("platforms")
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
# The rows of a meta page: each stored campaign and its number of children.
ROWS = PageQuery(select(Campaign, _CHILDREN))


async def campaign_meta(
    session: AsyncSession, workspace_id: str, features: frozenset[str], raw: object, now: datetime
) -> list[dict[str, Any]]:
    if Feature.CAMPAIGN_META.value not in features:
        raise _not_enabled()
    body = parse_body(MetaBody, raw)
    versioning = Feature.VERSIONING.value in features
    statement, parameters = ROWS.page(
        workspace_id,
        meta_criteria(body),
        versioning=versioning,
        limit=body.limit,
        page=body.page,
        dialect=session.get_bind().dialect.name,
    )
    rows = (await session.execute(statement, parameters)).all()
    reaches = await reachability.reaches(session, (row for row, _ in rows), now)
    return [
        meta_row(
            row,
            int(count),
            reaches.get(row.campaign_id) if reachability.eligible(row) else None,
            versioning=versioning,
        )
        for row, count in rows
    ]
