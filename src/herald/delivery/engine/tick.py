"""The engine's part of a worker tick: every one-time campaign of a workspace that is SENDING gets
its execution started, resolved and dispatched (a live-activity campaign its one broadcast,
`engine.broadcast`); every ACTIVE periodic campaign gets its due occurrence started and its runs
advanced (`periodic.py`); ACTIVE triggered campaigns have their inboxed events turned into firings
(`triggers.fire`), and their executions with users due are dispatched: the EVENT execution of an
event-triggered campaign (never done), and each raise of a business event (resolved like a one-time
run, DONE when settled). The campaigns whose every user is settled (periodic: whose schedule is
over) are returned for the worker to mark SENT (one loop, one notion of "what is due now")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, ScalarSelect, and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.lifecycle import schedule_instants
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType
from herald.clock import Clock, FrozenClock
from herald.config import Settings
from herald.db import Database
from herald.delivery.dispatch import Dispatcher
from herald.delivery.engine import abandoned, broadcast, controls, periodic, triggers
from herald.delivery.engine.content import (
    SendPlan,
    live_campaign,
    live_version,
    live_versions,
    plan_sends,
    streams,
)
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.occurrences import following
from herald.delivery.engine.pause import PAUSED
from herald.delivery.engine.resolve import (
    FIRST_CHUNK,
    ExecutionStatus,
    LiveCampaign,
    count_left_out,
    next_chunk_size,
    prepare,
    resolve,
    resolve_chunk,
    start_execution,
)
from herald.delivery.engine.run import Lane, dispatch, dispatch_lanes, still_sending, users_waiting
from herald.delivery.engine.throttle import ThrottleStore, open_store
from herald.delivery.streaks import Streaks
from herald.errors import HeraldError
from herald.ops import metrics
from herald.wake import due_at, wake_here, wakes

log = logging.getLogger("herald.delivery.engine")


_DELIVERED = (Channel.EMAIL.value, Channel.PUSH.value)


async def _sending(database: Database, workspace_id: str) -> tuple[list[LiveCampaign], list[str]]:
    """The workspace's one-time campaigns SENDING: those Herald delivers (Push, Email), and the ids
    of those on another channel (imported SMS, WhatsApp, ...), which have nothing to send and are
    settled SENT at once rather than left SENDING for ever."""
    async with database.reader() as session:
        rows = (
            await session.scalars(
                select(Campaign)
                .where(
                    Campaign.workspace_id == workspace_id,
                    Campaign.is_latest,
                    Campaign.status == CampaignStatus.SENDING.value,
                    Campaign.delivery_type == DeliveryType.ONE_TIME.value,
                )
                .order_by(Campaign.id)
            )
        ).all()
    delivered = [row for row in rows if row.channel in _DELIVERED]
    elsewhere = [row.campaign_id for row in rows if row.channel not in _DELIVERED]
    return [campaign for row in delivered if (campaign := live_campaign(row)) is not None], elsewhere


async def _stop_executions(database: Database, workspace_id: str, now: datetime) -> None:
    """Executions whose campaign was stopped, or reached its `expiry_time` (SENT before every user
    was settled), or, periodic, was PAUSED, end STOPPED (their pending users stay unsent), paused
    ones included; a periodic run's child campaign with them; their outbox rows waiting for a
    retry, FAILED with why (`abandoned`)."""
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
        Execution.status.in_(abandoned.LIVE),
        Execution.campaign_id.in_(stopped),
    )
    # A read first: on SQLite a write transaction at every tick would make the API's writers wait.
    async with database.reader() as session:
        if (await session.execute(unfinished.limit(1))).first() is None:
            return
    async with database.writer() as session:
        ids = list((await session.scalars(unfinished)).all())
        await abandoned.end_executions(session, workspace_id, ids, now)
        await session.commit()


def _contained(workspace_id: str, campaign_id: str | None) -> contextlib.AbstractContextManager[None]:
    """One campaign's part of the tick (`campaign_id`; None: the event-triggered campaigns' shared
    lanes) failing, from a defect or data it cannot read, is logged and the tick goes on: it must
    not hold back the workspace's other campaigns. What it left is as a dead worker leaves it (a
    claimed user is taken over after its lease); the next tick tries it again."""
    name = f"{workspace_id}/{campaign_id or '(event-triggered lanes)'}"
    return metrics.contained_step(log, "campaign", name)


async def run_executions(
    database: Database,
    settings: Settings,
    now: datetime,
    workspace_id: str,
    stop: asyncio.Event | None = None,
    clock: Clock | None = None,
    streaks: Streaks | None = None,
) -> list[str]:
    """Advance the workspace's executions; the public ids of the campaigns now completely sent (a
    one-time campaign whose users are all settled, a periodic one whose schedule is over). Once
    `stop` is set (SIGTERM) every dispatch ends after the window in hand; what is left is sent by
    the next tick of any worker. `clock`: the time as it moves during the tick, at which each batch
    is claimed and sent and each window checked against its campaign's expiry (else `now`
    throughout). `streaks`: the connectors' failed attempts in a row, kept by the worker across
    its ticks (else counted from zero)."""
    # Wake-ups from here on may be for work this tick does not see (an event stored once the
    # inbox is read): the campaigns below give way to them at the end of their turn.
    seen = wakes()
    await _stop_executions(database, workspace_id, now)
    lease = timedelta(seconds=settings.delivery_lease_seconds)
    await abandoned.settle_orphans(database, workspace_id, now, lease)
    campaigns, finished = await _sending(database, workspace_id)
    # More events than one tick takes may wait in the inbox: the next tick takes them once these
    # are sent, and the campaigns give way to them at the end of their turn (`begin_turn`).
    more_events = await triggers.fire(database, workspace_id, now)
    if more_events:
        wake_here(workspace_id)
    triggered = await _triggered_due(database, workspace_id, now, lease)
    live_activities = await broadcast.due(database, workspace_id)
    repeating = await periodic.active(database, workspace_id)
    if not campaigns and not triggered and not live_activities and not repeating:
        return finished
    async with (
        Dispatcher(settings, clock or FrozenClock(now), database, stop=stop, streaks=streaks) as dispatcher,
        open_store(settings) as store,
    ):
        for live_activity in live_activities:
            with _contained(workspace_id, live_activity.campaign_id):
                await broadcast.run_broadcasts(database, dispatcher, [live_activity], now, lease)
        # The EVENT executions first, together (one claim, one window for all of them): their
        # messages are due within a second of their events, and the campaigns below give way to
        # them at the end of their turn (`Dispatcher.yielding`). Then a business event's raises
        # one by one (each resolved first, DONE when settled).
        events: list[tuple[LiveCampaign, Execution]] = []
        raises: list[tuple[LiveCampaign, Execution]] = []
        for campaign, execution in triggered:
            if _an_event_lane(execution):
                events.append((campaign, execution))
            else:
                raises.append((campaign, execution))
        with _contained(workspace_id, None):
            lanes = await _lanes(database, store, workspace_id, events)
            await dispatch_lanes(database, dispatcher, lanes, lease)
        for campaign, execution in raises:
            with _contained(workspace_id, campaign.campaign_id):
                dispatcher.begin_turn(seen, more_events)
                await _run_triggered(database, dispatcher, store, campaign, execution, now, lease)
        # Several one-time campaigns sending: each gives way to the others at the end of its turn,
        # as to work woken during it. A campaign just published is moved to SENDING by the tick
        # its publish woke, so no wake-up came during the tick for the one ahead of it, which sent
        # to its end first (30 s and more before the new one's first message at a slow receiver).
        others_sending = len(campaigns) > 1
        if others_sending:
            # The ones not started yet first: a campaign just published waits for no other's turn.
            started = await _started(database, workspace_id)
            campaigns = sorted(campaigns, key=lambda campaign: campaign.campaign_id in started)
        for campaign in campaigns:
            with _contained(workspace_id, campaign.campaign_id):
                dispatcher.begin_turn(seen, more_events or others_sending)
                execution = await start_execution(database, campaign, now, 1, _start_of(campaign))
                if await _run_one(database, dispatcher, store, campaign, execution, now, lease):
                    finished.append(campaign.campaign_id)
        if others_sending and dispatcher.gave_way and not dispatcher.stopping:
            # Those that gave way to each other go on at the next tick, at once (no wake-up is
            # coming: they gave way to one another, not to new work).
            wake_here(workspace_id)
        for each in repeating:
            with _contained(workspace_id, each.campaign.campaign_id):
                await periodic.due_runs(database, each, now)
                # Its next run's moment, for the worker's sleep: no table holds it.
                upcoming = following(each.recurrence, now)
                if upcoming is not None:
                    due_at(upcoming.at)
                runs = await periodic.live_runs(database, workspace_id, each.campaign.campaign_id)
                in_flight = False
                for execution in runs:
                    dispatcher.begin_turn(seen, more_events)
                    in_flight |= not await _run_one(
                        database, dispatcher, store, each.campaign, execution, now, lease
                    )
                if not in_flight and await periodic.schedule_over(database, each, now):
                    finished.append(each.campaign.campaign_id)
        # Sends cut short when their campaign's expiry came during the tick (`run._sending_at`):
        # the next tick, at once rather than at the interval, marks it SENT and its run STOPPED.
        moment = dispatcher.now()
        live = [*campaigns, *(c for c, _ in triggered), *(each.campaign for each in repeating)]
        if any(_expired_during(campaign, now, moment) for campaign in live):
            wake_here(workspace_id)
    return finished


async def _started(database: Database, workspace_id: str) -> set[str]:
    """The one-time campaigns of the workspace whose execution has begun (SENDING ones have one
    from their first tick on: the others were just published)."""
    async with database.reader() as session:
        found = await session.scalars(
            select(Execution.campaign_id).where(
                Execution.workspace_id == workspace_id,
                Execution.trigger.is_(None),
                Execution.status.in_(abandoned.LIVE),
            )
        )
        return set(found)


async def run_event_lanes(
    database: Database,
    settings: Settings,
    workspace_id: str,
    clock: Clock,
    stop: asyncio.Event | None = None,
    streaks: Streaks | None = None,
) -> bool:
    """The event-triggered campaigns of a workspace alone: a batch of its inboxed events fired and
    the due users of their EVENT executions sent, as `run_executions` does first; whether more
    events wait in the inbox. For a worker's event lane (`worker.run_forever`), beside a tick held
    by a long dispatch: a message due within a second of its event must not wait for another
    campaign's batch at a slow receiver, in another workspace least of all. A tick dispatching the
    same executions meanwhile splits their users with it, as another worker would."""
    now = clock.now()
    lease = timedelta(seconds=settings.delivery_lease_seconds)
    more_events = await triggers.fire(database, workspace_id, now)
    events = [
        (campaign, execution)
        for campaign, execution in await _triggered_due(database, workspace_id, now, lease)
        if _an_event_lane(execution)
    ]
    if events:
        async with (
            Dispatcher(settings, clock, database, stop=stop, streaks=streaks) as dispatcher,
            open_store(settings) as store,
        ):
            with _contained(workspace_id, None):
                lanes = await _lanes(database, store, workspace_id, events)
                await dispatch_lanes(database, dispatcher, lanes, lease)
    return more_events


def _an_event_lane(execution: Execution) -> bool:
    """The long-lived execution of an event-triggered campaign, sending: its firings go out
    together with the workspace's others (`dispatch_lanes`), before the tick's other work."""
    return execution.trigger == triggers.EVENT and execution.status == ExecutionStatus.DISPATCHING


def _expired_during(campaign: LiveCampaign, start: datetime, end: datetime) -> bool:
    """The campaign's expiry came after `start` and by `end` (one wake-up per expiry, never a loop)."""
    expiry = schedule_instants(campaign.components)[1]
    return expiry is not None and start < expiry <= end


