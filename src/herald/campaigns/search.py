"""C6 Search campaigns: the filters of contract §5 as one SQL query per page.

Rules every page follows (C7 meta shares them):
- ARCHIVED rows only with `include_archive_campaigns`, whatever `status` lists;
- DRAFT rows only when `status` lists DRAFT (no `status`: every state but DRAFT);
- rows with a `parent_id` (periodic children) or a `flow_id` (flow nodes) only with
  `include_child_campaigns`;
- with the workspace's `versioning` flag each version document is a row of its own; without it
  only the latest version of each campaign is (older versions are an opt-in view);
- order: `created_at` descending, then `id` descending; the last page is the first one with fewer
  than `limit` rows.

How a page is read (`paged`) depends on the engine, because the visible statuses are a set (by default
six of eight) and a workspace may hold thousands of rows of the others (drafts, say):
- PostgreSQL plans the one statement from its statistics: it walks (workspace_id, created_at, id)
  while the visible rows are common and reads the status index when they are rare.
- SQLite keeps no statistics (Herald never runs ANALYZE) and always walks (workspace_id, created_at,
  id), reading every hidden row it passes: a workspace of 3,000 drafts read all of them for an empty
  page. There the page's ids are a merge of one walk per visible status over (workspace_id, status,
  created_at, id, is_latest, parent_id, flow_id), each already in page order, which SQLite runs
  lazily (MERGE (UNION ALL)): a page reads about as many index entries as it skips and shows, never
  the rows of statuses not shown, and then reads only its own rows. (PostgreSQL 15 does not merge
  such branches, whose order comes from each branch's own `status = ...`; it would append and sort
  every visible row, so it keeps the single statement.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import ColumnElement, Select, and_, exists, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign, CampaignTag
from herald.campaigns.schemas.common import CampaignStatus
from herald.campaigns.schemas.search import CreatedDate, SearchBody, bound_instant
from herald.errors import ValidationFailed
from herald.pydantic_errors import problems_from_validation_error

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T", bound=tuple[Any, ...])


def parse_body(model: type[M], raw: object) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ValidationFailed(problems_from_validation_error(exc, raw)) from None


@dataclass(frozen=True)
class CreatedBounds:
    created_from: datetime | None = None
    created_before: datetime | None = None
    created_until: datetime | None = None


@dataclass(frozen=True)
class Criteria:
    """What a page of campaigns must match; None or empty means "any"."""

    ids: tuple[str, ...] = ()
    name: str | None = None
    channels: tuple[str, ...] | None = None
    statuses: tuple[str, ...] | None = None
    delivery_types: tuple[str, ...] | None = None
    created_by: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    created: CreatedBounds = CreatedBounds()
    version_number: int | None = None
    include_children: bool = False
    include_archived: bool = False


def _values(items: Sequence[Any] | None) -> tuple[str, ...] | None:
    return None if items is None else tuple(str(item) for item in items)


def created_bounds(created: CreatedDate | None) -> CreatedBounds:
    if created is None:
        return CreatedBounds()
    start = bound_instant(created.from_date, end=False) if created.from_date else None
    if not created.to_date:
        return CreatedBounds(start)
    end = bound_instant(created.to_date, end=True)
    whole_day = len(created.to_date) == len("YYYY-MM-DD")
    return CreatedBounds(start, end if whole_day else None, None if whole_day else end)


def search_criteria(body: SearchBody) -> Criteria:
    fields = body.campaign_fields
    if fields is None:
        return Criteria(
            include_children=body.include_child_campaigns, include_archived=body.include_archive_campaigns
        )
    return Criteria(
        ids=tuple(fields.ids or ()),
        name=fields.name,
        channels=_values(fields.channels),
        statuses=_values(fields.status),
        delivery_types=_values(fields.campaign_delivery_type),
        created_by=_values(fields.created_by),
        tags=_values(fields.tags),
        version_number=fields.version_number,
        include_children=body.include_child_campaigns,
        include_archived=body.include_archive_campaigns,
        created=created_bounds(fields.created_date),
    )


def visible_statuses(criteria: Criteria) -> list[str]:
    if criteria.statuses is None:
        allowed = {status.value for status in CampaignStatus} - {CampaignStatus.DRAFT.value}
    else:
        allowed = set(criteria.statuses)
    if not criteria.include_archived:
        allowed.discard(CampaignStatus.ARCHIVED.value)
    return sorted(allowed)


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def conditions(workspace_id: str, criteria: Criteria, *, versioning: bool) -> list[ColumnElement[bool]]:
    return [
        Campaign.workspace_id == workspace_id,
        Campaign.status.in_(visible_statuses(criteria)),
        *_filters(criteria, versioning=versioning),
    ]


def _filters(criteria: Criteria, *, versioning: bool) -> list[ColumnElement[bool]]:
    """Every condition but the workspace and the status."""
    where: list[ColumnElement[bool]] = []
    if not versioning:
        where.append(Campaign.is_latest.expression)
    if not criteria.include_children:
        where += [Campaign.parent_id.is_(None), Campaign.flow_id.is_(None)]
    if criteria.ids:
        where.append(or_(Campaign.id.in_(criteria.ids), Campaign.campaign_id.in_(criteria.ids)))
    if criteria.name is not None:
        where.append(Campaign.name.ilike(_like_pattern(criteria.name), escape="\\"))
    for column, values in (
        (Campaign.channel, criteria.channels),
        (Campaign.delivery_type, criteria.delivery_types),
        (Campaign.created_by, criteria.created_by),
    ):
        if values is not None:
            where.append(column.in_(values))
    if criteria.tags is not None:
        where.append(
            exists().where(
                and_(
                    CampaignTag.workspace_id == Campaign.workspace_id,
                    CampaignTag.campaign_row_id == Campaign.id,
                    CampaignTag.tag.in_(criteria.tags),
                )
            )
        )
    created = criteria.created
    if created.created_from is not None:
        where.append(Campaign.created_at >= created.created_from)
    if created.created_before is not None:  # the end of a whole date, exclusive
        where.append(Campaign.created_at < created.created_before)
    if created.created_until is not None:  # a date-time, inclusive
        where.append(Campaign.created_at <= created.created_until)
    if criteria.version_number is not None:
        where.append(Campaign.version_number == criteria.version_number)
    return where


def paged(
    query: Select[T],
    workspace_id: str,
    criteria: Criteria,
    *,
    versioning: bool,
    limit: int,
    page: int,
    dialect: str,
) -> Select[T]:
    """`query` over campaigns with the criteria, the stable order and one page applied (the engine's
    way, module docstring)."""
    offset = (page - 1) * limit
    statuses = visible_statuses(criteria)
    if dialect != "sqlite" or len(statuses) < 2:
        return (
            query.where(*conditions(workspace_id, criteria, versioning=versioning))
            .order_by(Campaign.created_at.desc(), Campaign.id.desc())
            .limit(limit)
            .offset(offset)
        )
    where = [Campaign.workspace_id == workspace_id, *_filters(criteria, versioning=versioning)]
    walks = union_all(
        *(select(Campaign.id, Campaign.created_at).where(*where, Campaign.status == s) for s in statuses)
    ).subquery("walks")
    ids = (
        select(walks.c.id, walks.c.created_at)
        .order_by(walks.c.created_at.desc(), walks.c.id.desc())
        .limit(limit)
        .offset(offset)
        .subquery("page")
    )
    return query.join(ids, and_(Campaign.workspace_id == workspace_id, Campaign.id == ids.c.id)).order_by(
        ids.c.created_at.desc(), ids.c.id.desc()
    )


async def search(
    session: AsyncSession, workspace_id: str, raw: object, *, versioning: bool
) -> list[Campaign]:
    body = parse_body(SearchBody, raw)
    query = paged(
        select(Campaign),
        workspace_id,
        search_criteria(body),
        versioning=versioning,
        limit=body.limit,
        page=body.page,
        dialect=session.get_bind().dialect.name,
    )
    return list((await session.scalars(query)).all())
