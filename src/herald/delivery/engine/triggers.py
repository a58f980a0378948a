"""Event-triggered campaigns: an event ingested through the API becomes firings of the campaigns it
matches, user rows of the campaign's one long-lived EVENT execution that the engine dispatches like
any other (controls, outbox, stats).

1. Ingestion (`/v1/event`, `/v1/transition`; not historical imports) calls `enqueue` in its own
   transaction: each event whose action an ACTIVE EVENT_TRIGGERED campaign waits for is written to
   the trigger inbox with those campaigns' ids, and the workers are woken at the commit
   (`herald.wake`). A campaign PAUSED at that moment is not listed: its events never fire it.
2. The worker (`fire`) takes inbox rows (`FOR UPDATE SKIP LOCKED`: several workers take disjoint
   rows), evaluates each campaign's trigger with the segmentation compiler (the event is one of the
   actions `included_filters` waits for, with its attributes; the user then matches
   `included_filters`, counts included, and `secondary_included_filters`; the user is in the
   campaign's audience), and writes one user row per (event, user) with the time it is due, in the
   transaction that deletes the inbox rows: each (campaign, event, user) fires exactly once.
3. The engine's dispatch sends the firings when due; the outbox id of each message is derived from
   (execution, user, platform, event), so a platform gets one message per firing.

A user's events count in (time, id) order, whenever they are stored: an event stored late is judged
as of itself, and when a campaign counts its action, the user's later events already judged are
judged again with it counted (`_in_time_order`): one it now qualifies fires, and a firing whose event
no longer qualifies keeps its place (`_standing_in`). The users of such events take their turns
first (`hold_users`).
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast
from zoneinfo import ZoneInfo

from pydantic import ValidationError
from sqlalchemy import Table, bindparam, delete, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.advisory_locks import lock_key
from herald.audience.attributes import parse_datetime_text
from herald.audience.ingest import EventWrite
from herald.audience.models import Event, User
from herald.audience.segmentation.audience import session_dialect
from herald.campaigns import durations
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType
from herald.campaigns.schemas.filters import FilterGroup
from herald.campaigns.schemas.goals import ConversionGoalDetails
from herald.campaigns.schemas.trigger import (
    TriggerCondition,
    TriggerDelayType,
    TriggerRelation,
    awaited_actions,
    counted_actions,
)
from herald.db import Database
from herald.delivery.engine import best_times, conversions
from herald.delivery.engine.content import live_campaign
from herald.delivery.engine.models import Execution, ExecutionUser, TriggerInbox
from herald.delivery.engine.rank import RANK_BITS, rank_of
from herald.delivery.engine.resolve import (
    ExecutionStatus,
    LiveCampaign,
    global_control_share,
    workspace_settings,
)
from herald.delivery.engine.send_time import first_in_hour
from herald.delivery.engine.split import in_global_control
from herald.delivery.engine.trigger_match import Later, firing_events, in_audience, later_events
from herald.errors import ValidationFailed
from herald.ops import metrics
from herald.sql_lists import one_of
from herald.timezones import zone_named
from herald.wake import wake_on_commit

log = logging.getLogger("herald.delivery.engine")

EVENT = "EVENT"
BUSINESS = "BUSINESS"
# Inbox rows taken at once by a worker (at most: a tick takes what is there). A tick fires them,
# then sends the firings; at 500, 1,000 events/s on SQLite filled each tick to the limit and a
# slow tick was never caught up (over 60 s: p95 9.4 s); with room for more, a tick that follows a
# slow one takes what arrived meanwhile (p95 1.8-1.9 s). See benchmarks/README.md: over five
# minutes the worker still falls behind.
INBOX_BATCH = 2000


class Dropped:
    """Why a firing is written SUPPRESSED instead of waiting to be sent."""

    TRIGGER_TIME = "TRIGGER_TIME"  # BEFORE: the anchor attribute is missing or already past
    SEND_LIMIT = "SEND_LIMIT"  # LOCATION: the user had `send_limit_value` messages in the window
    LEFT_GEOFENCE = "LEFT_GEOFENCE"  # LOCATION dwell: the user left before the dwell time was up
    OUTSIDE_TIME_LIMIT = "OUTSIDE_TIME_LIMIT"  # LOCATION: due outside the geofence time limit's bounds


# The delivery types whose campaigns are fired from ingested events (DEVICE_TRIGGERED: its event
# condition, evaluated here on the server; LOCATION_TRIGGERED: position updates, `engine.location`).
FIRED_BY_EVENTS = (
    DeliveryType.EVENT_TRIGGERED,
    DeliveryType.DEVICE_TRIGGERED,
    DeliveryType.LOCATION_TRIGGERED,
)
# The action of the position updates a LOCATION_TRIGGERED campaign waits for.
LOCATION_ACTION = "location_update"


# --- what a trigger waits for -----------------------------------------------------------------


def trigger_of(components: Mapping[str, Any] | None) -> TriggerCondition | None:
    raw = (components or {}).get("trigger_condition")
    if not isinstance(raw, dict):
        return None
    try:
        return TriggerCondition.model_validate(raw)
    except ValidationError:
        return None


# (campaign row id, revision) -> the actions it waits for: a row is parsed once per version.
_actions_cache: dict[tuple[str, int], frozenset[str]] = {}


# Built once: every ingestion runs it, and built per call the statement cost more CPU than the
# database takes to answer it.
_WATCHING = select(Campaign.id, Campaign.revision, Campaign.campaign_id, Campaign.delivery_type).where(
    Campaign.workspace_id == bindparam("workspace_id"),
    Campaign.is_latest,
    Campaign.status == CampaignStatus.ACTIVE.value,
    Campaign.delivery_type.in_([kind.value for kind in FIRED_BY_EVENTS]),
)


# The table's own INSERT, not the model's: the ORM's bulk path costs more than the row.
_INBOX_INSERT = insert(cast(Table, TriggerInbox.__table__))


async def _watching(session: AsyncSession, workspace_id: str) -> dict[str, list[str]]:
    """Action name -> the ACTIVE campaigns fired by events (public ids) waiting for it."""
    rows = (await session.execute(_WATCHING, {"workspace_id": workspace_id})).all()
    found: dict[str, list[str]] = defaultdict(list)
    for row_id, revision, campaign_id, kind in rows:
        key = (str(row_id), int(revision))
        actions = _actions_cache.get(key)
        if actions is None and kind == DeliveryType.LOCATION_TRIGGERED.value:
            actions = _actions_cache[key] = frozenset({LOCATION_ACTION})
        if actions is None:
            components = await session.scalar(
                select(Campaign.components).where(
                    Campaign.workspace_id == workspace_id, Campaign.id == row_id
                )
            )
            actions = awaited_actions(trigger_of(components))
            if len(_actions_cache) > 10_000:
                _actions_cache.clear()
            _actions_cache[key] = actions
        for action in actions:
            found[action].append(campaign_id)
    return found


async def enqueue(
    session: AsyncSession, workspace_id: str, events: Sequence[tuple[str, EventWrite]], now: datetime
) -> int:
    """Inbox the events that ACTIVE event-triggered campaigns wait for (in the ingestion's own
    transaction) and wake the workers at its commit; how many were inboxed."""
    if not events:
        return 0
    watching = await _watching(session, workspace_id)
    if not watching:
        return 0
    rows = [
        {
            "workspace_id": workspace_id,
            "event_id": event_id,
            "customer_id": event.customer_id,
            "campaigns": sorted(set(watching[event.action])),
            "received_at": now,
        }
        for event_id, event in events
        if event.action in watching
    ]
    if rows:
        await session.execute(_INBOX_INSERT, rows)
        await wake_on_commit(session, workspace_id)
    return len(rows)


# --- when a firing is due ---------------------------------------------------------------------


def due_at(
    trigger: TriggerCondition | None,
    occurred_at: datetime,
    attributes: Mapping[str, Any],
    now: datetime,
    hour: int | None,
    tz: ZoneInfo,
) -> datetime | None:
    """When a firing of an event at `occurred_at` is to be sent (`now` or earlier: at once); None
    when it cannot be (BEFORE an anchor attribute that is missing or already past). `hour` is the
    user's best hour (INTELLIGENT_DELAY) in `tz`."""
    kind = trigger.trigger_delay_type if trigger is not None else None
    if trigger is None or kind in (None, TriggerDelayType.ASAP):
        return now
    if kind is TriggerDelayType.INTELLIGENT_DELAY:
        window = trigger.intelligent_delay_optimization
        if window is None:
            return now
        earliest = occurred_at + durations.duration(window.min_delay_value, window.min_delay_granularity)
        latest = occurred_at + durations.duration(window.max_delay_value, window.max_delay_granularity)
        return _in_best_hour(max(earliest, now), latest, hour, tz)
    delay = durations.duration(trigger.trigger_delay_value, trigger.trigger_delay_granularity)
    if trigger.trigger_relation is TriggerRelation.BEFORE:
        name = trigger.trigger_attr_name()
        anchor = anchor_of(attributes.get(name) if name else None)
        if anchor is None or anchor <= now:
            return None
        return max(anchor - delay, now)
    return max(occurred_at + delay, now)