def _first_user(*conditions: ColumnElement[bool]) -> ScalarSelect[int]:
    """The execution's first user in rank order that meets `conditions` (its state among them): a
    walk of the (workspace, state, execution, rank) index that stops at the first row. An EXISTS
    let PostgreSQL expect one among the thousands it thought due and scan the table for it, settled
    users first (15-75 ms a tick at 14,000-60,000 users)."""
    return (
        select(ExecutionUser.rank)
        .where(
            ExecutionUser.workspace_id == Execution.workspace_id,
            ExecutionUser.execution_id == Execution.id,
            *conditions,
        )
        .order_by(ExecutionUser.rank)
        .limit(1)
        .scalar_subquery()
    )


async def _triggered_due(
    database: Database, workspace_id: str, now: datetime, lease: timedelta
) -> list[tuple[LiveCampaign, Execution]]:
    """The executions of ACTIVE triggered campaigns with work now: a business raise still
    resolving or left with nobody to send to (to end it), or users due (pending and not deferred
    past now, claimed past their lease, a retry)."""
    async with database.reader() as session:
        campaigns = {
            c.campaign_id: c
            for kind in (*triggers.FIRED_BY_EVENTS, DeliveryType.BUSINESS_EVENT_TRIGGERED)
            for c in await triggers.active_triggered(session, workspace_id, kind)
        }
        if not campaigns:
            return []
        due = or_(
            *(
                _first_user(*conditions).is_not(None)
                for conditions in (
                    (
                        ExecutionUser.state == "PENDING",
                        or_(ExecutionUser.not_before.is_(None), ExecutionUser.not_before <= now),
                    ),
                    (ExecutionUser.state == "CLAIMED", ExecutionUser.claimed_at < now - lease),
                    (ExecutionUser.state == "RETRY", ExecutionUser.not_before <= now),
                )
            )
        )
        # A business raise whose users are all settled while it is still DISPATCHING: its dispatch
        # gave way (its turn over) after its last batch, before it could see that nobody was left.
        # Nothing of it is due, so without this it would never be taken up again to end DONE.
        settled = and_(
            Execution.trigger == triggers.BUSINESS,
            *(
                _first_user(ExecutionUser.state == state).is_(None)
                for state in ("PENDING", "CLAIMED", "RETRY")
            ),
        )
        rows = (
            await session.scalars(
                select(Execution)
                .where(
                    Execution.workspace_id == workspace_id,
                    Execution.trigger.is_not(None),
                    Execution.campaign_id.in_(list(campaigns)),
                    or_(
                        Execution.status == ExecutionStatus.RESOLVING,
                        and_(Execution.status == ExecutionStatus.DISPATCHING, or_(due, settled)),
                    ),
                )
                .order_by(Execution.id)
            )
        ).all()
    return [(campaigns[e.campaign_id], e) for e in rows]


