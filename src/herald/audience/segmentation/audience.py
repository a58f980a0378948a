"""A campaign's audience: who `segmentation_details` selects on a channel, as one SQL statement.

Audience = (all users if `is_all_user_campaign`, else the users `included_filters` matches; nobody
when it has no filters) minus the users `excluded_filters` matches, minus the users opted out of
the channel (`email_opt_out` / `push_opt_out` / `sms_opt_out`) unless
`send_campaign_to_opt_out_users` is true. With `reachable_only`, users without an address on the
channel (email, push id, mobile number) are left out as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, and_, false, func, not_, select, true
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from herald.audience.segmentation.catalog import SegmentCatalog, load_segments
from herald.audience.segmentation.compiler import Compiler
from herald.audience.segmentation.dialect import SqlDialect, dialect_for
from herald.campaigns.schemas.segmentation import SegmentationDetails
from herald.errors import ValidationFailed
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error

ROOT = "segmentation_details"
OPT_OUT_COLUMN = {"PUSH": "push_opt_out", "EMAIL": "email_opt_out", "SMS": "sms_opt_out"}
ADDRESS_COLUMN = {"PUSH": "push_id", "EMAIL": "email", "SMS": "mobile"}

Segmentation = SegmentationDetails | Mapping[str, Any] | None


def read_segmentation(segmentation_details: Segmentation) -> tuple[SegmentationDetails | None, list[Problem]]:
    """The typed `segmentation_details` (None reads as "all users"), or its problems."""
    if segmentation_details is None:
        return SegmentationDetails(is_all_user_campaign=True), []
    if isinstance(segmentation_details, SegmentationDetails):
        return segmentation_details, []
    try:
        return SegmentationDetails.model_validate(segmentation_details), []
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, segmentation_details, (ROOT,))


def _require(segmentation_details: Segmentation) -> SegmentationDetails:
    details, problems = read_segmentation(segmentation_details)
    if details is None:
        raise ValidationFailed(problems)
    return details


def _audience(
    compiler: Compiler, details: SegmentationDetails, channel: str, reachable_only: bool
) -> ColumnElement[bool]:
    users = compiler.users
    conditions: list[ColumnElement[bool]] = [compiler.in_workspace()]
    included = details.included_filters
    if details.is_all_user_campaign:
        conditions.append(true())
    elif included is not None and included.filters:
        conditions.append(compiler.where(included, (ROOT, "included_filters")))
    else:
        conditions.append(false())
    excluded = details.excluded_filters
    if excluded is not None and excluded.filters:
        matched = compiler.where(excluded, (ROOT, "excluded_filters"))
        conditions.append(not_(func.coalesce(matched, false())))
    opt_out = OPT_OUT_COLUMN.get(str(channel))
    if opt_out is not None and not details.send_campaign_to_opt_out_users:
        conditions.append(users.c[opt_out] == false())
    address = ADDRESS_COLUMN.get(str(channel))
    if reachable_only and address is not None:
        conditions.append(and_(users.c[address].is_not(None), users.c[address] != ""))
    if compiler.problems:
        raise ValidationFailed(compiler.problems)
    return and_(*conditions)


def _compiler(
    details: SegmentationDetails,
    workspace_id: str,
    now: datetime,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None,
) -> Compiler:
    return Compiler(
        dialect_for(dialect) if isinstance(dialect, str) else dialect, workspace_id, now, segments
    )


def audience_query(
    segmentation_details: Segmentation,
    channel: str,
    workspace_id: str,
    now: datetime,
    *,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None = None,
    reachable_only: bool = False,
) -> Select[tuple[str]]:
    """SELECT of the audience's customer ids. Raises ValidationFailed (400) for invalid filters.

    `segments` must hold the custom segments the filters refer to (`catalog.load_segments`).
    """
    details = _require(segmentation_details)
    compiler = _compiler(details, workspace_id, now, dialect, segments)
    where = _audience(compiler, details, channel, reachable_only)
    return select(compiler.users.c.customer_id).select_from(compiler.from_clause()).where(where)


def audience_count_query(
    segmentation_details: Segmentation,
    channel: str,
    workspace_id: str,
    now: datetime,
    *,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None = None,
    reachable_only: bool = False,
) -> Select[tuple[int]]:
    """SELECT count(*) of the audience (the same rules as `audience_query`)."""
    details = _require(segmentation_details)
    compiler = _compiler(details, workspace_id, now, dialect, segments)
    where = _audience(compiler, details, channel, reachable_only)
    return select(func.count()).select_from(compiler.from_clause()).where(where)


async def segments_for(
    session: AsyncSession, workspace_id: str, segmentation_details: Segmentation
) -> SegmentCatalog:
    details = _require(segmentation_details)
    return await load_segments(session, workspace_id, [details.included_filters, details.excluded_filters])


def session_dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


async def count_audience(
    session: AsyncSession,
    workspace_id: str,
    channel: str,
    segmentation_details: Segmentation,
    now: datetime,
    *,
    reachable_only: bool = False,
) -> int:
    """How many users the audience holds, counted by the database in one statement."""
    segments = await segments_for(session, workspace_id, segmentation_details)
    query = audience_count_query(
        segmentation_details,
        channel,
        workspace_id,
        now,
        dialect=session_dialect(session),
        segments=segments,
        reachable_only=reachable_only,
    )
    return int((await session.execute(query)).scalar_one())