def anchor_of(value: Any) -> datetime | None:
    """The moment a BEFORE anchor attribute holds: an ISO 8601 date-time, or seconds since the
    epoch; None when it holds neither, or a number no date of the calendar is (milliseconds read as
    seconds: past the year 9999). Raised instead, it failed the whole batch of the campaign's
    events, which were then lost with it."""
    if isinstance(value, str):
        return parse_datetime_text(value)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _in_best_hour(earliest: datetime, latest: datetime, hour: int | None, tz: ZoneInfo) -> datetime:
    """The first moment in [earliest, latest] inside the user's best `hour` of the day in `tz`:
    `earliest` itself when it falls in that hour, else the hour's start; `earliest` when the window
    holds no such moment or the user has no best hour."""
    if hour is None:
        return earliest
    start = first_in_hour(earliest, hour, tz)
    return start if start <= latest else earliest


# --- the EVENT execution of a campaign --------------------------------------------------------


_executions: dict[tuple[str, str], Execution] = {}


async def event_executions(
    database: Database, workspace_id: str, campaign_ids: list[str], now: datetime
) -> dict[str, Execution]:
    """Each campaign's one EVENT execution (run 1), created DISPATCHING at first need, those
    missing in one transaction (their ids never change: known ones are not read again)."""
    missing = [cid for cid in campaign_ids if (workspace_id, cid) not in _executions]
    if missing:
        found = await _find(database, workspace_id, missing)
        if len(found) < len(missing):
            # One transaction each: another worker may create some of them first, and a refused
            # one must not take the others with it (they would be missing, read as created).
            for cid in missing:
                if cid in found:
                    continue
                try:
                    async with database.writer() as session:
                        session.add(
                            Execution.starting(
                                workspace_id, cid, 1, ExecutionStatus.DISPATCHING, now, trigger=EVENT
                            )
                        )
                        await session.commit()
                except IntegrityError:
                    pass  # another worker created it first
            found = await _find(database, workspace_id, missing)
        for cid, execution in found.items():
            _executions[(workspace_id, cid)] = execution
    return {cid: _executions[(workspace_id, cid)] for cid in campaign_ids}


