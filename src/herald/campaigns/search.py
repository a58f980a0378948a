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

How a page is read, on each engine, is `campaigns.pages`'s concern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.campaigns.pages import CreatedBounds, Criteria, PageQuery
from herald.campaigns.schemas.search import CreatedDate, SearchBody, bound_instant
from herald.errors import ValidationFailed
from herald.pydantic_errors import problems_from_validation_error

M = TypeVar("M", bound=BaseModel)

# The rows of a Search page: stored campaigns as C2 shows them.
ROWS = PageQuery(select(Campaign))


def parse_body(model: type[M], raw: object) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ValidationFailed(problems_from_validation_error(exc, raw)) from None


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


async def search(
    session: AsyncSession, workspace_id: str, raw: object, *, versioning: bool
) -> list[Campaign]:
    body = parse_body(SearchBody, raw)
    statement, parameters = ROWS.page(
        workspace_id,
        search_criteria(body),
        versioning=versioning,
        limit=body.limit,
        page=body.page,
        dialect=session.get_bind().dialect.name,
    )
    return list((await session.scalars(statement, parameters)).all())
