"""The engine's part of a worker tick: every one-time campaign of a workspace that is SENDING gets
its execution started, resolved and dispatched; every ACTIVE periodic campaign gets its due
occurrence started and its runs advanced (`periodic.py`); the campaigns whose every user is
settled (periodic: whose schedule is over) are returned for the worker to mark SENT (one loop, one
notion of "what is due now")."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update

from herald.campaigns.lifecycle import schedule_instants
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType
from herald.campaigns.validation import load_document
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import Database
from herald.delivery.dispatch import Dispatcher
from herald.delivery.engine import controls, periodic
from herald.delivery.engine.content import plan_sends
from herald.delivery.engine.models import Execution
from herald.delivery.engine.pause import PAUSED
from herald.delivery.engine.resolve import ExecutionStatus, LiveCampaign, resolve, start_execution
from herald.delivery.engine.run import dispatch
from herald.delivery.engine.throttle import ThrottleStore, open_store
from herald.errors import HeraldError

log = logging.getLogger("herald.delivery.engine")


async def _sending(database: Database, workspace_id: str) -> list[LiveCampaign]:
    async with database.reader() as session:
        rows = (
            await session.scalars(
                select(Campaign)
                .where(
                    Campaign.workspace_id == workspace_id,
                    Campaign.is_latest,
                    Campaign.status == CampaignStatus.SENDING.value,
                    Campaign.delivery_type == DeliveryType.ONE_TIME.value,
                    Campaign.channel.in_([Channel.EMAIL.value, Channel.PUSH.value]),
                )
                .order_by(Campaign.id)
            )
        ).all()
    found: list[LiveCampaign] = []
    for row in rows:
        document, problems = load_document(
            Channel(row.channel), DeliveryType(row.delivery_type), row.components
        )
        if document is None:
            log.error(
                "campaign %s/%s cannot be read for sending: %s", workspace_id, row.campaign_id, problems
            )
            continue
        found.append(
            LiveCampaign(workspace_id, row.campaign_id, row.channel, document, dict(row.components or {}))
        )
    return found


async def _stop_executions(database: Database, workspace_id: str, now: datetime) -> None:
    """Executions whose campaign was stopped, or reached its `expiry_time` (SENT before every user
    was settled), or, periodic, was PAUSED, end STOPPED (their pending users stay unsent), paused
    ones included; a periodic run's child campaign with them."""
    live = [ExecutionStatus.RESOLVING, ExecutionStatus.DISPATCHING, PAUSED]
    stopped = select(Campaign.campaign_id).where(
        Campaign.workspace_id == workspace_id,
        Campaign.is_latest,
        or_(
            Campaign.status.in_([CampaignStatus.STOPPED.value, CampaignStatus.SENT.value]),
            and_(
                Campaign.status == CampaignStatus.PAUSED.value,
                Campaign.delivery_type == DeliveryType.PERIODIC.value,
            ),
        ),
    )
    unfinished = select(Execution.id).where(
        Execution.workspace_id == workspace_id,
        Execution.status.in_(live),
        Execution.campaign_id.in_(stopped),
    )
    # A read first: on SQLite a write transaction at every tick would make the API's writers wait.
    async with database.reader() as session:
        if (await session.execute(unfinished.limit(1))).first() is None:
            return
    async with database.writer() as session:
        ids = list((await session.scalars(unfinished)).all())
        await session.execute(
            update(Execution)
            .where(Execution.workspace_id == workspace_id, Execution.id.in_(ids))
            .values(status=ExecutionStatus.STOPPED, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        await periodic.settle_children(session, workspace_id, ids)
        await session.commit()


async def run_executions(
    database: Database, settings: Settings, now: datetime, workspace_id: str
) -> list[str]:
    """Advance the workspace's executions; the public ids of the campaigns now completely sent (a
    one-time campaign whose users are all settled, a periodic one whose schedule is over)."""
    finished: list[str] = []
    await _stop_executions(database, workspace_id, now)
    campaigns = await _sending(database, workspace_id)
    repeating = await periodic.active(database, workspace_id)
    if not campaigns and not repeating:
        return finished
    async with (
        Dispatcher(settings, FrozenClock(now), database.writer) as dispatcher,
        open_store(settings) as store,
    ):
        lease = timedelta(seconds=settings.delivery_lease_seconds)
        for campaign in campaigns:
            execution = await start_execution(database, campaign, now, 1, _start_of(campaign))
            if await _run_one(database, dispatcher, store, campaign, execution, now, lease):
                finished.append(campaign.campaign_id)
        for each in repeating:
            await periodic.due_runs(database, each, now)
            runs = await periodic.live_runs(database, workspace_id, each.campaign.campaign_id)
            in_flight = False
            for execution in runs:
                in_flight |= not await _run_one(
                    database, dispatcher, store, each.campaign, execution, now, lease
                )
            if not in_flight and periodic.schedule_over(each.recurrence, now):
                finished.append(each.campaign.campaign_id)
    return finished


def _start_of(campaign: LiveCampaign) -> datetime | None:
    """A one-time campaign's `start_time` (the per-user send times count from it); None for ASAP."""
    details = campaign.document.scheduling_details
    if details is None or details.delivery_type is None or details.delivery_type.value == "ASAP":
        return None
    return schedule_instants(campaign.components)[0]


async def _run_one(
    database: Database,
    dispatcher: Dispatcher,
    store: ThrottleStore,
    campaign: LiveCampaign,
    execution: Execution,
    now: datetime,
    lease: timedelta,
) -> bool:
    if execution.status == ExecutionStatus.RESOLVING:
        try:
            await resolve(database, campaign, execution, now)
        except HeraldError as exc:
            # E.g. a custom segment the filters name was deleted since publish: nobody can be
            # chosen, so the execution ends FAILED with the reason (stats show it) and the
            # campaign is settled rather than left SENDING for ever.
            log.error(
                "campaign %s/%s: audience cannot be resolved: %s",
                campaign.workspace_id,
                campaign.campaign_id,
                exc,
            )
            await _end(
                database, execution, ExecutionStatus.FAILED, now, f"The audience cannot be resolved: {exc}"
            )
            return True
    if execution.status in (ExecutionStatus.DONE, ExecutionStatus.FAILED):
        return True
    if execution.status == PAUSED:
        return False  # until resumed (`engine.pause`)
    async with database.reader() as session:
        plan = await plan_sends(session, campaign, execution)
        rules = await controls.load(session, campaign, store)
    done = await dispatch(database, dispatcher, plan, execution, now, lease, rules)
    if done:
        await _end(database, execution, ExecutionStatus.DONE, now, None)
    return done


async def _end(
    database: Database, execution: Execution, status: str, now: datetime, reason: str | None
) -> None:
    async with database.writer() as session:
        await session.execute(
            update(Execution)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .values(status=status, reason=reason, updated_at=now)
        )
        await periodic.settle_children(session, execution.workspace_id, [execution.id])
        await session.commit()