async def _find(database: Database, workspace_id: str, campaign_ids: list[str]) -> dict[str, Execution]:
    async with database.reader() as session:
        rows = await session.scalars(
            select(Execution).where(
                Execution.workspace_id == workspace_id,
                Execution.campaign_id.in_(campaign_ids),
                Execution.run == 1,
            )
        )
        return {execution.campaign_id: execution for execution in rows}


# (campaign row id, revision) -> the engine's reading of it: a version is validated once.
_live_cache: dict[tuple[str, int], LiveCampaign | None] = {}


async def active_triggered(
    session: AsyncSession, workspace_id: str, kind: DeliveryType
) -> list[LiveCampaign]:
    versions = (
        await session.execute(
            select(Campaign.id, Campaign.revision)
            .where(
                Campaign.workspace_id == workspace_id,
                Campaign.is_latest,
                Campaign.status == CampaignStatus.ACTIVE.value,
                Campaign.delivery_type == kind.value,
                Campaign.channel.in_([Channel.EMAIL.value, Channel.PUSH.value]),
            )
            .order_by(Campaign.id)
        )
    ).all()
    found: list[LiveCampaign] = []
    for row_id, revision in versions:
        key = (str(row_id), int(revision))
        if key not in _live_cache:
            row = await session.get(Campaign, (workspace_id, row_id))
            if len(_live_cache) > 10_000:
                _live_cache.clear()
            _live_cache[key] = live_campaign(row) if row is not None else None
        live = _live_cache[key]
        if live is not None:
            found.append(live)
    return found


