"""Delivery controls: what happens to each user of a claimed batch before anything is sent.

In order, for a user not yet decided: campaign control group (held out), gone since resolution or
opted out of the channel since (suppressed; a push user with a token for none of the campaign's
platforms is suppressed when its messages are built: `run.NO_TOKEN`), the user's own send time (SEND_IN_USER_TIMEZONE,
SEND_IN_BTS: deferred until then, or suppressed, `send_time.py`), frequency caps (suppressed), the campaign's minimum
delay and the workspace's quiet hours (deferred: the user stays PENDING until `not_before`; suppressed
if that is past the campaign's `expiry_time`), the audience limit (suppressed once reached), and
the throttle (the users beyond the last 60 seconds' budget stay PENDING for a later tick). The global
control group is decided earlier, when the audience is resolved (`resolve.py`), so the campaign
control group is a share of the users left.

The time rules are pure functions (`quiet_until`, `over_cap`, `delay_until`);
`decide` feeds them the user's recent messages, read from the outbox, and those being sent.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Row, bindparam, func, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.advisory_locks import lock_key
from herald.audience.models import UserValues
from herald.audience.segmentation.audience import OPT_OUT_COLUMN
from herald.campaigns import durations
from herald.campaigns.lifecycle import instant
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.audience_limit import AudienceLimitFrequency
from herald.campaigns.schemas.common import DeliveryType
from herald.clock import utc
from herald.db import UTCDateTime
from herald.delivery.engine import best_times, send_time
from herald.delivery.engine.content import SendPlan
from herald.delivery.engine.models import OF_ITS_EXECUTION, Execution, ExecutionUser
from herald.delivery.engine.resolve import (
    LiveCampaign,
    segmentation_of,
    takes_part_in_global_control,
    workspace_settings,
)
from herald.delivery.engine.split import in_global_control
from herald.delivery.engine.throttle import ThrottleStore
from herald.delivery.models import OutboxEntry
from herald.timezones import zone_named
from herald.workspaces.delivery_settings import DeliverySettings

log = logging.getLogger("herald.delivery.engine")

DAY = timedelta(days=1)
WEEK = timedelta(days=7)


class Reason:
    CONTROL_GROUP = "CONTROL_GROUP"
    GLOBAL_CONTROL = "GLOBAL_CONTROL"
    NO_USER = "NO_USER"
    FREQUENCY_CAP = "FREQUENCY_CAP"
    MINIMUM_DELAY = "MINIMUM_DELAY"
    DND = "DND"
    AUDIENCE_LIMIT = "AUDIENCE_LIMIT"
    EXPIRED = "EXPIRED"  # the user's own send time is after the campaign's expiry_time
    # Since the audience was resolved (or the event read): opted out of the channel, or no address
    # left on it. Counted with those the resolution left out for the same reason.
    OPTED_OUT = "OPTED_OUT"
    NO_ADDRESS = "NO_ADDRESS"


# The settings whose change moves the end of users' quiet windows.
QUIET_HOURS_SETTINGS = frozenset({"dnd", "timezone"})


async def release_quiet_hours_deferrals(session: AsyncSession, workspace_id: str) -> int:
    """Users deferred to the end of the workspace's quiet window, claimable again: its window (or
    default timezone) just changed, so the end they wait for is the old one's. Each is decided again
    at its next claim, under the window in force then (deferred again if still inside it). How many."""
    result = await session.execute(
        update(ExecutionUser)
        .where(
            ExecutionUser.workspace_id == workspace_id,
            ExecutionUser.state == "PENDING",
            ExecutionUser.reason == Reason.DND,
            ExecutionUser.not_before.is_not(None),
        )
        .values(not_before=None)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


# --- pure rules ------------------------------------------------------------------------------


def quiet_until(now: datetime, window: tuple[time, time] | None, tz: ZoneInfo) -> datetime | None:
    """The end of the quiet window (UTC) if `now` is inside it in `tz`, else None. The window
    [start, end) may cross midnight (22:00-08:00)."""
    if window is None:
        return None
    start, end = window
    local = now.astimezone(tz)
    clock = local.time().replace(tzinfo=None)
    if start < end:
        inside = start <= clock < end
        end_day = local.date()
    else:
        inside = clock >= start or clock < end
        end_day = local.date() + timedelta(days=1) if clock >= start else local.date()
    if not inside:
        return None
    return datetime.combine(end_day, end, tzinfo=tz).astimezone(UTC)


def over_cap(sent_at: Iterable[datetime], now: datetime, per_day: int | None, per_week: int | None) -> bool:
    """Whether one more send would exceed a cap: `sent_at` are the user's sends of capping
    campaigns; the windows are the last 24 hours and the last 7 days."""
    times = list(sent_at)
    if per_day is not None and sum(1 for t in times if t > now - DAY) >= per_day:
        return True
    return per_week is not None and sum(1 for t in times if t > now - WEEK) >= per_week


def delay_until(last_sent: datetime | None, now: datetime, delay: timedelta | None) -> datetime | None:
    """When the user may get this campaign's next message, if that is later than `now`."""
    if delay is None or last_sent is None or last_sent + delay <= now:
        return None
    return last_sent + delay


