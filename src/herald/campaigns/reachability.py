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

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import reachability as audience_reachability
from herald.campaigns.models import Campaign, CampaignReachability
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.errors import HeraldError

log = logging.getLogger("herald.campaigns")

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


def eligible(row: Campaign) -> bool:
    return row.status == CampaignStatus.SCHEDULED.value and row.delivery_type in ELIGIBLE_TYPES


async def audience_count(session: AsyncSession, workspace_id: str, row: Campaign, now: datetime) -> int:
    """The seam: the number of users `row` would reach at `now`, from the segmentation engine."""
    return await audience_reachability.reachability_count(session, workspace_id, row, now)


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


async def reaches(session: AsyncSession, rows: Iterable[Campaign], now: datetime) -> dict[str, Reach | None]:
    """The reachability of each eligible row's campaign, by campaign id: the fresh cached figures of
    the whole page in one statement, then each missing or stale one as `reach_of` gets it (from the
    first eligible row of its campaign, as the page lists them)."""
    wanted: dict[str, Campaign] = {}
    for row in rows:
        if eligible(row):
            wanted.setdefault(row.campaign_id, row)
    if not wanted:
        return {}
    workspace_id = next(iter(wanted.values())).workspace_id
    cached = await session.execute(
        select(
            CampaignReachability.campaign_id, CampaignReachability.count, CampaignReachability.computed_at
        ).where(
            CampaignReachability.workspace_id == workspace_id,
            CampaignReachability.campaign_id.in_(list(wanted)),
        )
    )
    found: dict[str, Reach | None] = {
        campaign_id: Reach(count, computed_at)
        for campaign_id, count, computed_at in cached
        if now - computed_at < CACHE_FOR
    }
    for campaign_id, row in wanted.items():
        if campaign_id not in found:
            found[campaign_id] = await reach_of(session, row, now)
    return found


async def reach_of(session: AsyncSession, row: Campaign, now: datetime) -> Reach | None:
    """The cached reachability of `row`'s campaign, computed first when missing or 24 h old;
    None when its audience cannot be evaluated (logged with the reason)."""
    cached = await _cached(session, row.workspace_id, row.campaign_id)
    if cached is not None and now - cached.computed_at < CACHE_FOR:
        return Reach(cached.count, cached.computed_at)
    try:
        async with session.begin_nested():
            return await _compute(session, row, now)
    except (HeraldError, DBAPIError) as exc:
        log.warning(
            "reachability of campaign %s in workspace %s cannot be computed: %s",
            row.campaign_id,
            row.workspace_id,
            _reason(exc),
        )
        return None


async def _compute(session: AsyncSession, row: Campaign, now: datetime) -> Reach:
    if not await _claim(session, row.workspace_id, row.campaign_id, now):
        fresh = await _cached(session, row.workspace_id, row.campaign_id)
        assert fresh is not None  # a concurrent request computed it and committed
        return Reach(fresh.count, fresh.computed_at)
    count = await audience_count(session, row.workspace_id, row, now)
    await session.execute(
        update(CampaignReachability)
        .where(
            CampaignReachability.workspace_id == row.workspace_id,
            CampaignReachability.campaign_id == row.campaign_id,
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