# --- firing -----------------------------------------------------------------------------------


async def fire(database: Database, workspace_id: str, now: datetime) -> bool:
    """Turn a batch of the workspace's inboxed events (the oldest) into firings; whether more are
    waiting. One batch per tick, not the whole inbox: under sustained ingestion the inbox refills
    as fast as it is drained, and the firings written must be sent before the next batch is taken
    (the tick goes on at once, `tick.run_executions`)."""
    async with database.reader() as session:
        waiting = await session.scalar(
            select(TriggerInbox.event_id).where(TriggerInbox.workspace_id == workspace_id).limit(1)
        )
        if waiting is None:
            return False
        campaigns = {
            c.campaign_id: c
            for kind in FIRED_BY_EVENTS
            for c in await active_triggered(session, workspace_id, kind)
        }
    executions = await event_executions(database, workspace_id, list(campaigns), now)
    taken, _ = await _fire_batch(database, workspace_id, campaigns, executions, now)
    return taken >= INBOX_BATCH


@dataclass(frozen=True, slots=True)
class Fired:
    """An inboxed event as firing reads it (a plain row: the batch's events loaded as ORM entities
    cost more than evaluating the campaigns)."""

    id: str
    customer_id: str
    action: str
    attributes: dict[str, Any]
    occurred_at: datetime


# Built once (a batch at each tick).
_TAKE_INBOX = (
    select(TriggerInbox.event_id, TriggerInbox.campaigns)
    .where(TriggerInbox.workspace_id == bindparam("workspace_id"))
    .order_by(TriggerInbox.received_at, TriggerInbox.event_id)
    .limit(bindparam("batch"))  # INBOX_BATCH, read at each run
    .with_for_update(skip_locked=True)
)
_FIRED_EVENTS = select(Event.id, Event.customer_id, Event.action, Event.attributes, Event.occurred_at).where(
    Event.workspace_id == bindparam("workspace_id"), one_of(Event.id, "ids")
)


async def _fire_batch(
    database: Database,
    workspace_id: str,
    campaigns: dict[str, LiveCampaign],
    executions: dict[str, Execution],
    now: datetime,
) -> tuple[int, int]:
    async with database.writer() as session:
        inbox = (
            await session.execute(_TAKE_INBOX, {"workspace_id": workspace_id, "batch": INBOX_BATCH})
        ).all()
        if not inbox:
            return 0, 0
        ids = [event_id for event_id, _ in inbox]
        events = {
            row[0]: Fired(*row)
            for row in await session.execute(_FIRED_EVENTS, {"workspace_id": workspace_id, "ids": ids})
        }
        by_campaign: dict[str, list[Fired]] = defaultdict(list)
        for event_id, names in inbox:
            event = events.get(event_id)
            for campaign_id in names:
                # Not ACTIVE any more (paused, expired since): the event does not fire it.
                if event is not None and campaign_id in campaigns:
                    by_campaign[campaign_id].append(event)
        # Imported here: `engine.location` builds on this module's helpers.
        from herald.delivery.engine.location import fire_location

        # Once for the whole batch, before any campaign is fired: see `hold_users`.
        await hold_users(session, workspace_id, _in_order(campaigns, by_campaign))
        firings = FiringWrites()
        for campaign_id, fired in by_campaign.items():
            campaign = campaigns[campaign_id]
            fire_one = _fire_campaign
            if campaign.document.delivery_type is DeliveryType.LOCATION_TRIGGERED:
                fire_one = fire_location
            # One campaign that cannot be evaluated (a defect, data it cannot read) is logged and
            # counted, and the batch goes on with the others: its events are not retried forever,
            # holding back every triggered campaign of the workspace.
            with metrics.contained_step(log, "campaign", f"{workspace_id}/{campaign_id}"):
                try:
                    async with _own_part(session):
                        await fire_one(session, firings, campaign, executions[campaign_id], fired, now)
                except ValidationFailed as exc:  # e.g. a custom segment deleted since publish
                    log.error(
                        "campaign %s/%s: trigger cannot be evaluated: %s", workspace_id, campaign_id, exc
                    )
        written = await firings.write(session, now)
        await session.execute(
            delete(TriggerInbox)
            .where(TriggerInbox.workspace_id == workspace_id, TriggerInbox.event_id.in_(ids))
            .execution_options(synchronize_session=False)  # see `FiringWrites.write`
        )
        await session.commit()
    return len(inbox), written