# --- the rules of one campaign, read once per tick --------------------------------------------


@dataclass(frozen=True)
class AudienceLimit:
    limit: int
    total: bool  # TOTAL: over every execution of the campaign; INSTANCE: this execution only


@dataclass(frozen=True)
class Rules:
    settings: DeliverySettings
    store: ThrottleStore
    throttle_rpm: int | None = None
    capped: bool = False  # frequency caps apply to this campaign
    bypass_dnd: bool = False
    min_delay: timedelta | None = None
    expiry: datetime | None = None
    audience_limit: AudienceLimit | None = None
    # Triggered campaigns: a message is about something that just happened, so quiet hours and the
    # minimum delays drop it instead of deferring it; DND holds it only with queuing, for at most
    # `dnd_queue`.
    triggered: bool = False
    dnd_queue: timedelta | None = None
    # The workspace's minimum delay between two event-triggered messages to a user.
    global_min_delay: timedelta | None = None
    # The user column whose truth keeps a user out (the channel's opt-out), unless the campaign is
    # sent to opted-out users. Checked again at the send: a user who opts out while a delayed
    # firing waits, or while a long send comes to it, gets nothing.
    opt_out: str | None = None
    # The workspace's global control share when the claim decides it (a campaign whose users each
    # have a send time of their own: `decide`); None when the audience's resolution held them out.
    global_control: float | None = None


async def load(
    session: AsyncSession, campaign: LiveCampaign, store: ThrottleStore, trigger: str | None = None
) -> Rules:
    rules = await _load(session, campaign, store)
    if send_time.per_user(campaign.document.scheduling_details):
        # From the settings just read: reading the workspace again was a second read per claim.
        rules = replace(
            rules,
            global_control=rules.settings.global_control if takes_part_in_global_control(campaign) else None,
        )
    if trigger is None:
        return rules
    controls = campaign.document.delivery_controls
    queue = None
    if controls is not None and getattr(controls, "queuing_enabled", None):
        hours = getattr(controls, "queue_duration", None)
        queue = durations.hours(hours) if isinstance(hours, int) and hours > 0 else None
    global_delay = None
    ignore = bool(getattr(controls, "ignore_global_minimum_delay", False)) if controls is not None else False
    # The workspace's minimum delay is between messages of event-triggered campaigns only.
    event_triggered = campaign.document.delivery_type is DeliveryType.EVENT_TRIGGERED
    if trigger == "EVENT" and event_triggered and rules.settings.min_delay_hours and not ignore:
        global_delay = durations.hours(rules.settings.min_delay_hours)
    return replace(rules, triggered=True, dnd_queue=queue, global_min_delay=global_delay)


