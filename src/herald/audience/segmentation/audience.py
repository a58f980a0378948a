"""A campaign's audience: who `segmentation_details` selects on a channel, as one SQL statement.

Audience = (all users if `is_all_user_campaign`, else the users `included_filters` matches; nobody
when it has no filters) minus the users `excluded_filters` matches, minus the users opted out of
the channel (`email_opt_out` / `push_opt_out` / `sms_opt_out`) unless
`send_campaign_to_opt_out_users` is true, minus (PROMOTIONAL Email) the users unsubscribed from the
campaign's `subscription_category` (their `unsubscribed_categories` attribute lists it). With
`reachable_only`, users without an address on the channel (email, push id, mobile number) are left
out as well.

`Reach` holds what the campaign adds to its segmentation (`reach_of` reads it from the stored
components): the engine's execution and C7's reachability count both take it from there, so both
count the same users.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, and_, case, false, func, not_, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from herald.audience.models import platform_mask
from herald.audience.segmentation.catalog import SegmentCatalog, load_segments
from herald.audience.segmentation.compiler import Compiler, Path
from herald.audience.segmentation.dialect import SqlDialect, dialect_for
from herald.campaigns.schemas.filters import FilterGroup
from herald.campaigns.schemas.segmentation import SegmentationDetails
from herald.errors import ValidationFailed
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error
from herald.sql_lists import ListParameter

ROOT = "segmentation_details"
# A user's custom attribute: the subscription categories (strings) they unsubscribed from.
UNSUBSCRIBED_ATTRIBUTE = "unsubscribed_categories"
OPT_OUT_COLUMN = {"PUSH": "push_opt_out", "EMAIL": "email_opt_out", "SMS": "sms_opt_out"}
ADDRESS_COLUMN = {"PUSH": "push_id", "EMAIL": "email", "SMS": "mobile"}

Segmentation = SegmentationDetails | Mapping[str, Any] | None


@dataclass(frozen=True)
class Reach:
    """What a campaign adds to its segmentation on its channel."""

    # PROMOTIONAL Email: users unsubscribed from this category are left out.
    subscription_category: str | None = None
    # Push: a user is reachable with a token for one of these platforms (any platform when empty),
    # or with only a `push_id` and no per-platform token (see `audience.models.PushToken`).
    platforms: tuple[str, ...] = ()


def reach_of(channel: str, components: Mapping[str, Any] | None) -> Reach:
    """The campaign's `Reach`, from its stored components (one reading for engine and C7)."""
    details = (components or {}).get("basic_details")
    if not isinstance(details, Mapping):
        return Reach()
    if str(channel) == "PUSH":
        platforms = details.get("platforms")
        listed = tuple(str(p).upper() for p in platforms) if isinstance(platforms, list) else ()
        return Reach(platforms=listed)
    if str(channel) != "EMAIL":
        return Reach()
    category = details.get("subscription_category")
    if details.get("content_type") != "PROMOTIONAL" or not isinstance(category, str) or not category:
        return Reach()
    return Reach(subscription_category=category)


def _unsubscribed(category: str) -> FilterGroup:
    return FilterGroup.model_validate(
        {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "string",
                    "name": UNSUBSCRIBED_ATTRIBUTE,
                    "operator": "is",
                    "value": category,
                    "case_sensitive": True,
                }
            ],
        }
    )


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


@dataclass(frozen=True)
class _Rules:
    """The audience's conditions by rule, so they can be combined (`_audience`) or counted apart
    (`audience_counts_query`). None: the rule leaves nobody out."""

    selected: ColumnElement[bool]  # workspace, included and excluded filters
    opted_in: ColumnElement[bool] | None
    subscribed: ColumnElement[bool] | None
    reachable: ColumnElement[bool] | None


def _rules(compiler: Compiler, details: SegmentationDetails, channel: str, reach: Reach) -> _Rules:
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
    opted_in: ColumnElement[bool] | None = None
    opt_out = OPT_OUT_COLUMN.get(str(channel))
    if opt_out is not None and not details.send_campaign_to_opt_out_users:
        opted_in = users.c[opt_out] == false()
    # An unsubscription is an opt-out of one category: even a campaign sent to opted-out users
    # respects it. `subscribed_only=False` lets the engine count those users apart.
    subscribed: ColumnElement[bool] | None = None
    if reach.subscription_category is not None:
        unsubscribed = compiler.where(_unsubscribed(reach.subscription_category), (ROOT,))
        subscribed = not_(func.coalesce(unsubscribed, false()))
    reachable: ColumnElement[bool] | None = None
    address = ADDRESS_COLUMN.get(str(channel))
    if address is not None:
        has_address = and_(users.c[address].is_not(None), users.c[address] != "")
        reachable = (
            _push_reachable(compiler, has_address, reach.platforms) if str(channel) == "PUSH" else has_address
        )
    if compiler.problems:
        raise ValidationFailed(compiler.problems)
    return _Rules(and_(*conditions), opted_in, subscribed, reachable)


def _audience(
    compiler: Compiler,
    details: SegmentationDetails,
    channel: str,
    reachable_only: bool,
    reach: Reach,
    subscribed_only: bool,
) -> ColumnElement[bool]:
    rules = _rules(compiler, details, channel, reach)
    conditions = [rules.selected]
    if rules.opted_in is not None:
        conditions.append(rules.opted_in)
    if rules.subscribed is not None and subscribed_only:
        conditions.append(rules.subscribed)
    if rules.reachable is not None and reachable_only:
        conditions.append(rules.reachable)
    return and_(*conditions)