def _in_order(campaigns: dict[str, LiveCampaign], by_campaign: dict[str, list[Fired]]) -> set[str]:
    """The users of a batch whose firings depend on the order of their events: those with a
    position update for a location-triggered campaign, or an event of an action a campaign counts
    (`counted_actions`)."""
    users: set[str] = set()
    for campaign_id, fired in by_campaign.items():
        document = campaigns[campaign_id].document
        if document.delivery_type is DeliveryType.LOCATION_TRIGGERED:
            users.update(event.customer_id for event in fired)
            continue
        counted = counted_actions(document.trigger_condition)
        users.update(event.customer_id for event in fired if event.action in counted)
    return users


async def hold_users(session: AsyncSession, workspace_id: str, customers: set[str]) -> None:
    """Take the firing lock of each of `customers` until the transaction ends (PostgreSQL: a
    transaction-scoped advisory lock per bucket of users, taken in one order so two batches never
    wait for each other in a cycle): the firings of a user whose events' order matters are written
    one transaction at a time. Two workers firing the same user's events at once each saw the
    firings and the inbox as committed before them only. A location update: both fired over a send
    limit of one, and an exit read while the entry's dwell firing was not yet committed cancelled
    nothing (`engine.location`). A counted action: an event stored late, earlier in time than one
    another worker was judging, found that one still in the inbox (to be judged with it counted, it
    seemed) while the other judged it without (`_in_time_order`). A lock stands for a bucket of
    users (`FIRING_BUCKETS` per workspace): a batch takes at most that many, where one per user (up
    to `INBOX_BATCH`) could exhaust PostgreSQL's lock table with a few workers. SQLite needs none: a
    writing transaction there already holds the only write lock."""
    if not customers or session_dialect(session) != "postgresql":
        return
    buckets = {lock_key("firings", workspace_id, customer_id) % FIRING_BUCKETS for customer_id in customers}
    keys = sorted(lock_key("firings", workspace_id, "bucket", str(bucket)) for bucket in buckets)
    await session.execute(_LOCK_USERS, {"keys": keys})


FIRING_BUCKETS = 512  # advisory locks per workspace at most, taken by a firing batch (`hold_users`)
# Locks in the array's order (unnest yields its elements in order, each locked as it is read).
_LOCK_USERS = text("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(CAST(:keys AS bigint[])) AS k")


def _own_part(session: AsyncSession) -> contextlib.AbstractAsyncContextManager[Any]:
    """One campaign's statements of a firing batch, undone alone when they fail: on PostgreSQL a
    failed statement aborts the whole transaction, so without a savepoint the other campaigns'
    statements failed after it, and so did the batch, at every tick. (SQLite goes on after a failed
    statement.)"""
    if session_dialect(session) == "postgresql":
        return session.begin_nested()
    return contextlib.nullcontext()