async def _load(session: AsyncSession, campaign: LiveCampaign, store: ThrottleStore) -> Rules:
    document = campaign.document
    settings = await workspace_settings(session, campaign.workspace_id)
    controls = document.delivery_controls
    limit = document.campaign_audience_limit
    audience_limit = None
    if limit is not None and limit.is_campaign_audience_limit_enabled and limit.limit is not None:
        audience_limit = AudienceLimit(int(limit.limit), limit.frequency != AudienceLimitFrequency.INSTANCE)
    scheduling = document.scheduling_details
    # Read as the campaign's row reads it: a time without zone is in the component's timezone.
    expiry = instant(scheduling.expiry_time, scheduling.timezone) if scheduling else None
    has_caps = settings.cap_day is not None or settings.cap_week is not None
    opt_out = _opt_out_column(campaign)
    if controls is None:
        return Rules(
            settings, store, capped=has_caps, expiry=expiry, audience_limit=audience_limit, opt_out=opt_out
        )
    delay: float | None = controls.minimum_delay_between_two_notification_in_hour
    # DEVICE_TRIGGERED: at most one message of the campaign per user within this many hours, which
    # is a minimum delay between two of its messages (the longer of the two applies).
    show = getattr(controls, "max_time_to_show_message_of_same_camapign", None)
    if show is not None and float(show) > 0:
        delay = max(delay or 0, float(show))
    return Rules(
        settings,
        store,
        throttle_rpm=controls.campaign_throttle_rpm,
        capped=has_caps and not controls.ignore_frequency_capping,
        bypass_dnd=bool(controls.bypass_dnd),
        min_delay=durations.hours(delay) if delay else None,
        expiry=expiry,
        audience_limit=audience_limit,
        opt_out=opt_out,
    )


def _opt_out_column(campaign: LiveCampaign) -> str | None:
    """`Rules.opt_out` of the campaign, as its audience's resolution reads it (`segmentation_of`)."""
    details = segmentation_of(campaign, with_opted_out=False)
    if details.get("send_campaign_to_opt_out_users") is True:
        return None
    return OPT_OUT_COLUMN.get(str(campaign.channel))


# --- one batch --------------------------------------------------------------------------------


def reads_history(rules: Rules) -> bool:
    """Whether deciding a user depends on the user's other messages (caps, minimum delays)."""
    return rules.capped or rules.min_delay is not None or rules.global_min_delay is not None