# (workspace, execution) -> the plan last made for it: an EVENT execution is dispatched at every
# wake-up, and its content is read again only when the campaign changed (`live_version`).
_plans: dict[tuple[str, str], SendPlan] = {}


async def _plan_for(database: Database, campaign: LiveCampaign, execution: Execution) -> SendPlan:
    key = (execution.workspace_id, execution.id)
    known = _plans.get(key)
    if known is not None:
        _, version = await live_version(database, execution.workspace_id, execution.campaign_id)
        if version == known.version:
            return known
    async with database.reader() as session:
        plan = await plan_sends(session, campaign, execution)
    if len(_plans) > 1000:
        _plans.clear()
    _plans[key] = plan
    return plan


async def _lanes(
    database: Database,
    store: ThrottleStore,
    workspace_id: str,
    events: list[tuple[LiveCampaign, Execution]],
) -> list[Lane]:
    """The EVENT executions with their plans (made again only for a campaign changed since) and
    delivery controls, read in one session: each session the worker opens costs it a turn of the
    event loop, which it shares with the API's requests in an embedding server."""
    if not events:
        return []
    lanes: list[Lane] = []
    async with database.reader() as session:
        versions = await live_versions(session, workspace_id, [c.campaign_id for c, _ in events])
        for campaign, execution in events:
            key = (execution.workspace_id, execution.id)
            plan = _plans.get(key)
            if plan is None or plan.version != versions.get(campaign.campaign_id):
                plan = _plans[key] = await plan_sends(session, campaign, execution)
            rules = await controls.load(session, campaign, store, execution.trigger)
            lanes.append(Lane(plan, execution, rules))
    return lanes