async def _fire_campaign(
    session: AsyncSession,
    firings: FiringWrites,
    campaign: LiveCampaign,
    execution: Execution,
    events: list[Fired],
    now: datetime,
) -> None:
    trigger = campaign.document.trigger_condition
    included = trigger.included_filters if trigger is not None else None
    if trigger is None or included is None:
        return
    timely = [e for e in events if not stale(campaign, e, now)]
    matched = await firing_events(session, campaign, trigger, included, timely, now) if timely else []
    counts = counted_actions(trigger)
    counted = [e for e in events if e.action in counts]
    if counted:
        matched = await _in_time_order(session, campaign, trigger, included, execution, counted, matched, now)
    if not matched:
        return
    timezones: dict[str, str | None] = {}
    default_zone = "UTC"
    if trigger.trigger_delay_type is TriggerDelayType.INTELLIGENT_DELAY:
        # Only a best hour needs the users' timezones (the other delays are instants). Only the
        # timezones: loaded as ORM entities, the users cost more than the rest of firing.
        ids = list({e.customer_id for e in matched})
        found = await session.execute(_TIMEZONES, {"workspace_id": campaign.workspace_id, "ids": ids})
        timezones = {row.customer_id: row.timezone for row in found}
        default_zone = await _default_zone(session, campaign.workspace_id)
    hours = await _best_hours(session, campaign, trigger, timezones, default_zone, now)
    held_out = await holdout(session, campaign)
    rows: list[dict[str, Any]] = []
    for event in matched:
        tz = zone_named(timezones.get(event.customer_id), default_zone)
        due = due_at(
            trigger, event.occurred_at, event.attributes or {}, now, hours.get(event.customer_id), tz
        )
        rank = rank_of(campaign.campaign_id, event.customer_id)
        state: str
        reason: str | None
        if due is None:
            # No moment to send at (BEFORE an anchor missing or past): no message would ever go,
            # so nobody is held out of one. Held out first, a control user's firing opened an
            # attribution window at once, and the control side counted users, and conversions,
            # that the sent side can never have.
            state, reason = "SUPPRESSED", Dropped.TRIGGER_TIME
        else:
            state, reason = held_out(event.customer_id, rank) or ("PENDING", None)
        rows.append(
            firing_row(
                execution, event.customer_id, event.id, rank, state, reason, due, now, event.attributes
            )
        )
    firings.add(execution, rows, campaign)


async def _in_time_order(
    session: AsyncSession,
    campaign: LiveCampaign,
    trigger: TriggerCondition,
    included: FilterGroup,
    execution: Execution,
    counted: list[Fired],
    matched: list[Fired],
    now: datetime,
) -> list[Fired]:
    """The firings of a batch once the users' events already judged are seen in (time, id) order
    with the batch's events of counted actions (`counted`) among them: `matched` (the batch's
    events that fire, each judged as of itself), plus each later event whose verdict the batch's
    events turned (it holds now, did not without them, and has no firing), less those of them that
    stand in for a firing whose event no longer holds (`_standing_in`). An event stored late,
    earlier than events already judged, changes how many times the user had done the action as of
    each of them."""
    # Only events received since the campaign was published can have been judged for it.
    since = campaign.published_at or execution.created_at
    later = await later_events(session, campaign, trigger, included, counted, since, now)
    if not later:
        return matched
    found = await session.execute(
        _FIRINGS_OF,
        {
            "workspace_id": execution.workspace_id,
            "execution_id": execution.id,
            "customers": sorted({e.customer_id for e in later}),
            "ids": [e.id for e in later],
        },
    )
    fired = set(found.scalars())
    # Written, and no longer holding: sent (or on its way) for an event that no longer qualifies.
    superseded = [e for e in later if e.id in fired and not e.holds]
    turned: list[Fired] = []
    if any(e.holds and e.id not in fired for e in later):
        before = await later_events(
            session, campaign, trigger, included, counted, since, now, uncounting=True
        )
        held_before = {e.id for e in before if e.holds}
        turned = [
            Fired(e.id, e.customer_id, e.action, e.attributes, e.occurred_at)
            for e in later
            if e.holds and e.id not in fired and e.id not in held_before
        ]
        turned = [e for e in turned if not stale(campaign, e, now)]
        members = await in_audience(session, campaign, {e.customer_id for e in turned}, now)
        turned = [e for e in turned if e.customer_id in members]
    return _standing_in([*matched, *turned], superseded)