async def history_turn(session: AsyncSession, workspace_id: str) -> None:
    """Wait for the workspace's turn to decide on its users' history, and hold it until the
    caller's claim transaction ends (PostgreSQL: a transaction-scoped advisory lock; SQLite has one
    writer already). A claim reads the users' messages sent and those claimed (`_history`) and
    then commits its own users CLAIMED: two claims of different campaigns side by side (two
    workers) each missed the other's uncommitted users, and both sent to a user at the cap. Taken
    before the claim locks its execution, so claims that lock several executions
    (`run.dispatch_lanes`) never wait for it while holding one another needs. Claims of one
    execution queue on its row anyway: only claims of different campaigns wait here, each a
    short transaction; the sends themselves run outside it."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(select(func.pg_advisory_xact_lock(lock_key("delivery-history", workspace_id))))


@dataclass
class Decision:
    held: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    suppressed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # Each deferred user's due moment and why (DND, MINIMUM_DELAY; None: its own send time).
    deferred: dict[str, tuple[datetime, str | None]] = field(default_factory=dict)
    send: list[tuple[str, UserValues]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # left PENDING: throttle, in-flight limit

    def deferred_by_time(self) -> dict[tuple[datetime, str | None], list[str]]:
        """Deferred users grouped by when they are due and why (one update per group: a
        timezone's users share the end of their quiet window)."""
        grouped: dict[tuple[datetime, str | None], list[str]] = defaultdict(list)
        for customer_id, due in self.deferred.items():
            grouped[due].append(customer_id)
        return grouped

    @property
    def progressed(self) -> bool:
        return bool(self.held or self.suppressed or self.deferred or self.send)


# The longest a campaign message is taken to wait between its row made and sent: its retries (by
# default 30 s, doubled per attempt, at most an hour each) with room to spare. (One whose execution
# was paused for longer, then resumed, is older: it no longer counts toward a cap.)
_MADE_BEFORE_SENT = timedelta(days=2)


async def _history(
    session: AsyncSession, workspace_id: str, ids: Sequence[str], since: datetime, now: datetime
) -> list[tuple[str, str | None, datetime]]:
    """(customer, campaign, at) of the users' live messages sent since `since`, and of those being
    sent: claimed by an execution (this claim's transaction included: an earlier campaign of the
    same round of triggered campaigns) and not yet settled, or waiting to be attempted again. Not in
    the outbox as SENT yet, those count as sent when claimed: without them, one event that fired
    several campaigns sent each of them past the workspace's minimum delay.

    Both in one statement, one snapshot: a window of another campaign settled between two reads
    (its outbox rows SENT and its users SENT in one commit) was in neither, the rows read while
    PENDING and the users after they left CLAIMED, and its users went past the cap."""
    # When each was sent (settled SENT), not made: a message sent after hours of retries counts
    # from then. Its row was made at most `_MADE_BEFORE_SENT` earlier, which bounds the read on
    # the index of a user's rows by their moment made. None sent after `now` counts: a sandbox's
    # clock moved back has them in its future.
    at_now = bindparam("now", now, type_=UTCDateTime)
    sent = select(
        OutboxEntry.customer_id.label("customer_id"),
        OutboxEntry.campaign_id.label("campaign_id"),
        OutboxEntry.updated_at.label("at"),
    ).where(
        OutboxEntry.workspace_id == workspace_id,
        OutboxEntry.customer_id.in_(ids),
        OutboxEntry.created_at > since - _MADE_BEFORE_SENT,
        OutboxEntry.updated_at > since,
        OutboxEntry.updated_at <= at_now,
        OutboxEntry.is_test.is_(False),
        OutboxEntry.status == "SENT",
    )
    being_sent = (
        select(
            ExecutionUser.customer_id,
            Execution.campaign_id,
            func.coalesce(ExecutionUser.claimed_at, at_now),
        )
        .join(Execution, OF_ITS_EXECUTION)
        .where(
            ExecutionUser.workspace_id == workspace_id,
            ExecutionUser.state.in_(["CLAIMED", "RETRY"]),
            ExecutionUser.customer_id.in_(ids),
        )
    )
    rows: Sequence[Row[tuple[str, str | None, datetime]]] = (
        await session.execute(union_all(sent, being_sent))
    ).all()
    return [(str(c), campaign, utc(at)) for c, campaign, at in rows]


async def _past_campaigns(
    session: AsyncSession, workspace_id: str, ids: set[str]
) -> tuple[set[str], set[str]]:
    """Of the campaigns `ids` (of a user's past messages): those whose latest version counts toward
    the frequency caps, and those that are event-triggered (the workspace's minimum delay is
    between their messages only)."""
    if not ids:
        return set(), set()
    rows = await session.execute(
        select(Campaign.campaign_id, Campaign.delivery_type, Campaign.components).where(
            Campaign.workspace_id == workspace_id, Campaign.is_latest, Campaign.campaign_id.in_(ids)
        )
    )
    capping: set[str] = set()
    event_triggered: set[str] = set()
    for campaign_id, delivery_type, components in rows.all():
        controls = (components or {}).get("delivery_controls")
        if isinstance(controls, dict) and controls.get("count_for_frequency_capping") is True:
            capping.add(campaign_id)
        if delivery_type == DeliveryType.EVENT_TRIGGERED.value:
            event_triggered.add(campaign_id)
    return capping, event_triggered


async def _limit_used(session: AsyncSession, execution: Execution, limit: AudienceLimit) -> tuple[int, int]:
    """(users SENT, users in flight: CLAIMED or waiting to be retried) counted against the audience
    limit; failed users do not use it."""
    query = select(ExecutionUser.state, func.count()).where(
        ExecutionUser.workspace_id == execution.workspace_id,
        ExecutionUser.state.in_(["SENT", "CLAIMED", "RETRY"]),
    )
    if limit.total:
        runs = select(Execution.id).where(
            Execution.workspace_id == execution.workspace_id,
            Execution.campaign_id == execution.campaign_id,
        )
        query = query.where(ExecutionUser.execution_id.in_(runs))
    else:
        query = query.where(ExecutionUser.execution_id == execution.id)
    counts = dict((await session.execute(query.group_by(ExecutionUser.state))).tuples().all())
    return int(counts.get("SENT", 0)), int(counts.get("CLAIMED", 0)) + int(counts.get("RETRY", 0))


async def decide(
    session: AsyncSession,
    rules: Rules,
    plan: SendPlan,
    execution: Execution,
    rows: Sequence[tuple[str, int, UserValues | None]],
    now: datetime,
) -> Decision:
    """The fate of each (customer id, rank, user) of a freshly claimed batch."""
    decision = Decision()
    candidates: list[tuple[str, UserValues]] = []
    # Control users who wait for their own send time: held out when it comes (the moment their
    # message would have gone, when their conversions start to count, as the sent users' do), or
    # suppressed as a sent user would be if it never comes (the two groups stay comparable).
    control: dict[str, str] = {}
    timed = send_time.per_user(plan.campaign.document.scheduling_details)
    for customer_id, rank, user in rows:
        held = _control_group(rules, execution, customer_id, rank)
        if held is not None and user is not None and timed:
            control[customer_id] = held
            candidates.append((customer_id, user))
        elif held is not None:
            decision.held[held].append(customer_id)
        elif user is None:
            decision.suppressed[Reason.NO_USER].append(customer_id)
        elif rules.opt_out is not None and getattr(user, rules.opt_out, False):
            decision.suppressed[Reason.OPTED_OUT].append(customer_id)
        else:
            candidates.append((customer_id, user))
    candidates = await _send_time(session, rules, plan, execution, candidates, now, decision)
    for customer_id, _ in candidates:
        if customer_id in control:
            decision.held[control[customer_id]].append(customer_id)
    candidates = [candidate for candidate in candidates if candidate[0] not in control]
    candidates = await _timing(session, rules, execution, candidates, now, decision)
    if rules.audience_limit is not None and candidates:
        sent, in_flight = await _limit_used(session, execution, rules.audience_limit)
        room = max(0, rules.audience_limit.limit - sent - in_flight)
        over = candidates[room:]
        candidates = candidates[:room]
        # The limit counts messages SENT: while users in flight (this batch's or another worker's)
        # may still fail and free room, the rest wait; they are refused once the limit is reached.
        full = sent >= rules.audience_limit.limit
        (decision.suppressed[Reason.AUDIENCE_LIMIT] if full else decision.waiting).extend(c for c, _ in over)
    if rules.throttle_rpm is not None and candidates:
        granted = await rules.store.take(
            session, execution.workspace_id, execution.campaign_id, now, len(candidates), rules.throttle_rpm
        )
        decision.waiting.extend(c for c, _ in candidates[granted:])
        candidates = candidates[:granted]
    decision.send = candidates
    return decision


def _control_group(rules: Rules, execution: Execution, customer_id: str, rank: int) -> str | None:
    """The control group that holds the user out, if any (the global one first, as the audience's
    resolution decides it when the claim does not: `Rules.global_control`)."""
    if rules.global_control and in_global_control(execution.workspace_id, customer_id, rules.global_control):
        return Reason.GLOBAL_CONTROL
    if execution.control_threshold is not None and rank <= execution.control_threshold:
        return Reason.CONTROL_GROUP
    return None


async def _timing(
    session: AsyncSession,
    rules: Rules,
    execution: Execution,
    candidates: list[tuple[str, UserValues]],
    now: datetime,
    decision: Decision,
) -> list[tuple[str, UserValues]]:
    """Frequency caps, minimum delay and quiet hours; the candidates still to send now."""
    settings = rules.settings
    window = None if rules.bypass_dnd else settings.dnd
    if not candidates or not (rules.capped or rules.min_delay or window or rules.global_min_delay):
        return candidates
    history: dict[str, list[tuple[str | None, datetime]]] = defaultdict(list)
    capping: set[str] = set()
    event_triggered: set[str] = set()
    if reads_history(rules):
        since = now - max(
            WEEK if rules.capped else timedelta(0),
            rules.min_delay or timedelta(0),
            rules.global_min_delay or timedelta(0),
        )
        ids = [c for c, _ in candidates]
        found = await _history(session, execution.workspace_id, ids, since, now)
        for customer_id, campaign_id, at in found:
            history[customer_id].append((campaign_id, at))
        if rules.capped or rules.global_min_delay:
            earlier = {c for _, c, _ in found if c}
            capping, event_triggered = await _past_campaigns(session, execution.workspace_id, earlier)
    left: list[tuple[str, UserValues]] = []
    for customer_id, user in candidates:
        past = history.get(customer_id, [])
        # Sends, not messages: a campaign's messages to one user's devices went out in one window
        # (one moment), and a send being made counts once too (`_history`: one per user).
        sends = {(campaign, at) for campaign, at in past if campaign in capping}
        if rules.capped and over_cap((at for _, at in sends), now, settings.cap_day, settings.cap_week):
            decision.suppressed[Reason.FREQUENCY_CAP].append(customer_id)
            continue
        mine = [at for campaign, at in past if campaign == execution.campaign_id]
        due, reason = delay_until(max(mine, default=None), now, rules.min_delay), Reason.MINIMUM_DELAY
        if due is None and rules.global_min_delay is not None:
            last = max((at for campaign, at in past if campaign in event_triggered), default=None)
            due = delay_until(last, now, rules.global_min_delay)
        if due is None:
            due, reason = quiet_until(now, window, zone_named(user.timezone, settings.timezone)), Reason.DND
        if due is None:
            left.append((customer_id, user))
        elif rules.triggered and not (
            reason == Reason.DND and rules.dnd_queue and due - now <= rules.dnd_queue
        ):
            decision.suppressed[reason].append(customer_id)  # too late to be about the event
        elif rules.expiry is not None and due >= rules.expiry:
            decision.suppressed[reason].append(customer_id)  # the campaign ends before the user may get it
        else:
            decision.deferred[customer_id] = (due, reason)
    return left


async def _send_time(
    session: AsyncSession,
    rules: Rules,
    plan: SendPlan,
    execution: Execution,
    candidates: list[tuple[str, UserValues]],
    now: datetime,
    decision: Decision,
) -> list[tuple[str, UserValues]]:
    """Users whose own send time (`send_time.py`) is later wait for it; users it skips are
    suppressed; the rest go on."""
    campaign = plan.campaign
    # A business event's run is for the moment it was raised (it has no schedule of its own): the
    # campaign's per-user send time counts from there, as a one-time run's counts from its start.
    start = execution.created_at if execution.trigger == "BUSINESS" else execution.scheduled_for
    rule = send_time.rule_of(campaign.document.scheduling_details, start, campaign.published_at)
    if rule is None or not candidates:
        return candidates
    zones = {
        customer_id: zone_named(user.timezone, rules.settings.timezone) for customer_id, user in candidates
    }
    hours: dict[str, int | None] = {}
    if rule.mode is send_time.BTS:
        hours = await best_times.hours(session, execution.workspace_id, zones, now)
    left: list[tuple[str, UserValues]] = []
    for customer_id, user in candidates:
        moment = send_time.moment_for(rule, zones[customer_id], hours.get(customer_id))
        if moment.skipped is not None:
            decision.suppressed[moment.skipped].append(customer_id)
        elif moment.at is None or moment.at <= now:
            left.append((customer_id, user))
        elif rules.expiry is not None and moment.at >= rules.expiry:
            decision.suppressed[Reason.EXPIRED].append(customer_id)  # the campaign ends before it
        else:
            decision.deferred[customer_id] = (moment.at, None)
    return left