def _push_reachable(
    compiler: Compiler, has_push_id: ColumnElement[bool], platforms: tuple[str, ...]
) -> ColumnElement[bool]:
    """A token for one of `platforms`, or a bare `push_id` and no per-platform token at all. Read
    from the user's `push_platforms` (the platforms it has a token for, kept with the tokens): a
    test on the row the audience reads anyway, where an EXISTS on the token table cost two index
    probes per user (a correlated subquery on both engines; most of a count's time)."""
    held = compiler.users.c.push_platforms
    return or_(held.bitwise_and(platform_mask(platforms)) != 0, and_(held == 0, has_push_id))


def _compiler(
    workspace_id: str,
    now: datetime | None,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None,
    customers: Sequence[str] | ListParameter | None = None,
) -> Compiler:
    return Compiler(
        dialect_for(dialect) if isinstance(dialect, str) else dialect, workspace_id, now, segments, customers
    )


def audience_query(
    segmentation_details: Segmentation,
    channel: str,
    workspace_id: str,
    now: datetime | None,
    *,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None = None,
    reachable_only: bool = False,
    reach: Reach = Reach(),
    subscribed_only: bool = True,
    customers: Sequence[str] | ListParameter | None = None,
) -> Select[tuple[str]]:
    """SELECT of the audience's customer ids. Raises ValidationFailed (400) for invalid filters.

    `segments` must hold the custom segments the filters refer to (`catalog.load_segments`);
    `customers`, when given, limits the question to those users (which of them are in it): a list,
    or a list parameter (`sql_lists`). Without `now`, filters that need the instant raise ClockNeeded.
    """
    details = _require(segmentation_details)
    compiler = _compiler(workspace_id, now, dialect, segments, customers)
    where = _audience(compiler, details, channel, reachable_only, reach, subscribed_only)
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
    reach: Reach = Reach(),
    subscribed_only: bool = True,
) -> Select[tuple[int]]:
    """SELECT count(*) of the audience (the same rules as `audience_query`)."""
    details = _require(segmentation_details)
    compiler = _compiler(workspace_id, now, dialect, segments)
    where = _audience(compiler, details, channel, reachable_only, reach, subscribed_only)
    return select(func.count()).select_from(compiler.from_clause()).where(where)


def audience_counts_query(
    segmentation_details: Segmentation,
    channel: str,
    workspace_id: str,
    now: datetime,
    *,
    dialect: str | SqlDialect,
    segments: SegmentCatalog | None = None,
    reach: Reach = Reach(),
) -> Select[tuple[int, int, int, int]]:
    """One statement counting, over the users the filters select (opt-outs included), those left
    after each rule in turn: (selected, opted in, subscribed, reachable) — the last is the
    audience `audience_query(reachable_only=True)` selects. One pass instead of four counts."""
    details = _require(segmentation_details)
    compiler = _compiler(workspace_id, now, dialect, segments)
    rules = _rules(compiler, details, channel, reach)
    kept: list[ColumnElement[bool]] = []
    counts: list[ColumnElement[int]] = [func.count()]
    for rule in (rules.opted_in, rules.subscribed, rules.reachable):
        if rule is not None:
            kept.append(rule)
        if kept:
            counts.append(func.coalesce(func.sum(case((and_(*kept), 1), else_=0)), 0))
        else:
            counts.append(func.count())
    return select(*counts).select_from(compiler.from_clause()).where(rules.selected)


async def segments_for(
    session: AsyncSession, workspace_id: str, segmentation_details: Segmentation
) -> SegmentCatalog:
    details = _require(segmentation_details)
    return await load_segments(session, workspace_id, [details.included_filters, details.excluded_filters])


def session_dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


async def audience_problems(
    session: AsyncSession, workspace_id: str, channel: str, segmentation_details: Segmentation, now: datetime
) -> list[Problem]:
    """What in the filters the engine could not evaluate in this workspace (a custom segment that
    does not exist, a filter kind that does not apply where it stands), each at its path under
    `segmentation_details`; nothing is read but the segments. The publish checks ask it: such a
    campaign passed them, then failed when its audience was resolved, sending nothing."""
    try:
        segments = await segments_for(session, workspace_id, segmentation_details)
        audience_query(
            segmentation_details,
            channel,
            workspace_id,
            now,
            dialect=session_dialect(session),
            segments=segments,
        )
    except ValidationFailed as exc:
        return list(exc.details)
    return []


async def filter_problems(
    session: AsyncSession, workspace_id: str, groups: Sequence[tuple[FilterGroup, Path]], now: datetime
) -> list[Problem]:
    """`audience_problems` for filter groups of other components (a trigger's), each evaluated as
    the users it selects, its problems at its `path`."""
    segments = await load_segments(session, workspace_id, [group for group, _ in groups])
    compiler = _compiler(workspace_id, now, session_dialect(session), segments)
    for group, path in groups:
        compiler.where(group, path)
    return list(compiler.problems)


async def count_audience(
    session: AsyncSession,
    workspace_id: str,
    channel: str,
    segmentation_details: Segmentation,
    now: datetime,
    *,
    reachable_only: bool = False,
    reach: Reach = Reach(),
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
        reach=reach,
    )
    return int((await session.execute(query)).scalar_one())