def _standing_in(firing: list[Fired], superseded: Sequence[Later]) -> list[Fired]:
    """`firing` less, for each user, as many of their events as they have superseded firings: a
    message already sent cannot be unsent, so it keeps its place, and the events nearest before it
    (in (time, id) order) that now qualify in its stead do not fire again. ("Exactly once", one
    purchase fired; a purchase stored late, earlier in time, is now the first: the campaign fired
    once for the user's first purchase, and does not fire twice.)"""
    if not superseded:
        return firing
    last: dict[str, tuple[datetime, str]] = {}
    count: dict[str, int] = defaultdict(int)
    for gone in superseded:
        moment = (gone.occurred_at, gone.id)
        last[gone.customer_id] = max(last.get(gone.customer_id, moment), moment)
        count[gone.customer_id] += 1
    dropped: set[str] = set()
    by_user: dict[str, list[Fired]] = defaultdict(list)
    for event in firing:
        if event.customer_id in last and (event.occurred_at, event.id) < last[event.customer_id]:
            by_user[event.customer_id].append(event)
    for customer_id, standing in by_user.items():
        standing.sort(key=lambda e: (e.occurred_at, e.id))
        dropped.update(e.id for e in standing[len(standing) - min(count[customer_id], len(standing)) :])
    return [e for e in firing if e.id not in dropped]


def stale(campaign: LiveCampaign, event: Fired, now: datetime) -> bool:
    """DEVICE_TRIGGERED: an event older than `expiry_time_of_sync_data_in_hour` (its time against
    now) is data the device would no longer act on; it does not fire."""
    controls = campaign.document.delivery_controls
    hours = getattr(controls, "expiry_time_of_sync_data_in_hour", None) if controls is not None else None
    if campaign.document.delivery_type is not DeliveryType.DEVICE_TRIGGERED or hours is None:
        return False
    return event.occurred_at < now - durations.hours(hours)


async def holdout(session: AsyncSession, campaign: LiveCampaign) -> Any:
    """A function (customer, rank) -> (HELD_OUT, reason) for a user of the global or the campaign's
    control group, else None."""
    global_share = await global_control_share(session, campaign)
    control = campaign.document.control_group_details
    percentage = (
        control.campaign_control_group_percentage
        if control is not None and control.is_campaign_control_group_enabled
        else None
    )

    def held_out(customer_id: str, rank: int) -> tuple[str, str] | None:
        if in_global_control(campaign.workspace_id, customer_id, global_share):
            return "HELD_OUT", "GLOBAL_CONTROL"
        if percentage and rank < float(percentage) / 100 * 2**RANK_BITS:
            return "HELD_OUT", "CONTROL_GROUP"
        return None

    return held_out


