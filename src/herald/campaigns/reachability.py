"""Reachability for campaign meta (C7): how many users a scheduled campaign would reach.

Only SCHEDULED ONE_TIME, BUSINESS_EVENT_TRIGGERED and EVENT_TRIGGERED campaigns have it. The count
comes from the audience data through one seam, `audience_count`, and is cached per campaign (all
its versions share it) for 24 hours; successive computations are at least 24 h apart, so a campaign
is counted at most once per calendar day.

Two concurrent meta requests never both compute: the one that claims the stale (or missing) cache
row with an upsert computes; the other waits on that row and then reads the fresh value.

A campaign whose stored audience can no longer be evaluated (it names a custom segment that was
deleted, say) has no reachability: one such row must not fail the whole meta page. Its claim and
computation run in a savepoint that is rolled back, so nothing is cached and the next request tries
again (the figure appears as soon as the audience can be evaluated).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import reachability as audience_reachability
from herald.campaigns.models import Campaign, CampaignReachability
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.errors import HeraldError

log = logging.getLogger("herald.campaigns")
T = TypeVar("T", bound=tuple[Any, ...])

CACHE_FOR = timedelta(hours=24)
ELIGIBLE_TYPES = frozenset(
    {
        DeliveryType.ONE_TIME.value,
        DeliveryType.BUSINESS_EVENT_TRIGGERED.value,
        DeliveryType.EVENT_TRIGGERED.value,
    }
)


@dataclass(frozen=True)
class Reach:
    count: int
    computed_at: datetime


def eligible(status: str, delivery_type: str) -> bool:
    return status == CampaignStatus.SCHEDULED.value and delivery_type in ELIGIBLE_TYPES


async def audience_count(session: AsyncSession, workspace_id: str, row: Campaign, now: datetime) -> int:
    """The seam: the number of users `row` would reach at `now`, from the segmentation engine."""
    return await audience_reachability.reachability_count(session, workspace_id, row, now)


def with_cached(rows: Select[T]) -> Select[T]:
    """`rows` (a select over campaigns) and each row's cached figures, `reach_count` and
    `reach_computed_at` (NULL when none is cached): the cache's row by its primary key, read with
    the page instead of in a statement of its own."""
    return rows.add_columns(
        CampaignReachability.count.label("reach_count"),
        CampaignReachability.computed_at.label("reach_computed_at"),
    ).outerjoin(
        CampaignReachability,
        (CampaignReachability.workspace_id == Campaign.workspace_id)
        & (CampaignReachability.campaign_id == Campaign.campaign_id),
    )


async def reaches(session: AsyncSession, rows: Iterable[Any], now: datetime) -> dict[str, Reach | None]:
    """The reachability of each eligible row's campaign, by campaign id, for rows of a select
    `with_cached` (also showing each row's workspace_id, id, campaign_id, status and delivery_type):
    the figures read with the page where fresh, then each missing or stale one as `reach_of` gets it
    (from the first eligible row of its campaign, as the page lists them)."""
    found: dict[str, Reach | None] = {}
    for row in rows:
        if row.campaign_id in found or not eligible(row.status, row.delivery_type):
            continue
        computed_at = row.reach_computed_at
        if computed_at is not None and now - computed_at < CACHE_FOR:
            found[row.campaign_id] = Reach(row.reach_count, computed_at)
        else:
            found[row.campaign_id] = await reach_of(session, row.workspace_id, row.id, row.campaign_id, now)
    return found


async def _cached(session: AsyncSession, workspace_id: str, campaign_id: str) -> CampaignReachability | None:
    query = (
        select(CampaignReachability)
        .where(
            CampaignReachability.workspace_id == workspace_id, CampaignReachability.campaign_id == campaign_id
        )
        .execution_options(populate_existing=True)
    )
    return (await session.scalars(query)).first()


async def _claim(session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime) -> bool:
    """Take the right to compute: insert the cache row, or take it over when it is stale."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = (
        insert(CampaignReachability)
        .values(workspace_id=workspace_id, campaign_id=campaign_id, count=0, computed_at=now)
        .on_conflict_do_update(
            index_elements=[CampaignReachability.workspace_id, CampaignReachability.campaign_id],
            set_={"computed_at": now},
            where=CampaignReachability.computed_at <= now - CACHE_FOR,
        )
        .returning(CampaignReachability.campaign_id)
    )
    return (await session.execute(statement)).first() is not None


async def reach_of(
    session: AsyncSession, workspace_id: str, row_id: str, campaign_id: str, now: datetime
) -> Reach | None:
    """The cached reachability of campaign `campaign_id`, computed first (from its row `row_id`)
    when missing or 24 h old; None when its audience cannot be evaluated (logged with the reason)."""
    cached = await _cached(session, workspace_id, campaign_id)
    if cached is not None and now - cached.computed_at < CACHE_FOR:
        return Reach(cached.count, cached.computed_at)
    try:
        async with session.begin_nested():
            return await _compute(session, workspace_id, row_id, campaign_id, now)
    except (HeraldError, DBAPIError) as exc:
        log.warning(
            "reachability of campaign %s in workspace %s cannot be computed: %s",
            campaign_id,
            workspace_id,
            _reason(exc),
        )
        return None


async def _compute(
    session: AsyncSession, workspace_id: str, row_id: str, campaign_id: str, now: datetime
) -> Reach:
    if not await _claim(session, workspace_id, campaign_id, now):
        fresh = await _cached(session, workspace_id, campaign_id)
        assert fresh is not None  # a concurrent request computed it and committed
        return Reach(fresh.count, fresh.computed_at)
    row = await session.get(Campaign, (workspace_id, row_id))
    assert row is not None  # read in this transaction, and campaign rows are never deleted
    count = await audience_count(session, workspace_id, row, now)
    await session.execute(
        update(CampaignReachability)
        .where(
            CampaignReachability.workspace_id == workspace_id,
            CampaignReachability.campaign_id == campaign_id,
        )
        .values(count=count, computed_at=now)
        .execution_options(synchronize_session=False)
    )
    return Reach(count, now)


def _reason(exc: HeraldError | DBAPIError) -> str:
    if isinstance(exc, DBAPIError):
        return f"the database refused the audience query: {type(exc.orig).__name__}: {exc.orig}"
    problems = "; ".join(f"{p.target or '(audience)'}: {p.code}: {p.message}" for p in exc.details)
    return f"{exc.code}: {problems or exc.message}"