async def _run_triggered(
    database: Database,
    dispatcher: Dispatcher,
    store: ThrottleStore,
    campaign: LiveCampaign,
    execution: Execution,
    now: datetime,
    lease: timedelta,
) -> None:
    if execution.status == ExecutionStatus.RESOLVING:  # a business event's raise
        try:
            if execution.resolved_after is None:
                execution = await prepare(database, campaign, execution, now, streaming=False)
            await resolve(database, campaign, execution, now)
        except HeraldError as exc:
            log.error(
                "campaign %s/%s: audience cannot be resolved: %s",
                campaign.workspace_id,
                campaign.campaign_id,
                exc,
            )
            await _end(
                database, execution, ExecutionStatus.FAILED, now, f"The audience cannot be resolved: {exc}"
            )
            return
        async with database.reader() as session:
            current = await session.get(Execution, (execution.workspace_id, execution.id))
        if current is None or current.status != ExecutionStatus.DISPATCHING:
            return
        execution = current
    plan = await _plan_for(database, campaign, execution)
    async with database.reader() as session:
        rules = await controls.load(session, campaign, store, execution.trigger)
    done = await dispatch(database, dispatcher, plan, execution, lease, rules)
    if done and execution.trigger == triggers.BUSINESS:
        await _end(database, execution, ExecutionStatus.DONE, dispatcher.now(), None)


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
    try:
        if execution.status == ExecutionStatus.RESOLVING and execution.resolved_after is None:
            execution = await prepare(database, campaign, execution, now, streaming=streams(campaign))
        if execution.status == ExecutionStatus.RESOLVING:
            # Not streamed (or prepared by a worker that died): the whole audience first.
            if not await resolve(database, campaign, execution, now):
                return False  # another worker is writing it
            async with database.reader() as session:  # now DISPATCHING
                current = await session.get(Execution, (execution.workspace_id, execution.id))
            assert current is not None
            execution = current
        if execution.status in (ExecutionStatus.DONE, ExecutionStatus.FAILED):
            return True
        if (
            execution.status == PAUSED
            and execution.resolved_at is not None
            and not await users_waiting(database, execution)
        ):
            # Paused by the error threshold as its last users were settled (by another worker's
            # window, say): nobody is left to spare it for, so it is done, not SENDING until
            # someone resumes it.
            await _end(database, execution, ExecutionStatus.DONE, dispatcher.now(), None)
            return True
        if execution.status != ExecutionStatus.DISPATCHING:
            return False  # PAUSED until resumed (`engine.pause`), or STOPPED
        async with database.reader() as session:
            plan = await plan_sends(session, campaign, execution)
            rules = await controls.load(session, campaign, store)

        async def reload(session: AsyncSession) -> controls.Rules:
            return await controls.load(session, campaign, store)

        # Streamed: a chunk of the audience written, its users sent, the next chunk (larger) ...
        written = execution.resolved_at is not None
        size = FIRST_CHUNK
        counting: asyncio.Task[None] | None = None
        try:
            while True:
                if not written:
                    found = await resolve_chunk(database, campaign, execution, now, size)
                    if found is False and size == FIRST_CHUNK:  # counted while the chunk goes out
                        counting = asyncio.create_task(count_left_out(database, campaign, execution, now))
                    size = next_chunk_size(size)
                    if found is None:  # another worker is writing it: send what is there
                        await dispatch(database, dispatcher, plan, execution, lease, rules, reload)
                        return False
                    written = found
                settled = await dispatch(database, dispatcher, plan, execution, lease, rules, reload)
                if counting is not None:
                    await counting
                    counting = None
                if written:
                    break
                if dispatcher.yielding:
                    return False  # the rest of the audience is written by the next tick
                if not await still_sending(database, execution, dispatcher.now()):
                    return False  # stopped or paused: the rest is written when it goes on
        finally:
            if counting is not None:  # the dispatch failed: the counts are the next chunk's
                counting.cancel()
                await asyncio.gather(counting, return_exceptions=True)
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
    if settled:
        await _end(database, execution, ExecutionStatus.DONE, dispatcher.now(), None)
    return settled


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