def firing_row(
    execution: Execution,
    customer_id: str,
    firing: str,
    rank: int,
    state: str,
    reason: str | None,
    due: datetime | None,
    now: datetime,
    attributes: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return {
        "workspace_id": execution.workspace_id,
        "execution_id": execution.id,
        "customer_id": customer_id,
        "firing": firing,
        "rank": rank,
        "state": state,
        "reason": reason,
        "not_before": due if due is not None and due > now else None,
        "event": dict(attributes or {}),
    }


class FiringWrites:
    """The firings of an inbox batch, every campaign's, written together once the batch is
    evaluated (`write`), in the transaction that deletes its inbox rows: one insert for all of them
    and an audience count per execution. (Written campaign by campaign, the writes were about half
    of firing's time on PostgreSQL: 6-7 ms a campaign for 70 firings.) A campaign's firings never
    read another's: each campaign has an execution of its own."""

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []
        self._added: dict[tuple[str, str], int] = {}
        # Control users' firings of campaigns with conversion goals, by execution, with the goals.
        self._held: list[tuple[Execution, ConversionGoalDetails, list[dict[str, Any]]]] = []

    def add(self, execution: Execution, rows: list[dict[str, Any]], campaign: LiveCampaign) -> None:
        if rows:
            self._rows += rows
            key = (execution.workspace_id, execution.id)
            self._added[key] = self._added.get(key, 0) + len(rows)
            goals = conversions.goals_of(campaign.components)
            held = [row for row in rows if row["state"] == "HELD_OUT"]
            if goals is not None and held:
                self._held.append((execution, goals, held))

    async def write(self, session: AsyncSession, now: datetime) -> int:
        """Write them; how many. A control user's firing opens its attribution window when its
        message would have gone (its delay's end, else now), as a sent firing's opens when sent: the
        control side of the campaign's uplift."""
        if not self._rows:
            return 0
        connection = await session.connection()
        await connection.execute(_INSERT_NEW[session_dialect(session)], self._rows)
        # Core statements on the session's connection: the ORM would first look for the execution
        # among every entity the session holds (the batch's events).
        # In one order (by execution): two workers adding to the same executions never wait on each
        # other's row locks in a cycle (a deadlock on PostgreSQL).
        for (workspace_id, execution_id), added in sorted(self._added.items()):
            values = {"row_workspace_id": workspace_id, "row_id": execution_id, "added": added, "now": now}
            await connection.execute(_ADD_AUDIENCE, values)
        openings: list[conversions.Opening] = []
        for execution, goals, held in self._held:
            by_moment: dict[datetime, list[tuple[str, str | None, str | None, str]]] = defaultdict(list)
            for row in held:
                moment = row["not_before"] or now
                by_moment[moment].append((row["customer_id"], None, row["reason"], row["firing"]))
            openings += [conversions.Opening(execution, goals, users, at) for at, users in by_moment.items()]
        # All at once, the batch's last wait (then only its own inbox rows are deleted): see
        # `conversions.open_windows`.
        await conversions.open_windows(connection, openings)
        return len(self._rows)


# Built once. The INSERT skips a firing already written (the primary key is (execution, user, event)).
_USERS = cast(Table, ExecutionUser.__table__)
_INSERT_NEW = {
    "postgresql": postgresql.insert(_USERS).on_conflict_do_nothing(),
    "sqlite": sqlite.insert(_USERS).on_conflict_do_nothing(),
}
_EXECUTIONS = cast(Table, Execution.__table__)
_ADD_AUDIENCE = (
    update(_EXECUTIONS)
    .where(
        _EXECUTIONS.c.workspace_id == bindparam("row_workspace_id"), _EXECUTIONS.c.id == bindparam("row_id")
    )
    .values(audience=_EXECUTIONS.c.audience + bindparam("added"), updated_at=bindparam("now"))
)


# Built once (each firing batch reads them).
_FIRINGS_OF = select(ExecutionUser.firing).where(
    ExecutionUser.workspace_id == bindparam("workspace_id"),
    ExecutionUser.execution_id == bindparam("execution_id"),
    one_of(ExecutionUser.customer_id, "customers"),
    one_of(ExecutionUser.firing, "ids"),
)
_TIMEZONES = select(User.customer_id, User.timezone).where(
    User.workspace_id == bindparam("workspace_id"), one_of(User.customer_id, "ids")
)


async def _default_zone(session: AsyncSession, workspace_id: str) -> str:
    return (await workspace_settings(session, workspace_id)).timezone


async def _best_hours(
    session: AsyncSession,
    campaign: LiveCampaign,
    trigger: TriggerCondition,
    timezones: dict[str, str | None],
    default_zone: str,
    now: datetime,
) -> dict[str, int | None]:
    """INTELLIGENT_DELAY: each user's best hour in their timezone (`timezones`, else the
    workspace's), the one SEND_IN_BTS sends at (`best_times`: learnt from their events, kept a
    day)."""
    if trigger.trigger_delay_type is not TriggerDelayType.INTELLIGENT_DELAY or not timezones:
        return {}
    zones = {customer_id: zone_named(name, default_zone) for customer_id, name in timezones.items()}
    return await best_times.hours(session, campaign.workspace_id, zones, now)
