"""Scheduled transitions: the background work that moves campaigns as time passes.

One tick looks, workspace by workspace, for latest versions whose time has come (the rules are
`lifecycle.due_steps`) and applies each step with a compare-and-set,
`UPDATE ... WHERE status = <expected>`. On PostgreSQL the due rows are also read with
`FOR UPDATE SKIP LOCKED`, so several workers split the work instead of queueing on it; the
compare-and-set makes sure that no transition is ever applied twice, whatever the interleaving.

After the transitions, the delivery engine (`delivery.engine`) advances the executions of the one-time
campaigns that are SENDING and the runs of the periodic campaigns that are ACTIVE; a one-time
campaign whose every user is settled is moved SENDING → SENT here, a periodic one whose schedule is
over ACTIVE → SENT, with the same compare-and-set.

`run_tick(database, now)` is one tick; `run_forever` repeats it (the `herald worker` command, and
`herald serve` in-process on a one-process SQLite deployment), at once when woken (`herald.wake`:
a publish, a status action or a resumed delivery committed), else every interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Coroutine, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Select, and_, bindparam, func, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald import planner_statistics
from herald.campaigns import repository
from herald.campaigns.lifecycle import Timing, due_steps
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.clock import Clock, utc
from herald.config import Settings, SettingsError
from herald.db import Database, UTCDateTime
from herald.delivery.engine.models import DEFERRED, ExecutionUser
from herald.delivery.engine.tick import run_event_lanes, run_executions
from herald.delivery.streaks import Streaks
from herald.ops import metrics
from herald.wake import due_at, heard, listening, named_first, named_for_events, next_noted, waiting
from herald.workspaces.models import Workspace

log = logging.getLogger("herald.worker")

_S = CampaignStatus
BATCH = 500  # due rows taken per workspace and tick; the rest wait for the next tick
# A due campaign a tick passed over (its row locked by a writer: SKIP LOCKED) is looked at again
# this much later, not at the next poll.
LOCKED_RETRY = timedelta(seconds=1)


@dataclass(frozen=True)
class Applied:
    """One transition a tick made."""

    workspace_id: str
    row_id: str
    before: CampaignStatus
    after: CampaignStatus


def _due(workspace_id: str | None, now: datetime) -> list[ColumnElement[bool]]:
    """What is due at `now`, in one workspace (or in all: the queue depth)."""
    return [
        *([Campaign.workspace_id == workspace_id] if workspace_id is not None else []),
        Campaign.is_latest.expression,
        # A periodic run's child campaign follows its run (`delivery.engine.periodic`), not the clock.
        Campaign.parent_id.is_(None),
        or_(
            and_(Campaign.status == _S.SCHEDULED.value, Campaign.begins_at <= now),
            and_(Campaign.status.in_([_S.ACTIVE.value, _S.PAUSED.value]), Campaign.expiry_at <= now),
            and_(Campaign.status == _S.ACTIVE.value, Campaign.delivery_type == DeliveryType.ONE_TIME.value),
            Campaign.status == _S.SENDING.value,
        ),
    ]


async def _step(
    session: AsyncSession,
    workspace_id: str,
    row_id: str,
    before: CampaignStatus,
    after: CampaignStatus,
    now: datetime,
) -> bool:
    values: dict[str, object] = {"status": after.value, "updated_at": now, "revision": Campaign.revision + 1}
    if after is _S.SENDING:
        values["sent_time"] = now
    if before is _S.PAUSED:
        values["paused_from"] = None
    result = await session.execute(
        update(Campaign)
        .where(
            Campaign.workspace_id == workspace_id,
            Campaign.id == row_id,
            Campaign.is_latest,
            Campaign.status == before.value,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if getattr(result, "rowcount", 0) != 1:
        return False
    await repository.align_earlier_versions(session, workspace_id, row_id, values)
    return True


async def _due_ids(database: Database, workspace_id: str, now: datetime) -> set[str]:
    # A plain read first: most workspaces have nothing due, and on SQLite a write transaction
    # would make the API's writers wait for nothing.
    async with database.reader() as session:
        query = select(Campaign.id).where(*_due(workspace_id, now)).order_by(Campaign.id).limit(BATCH)
        return set((await session.scalars(query)).all())


async def _tick_workspace(database: Database, workspace_id: str, now: datetime) -> list[Applied]:
    applied: list[Applied] = []
    due = await _due_ids(database, workspace_id, now)
    if not due:
        return applied
    async with database.writer() as session:
        query = (
            select(
                Campaign.id,
                Campaign.status,
                Campaign.delivery_type,
                Campaign.begins_at,
                Campaign.expiry_at,
                Campaign.sent_time,
            )
            .where(*_due(workspace_id, now))
            .order_by(Campaign.id)
            .limit(BATCH)
            .with_for_update(skip_locked=True)
        )
        rows = (await session.execute(query)).all()
        for row_id, status, delivery_type, begins_at, expiry_at, sent_time in rows:
            before = CampaignStatus(status)
            timing = Timing(delivery_type, before, begins_at, expiry_at, sent_time)
            for after in due_steps(timing, now):
                if not await _step(session, workspace_id, row_id, before, after, now):
                    break  # someone else moved it first; their transition stands
                applied.append(Applied(workspace_id, row_id, before, after))
                before = after
        await session.commit()
    if due - {row.id for row in rows}:
        # Passed over, locked by a writer (SKIP LOCKED): a publish's ASAP start waited the whole
        # poll (15 s) when a write held its row as the tick came, the publish's wake-up spent.
        due_at(now + LOCKED_RETRY)
    return applied


async def _finish(
    database: Database, workspace_id: str, campaign_ids: list[str], now: datetime
) -> list[Applied]:
    """→ SENT for campaigns the delivery engine is done with: a one-time campaign SENDING whose
    execution settled every user, a periodic one ACTIVE whose schedule is over."""
    applied: list[Applied] = []
    if not campaign_ids:
        return applied
    async with database.writer() as session:
        rows = (
            await session.execute(
                select(Campaign.id, Campaign.status).where(
                    Campaign.workspace_id == workspace_id,
                    Campaign.is_latest,
                    Campaign.campaign_id.in_(campaign_ids),
                    or_(
                        Campaign.status == _S.SENDING.value,
                        and_(
                            Campaign.status == _S.ACTIVE.value,
                            Campaign.delivery_type == DeliveryType.PERIODIC.value,
                        ),
                    ),
                )
            )
        ).all()
        for row_id, status in rows:
            before = CampaignStatus(status)
            if await _step(session, workspace_id, row_id, before, _S.SENT, now):
                applied.append(Applied(workspace_id, row_id, before, _S.SENT))
        await session.commit()
    return applied


async def _workspace_ids(database: Database) -> list[str]:
    async with database.reader() as session:
        return list((await session.scalars(select(Workspace.id).order_by(Workspace.id))).all())


async def due_count(database: Database, now: datetime) -> int:
    """Latest versions with a transition due at `now`, in every workspace (the queue's depth)."""
    async with database.reader() as session:
        return int(
            await session.scalar(select(func.count()).select_from(Campaign).where(*_due(None, now))) or 0
        )


async def tick(
    database: Database,
    now: datetime,
    workspace_ids: Iterable[str] | None = None,
    settings: Settings | None = None,
    stop: asyncio.Event | None = None,
    clock: Clock | None = None,
    streaks: Streaks | None = None,
) -> list[Applied]:
    """Apply every transition due at `now` (in the given workspaces, else in all) and advance the
    deliveries of sending campaigns; the transitions applied. `settings` (connector secrets and
    timeouts) default to the environment's. Once `stop` is set, the tick ends after the work in hand
    (one workspace's transitions, one transaction; a dispatch's window of users on the wire). `clock`:
    the time as it moves during the tick (a long send claims each batch at its own moment, and stops
    at its campaign's expiry), else `now`. `streaks`: the connectors' failed attempts in a row,
    kept by the worker across its ticks (else counted from zero: one tick's)."""
    ids = list(workspace_ids) if workspace_ids is not None else named_first(await _workspace_ids(database))
    settings = settings or Settings()
    applied: list[Applied] = []
    for workspace_id in ids:
        if stop is not None and stop.is_set():
            break
        # A workspace whose step fails (the database refusing a statement, a defect) is logged and
        # tried again at the next tick; the other workspaces' campaigns go on (tenant isolation).
        with metrics.contained_step(log, "workspace", workspace_id):
            # Logged as they are made, not at the tick's end: a send lasting minutes comes between.
            applied += _logged(await _tick_workspace(database, workspace_id, now))
            finished = await run_executions(database, settings, now, workspace_id, stop, clock, streaks)
            applied += _logged(await _finish(database, workspace_id, finished, now))
    return applied


def _logged(changes: list[Applied]) -> list[Applied]:
    for change in changes:
        log.info("campaign %s/%s: %s -> %s", change.workspace_id, change.row_id, change.before, change.after)
    metrics.TRANSITIONS.inc(len(changes))
    return changes


async def run_tick(
    database: Database,
    now: datetime,
    workspace_ids: Iterable[str] | None = None,
    settings: Settings | None = None,
    stop: asyncio.Event | None = None,
    clock: Clock | None = None,
    streaks: Streaks | None = None,
) -> int:
    """One tick; the number of transitions it applied."""
    return len(await tick(database, now, workspace_ids, settings, stop, clock, streaks))


# The earliest moment ahead at which a user waiting for one falls due (deferred to the end of quiet
# hours or of a minimum delay, a delayed firing, a retry): the first row of an index (migration
# 0031). Read-only, on every workspace.
_NEXT_DEFERRED = select(func.min(ExecutionUser.not_before)).where(
    text(DEFERRED),  # word for word: the partial index of these rows
    ExecutionUser.not_before > bindparam("now", type_=UTCDateTime),
)
# Never sooner than this after a tick: a moment a hair ahead (or a clock file set just before one)
# costs a tick per this much, not a busy loop.
_SOONEST = 0.05


# The earliest start ahead of a SCHEDULED campaign: one probe of each workspace's index by status
# and start. (A global index by status and start was tried: PostgreSQL's planner then used it for
# one workspace's searches, reading every workspace's campaigns of a status.)
_FIRST_START = (
    select(Campaign.begins_at)
    .where(
        Campaign.workspace_id == Workspace.id,
        Campaign.status == _S.SCHEDULED.value,
        Campaign.begins_at > bindparam("now", type_=UTCDateTime),
        Campaign.is_latest.expression,
        Campaign.parent_id.is_(None),
    )
    .order_by(Campaign.begins_at)
    .limit(1)
    .correlate(Workspace)
    .scalar_subquery()
)
_NEXT_START = select(func.min(_FIRST_START)).select_from(Workspace)


async def _first(database: Database, query: Select[tuple[datetime | None]], now: datetime) -> datetime | None:
    async with database.reader() as session:
        found = await session.scalar(query, {"now": now})
    return utc(found) if found is not None else None


async def next_due(database: Database, now: datetime) -> datetime | None:
    """The earliest moment after `now` at which a user waiting for one falls due or a SCHEDULED
    campaign begins, if any. Periodic occurrences and expiries are not among them: the poll finds
    those."""
    return _earliest(await _first(database, _NEXT_DEFERRED, now), await _first(database, _NEXT_START, now))


def _earliest(*moments: datetime | None) -> datetime | None:
    return min((moment for moment in moments if moment is not None), default=None)


class _NextDue:
    """`next_due` for a worker's loop: the next scheduled start (a probe per workspace) read again
    only after a wake-up (a publish wakes the workers), once its moment has come, or once an
    `interval`; the next deferred user (one row of an index) at every call; and the next run of a
    periodic campaign, which its ticks note (`wake.due_at`: computed from the schedule, in no
    table)."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._heard: int | None = None
        self._read_at = -math.inf
        self._start: datetime | None = None

    async def __call__(self, database: Database, now: datetime) -> datetime | None:
        stale = heard() != self._heard or time.monotonic() - self._read_at >= self._interval
        if stale or (self._start is not None and self._start <= now):
            self._heard, self._read_at = heard(), time.monotonic()
            self._start = await _first(database, _NEXT_START, now)
        return _earliest(await _first(database, _NEXT_DEFERRED, now), self._start, next_noted(now))


def _sleep_for(interval: float, now: datetime, due: datetime | None, moved: bool) -> float:
    """Seconds to sleep after a tick at `now`: until `due`, at most `interval`. A clock that did not
    move since the tick before (`moved`: a clock file held still, in a sandbox or a test) sleeps the
    interval: its moments never come by waiting."""
    if due is None or not moved:
        return interval
    return min(interval, max(_SOONEST, (due - now).total_seconds()))


async def run_forever(
    database: Database,
    clock: Clock,
    interval: float,
    stop: asyncio.Event | None = None,
    settings: Settings | None = None,
) -> None:
    """Tick now, then whenever woken and at least every `interval` seconds, until `stop` is set. A
    failed tick is logged and the next one retries. Setting `stop` (SIGTERM) ends the loop after the
    batch in hand: a batch is one transaction, never cut short. The connectors' failed attempts in
    a row are counted across the ticks (`streaks.Streaks`): the error threshold holds for
    failures that come a few per tick."""
    stop = stop or asyncio.Event()
    settings = settings or Settings()
    streaks = Streaks()
    wake = asyncio.Event()
    last: datetime | None = None  # the clock at the tick before
    due_next = _NextDue(interval)
    idle = asyncio.Event()  # set between ticks, for the event lane
    idle.set()
    async with (
        listening(settings.database_url, wake) as listener,
        _beside(_event_lane(database, clock, interval, stop, settings, streaks, idle), stop),
    ):
        while not stop.is_set():
            wake.clear()  # a wake-up during the tick below makes the next one start at once
            if listener is not None:
                # Before the tick too: a worker started beside a large send (a rolling upgrade)
                # joins it for its first tick, and heard no wake-up until that send ended (its
                # event lane idle: events 3 minutes late).
                await listener.ensure()
            now = _now_or_none(clock)
            if now is None:  # no tick until the clock file holds a time again
                await _sleep(stop, wake, min(interval, CLOCK_RETRY_SECONDS))
                continue
            due: datetime | None = None
            idle.clear()
            try:
                await run_tick(database, now, None, settings, stop, clock, streaks)
                idle.set()
                await planner_statistics.refresh(database)
                # Until the next moment known work falls due, at most the interval: a delayed
                # firing goes out at its moment, not at the next poll. (Not read when woken during
                # the tick: the next one starts at once.) Counted from the tick's start: work that
                # fell due while the tick ran (a retry, once its campaign's dispatch was over) is
                # due now, and the next tick starts at once; from the tick's end it was not seen,
                # and waited for the interval. (Once only: the next tick starts after it.)
                if not wake.is_set():
                    due = await due_next(database, now)
            except Exception:  # e.g. the database restarting, or a deadlock victim: the loop must live on
                log.exception("scheduled-transitions tick failed")
            idle.set()
            if listener is not None:
                await listener.ensure()
            moved, last = last is None or now != last, now
            after = _now_or_none(clock) or now
            await _sleep(stop, wake, _sleep_for(interval, after, due, moved))


@contextlib.asynccontextmanager
async def _beside(work: Coroutine[None, None, None], stop: asyncio.Event) -> AsyncIterator[None]:
    """`work` runs as a task while the block runs; once `stop` is set it is let finish its batch,
    else (the block failed, or was cancelled) it is cancelled."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        if not stop.is_set():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _event_lane(
    database: Database,
    clock: Clock,
    interval: float,
    stop: asyncio.Event,
    settings: Settings,
    streaks: Streaks,
    idle: asyncio.Event,
) -> None:
    """The worker's event lane: woken with its loop (an event stored, in any process), it sends
    the event-triggered messages of the workspaces named since (`tick.run_event_lanes`) when the
    worker's tick is still under way a turn (`delivery_turn_seconds`) later. A dispatch gives way
    to such work only once the windows it has handed over are answered, which at a slow receiver
    takes seconds; the lane keeps a message due within a second of its event from waiting behind
    them. A tick that ends sooner takes the events itself, as it always has (the lane stays idle,
    costing nothing, on a worker whose ticks are short)."""
    woken = asyncio.Event()
    async with waiting(woken):
        while not stop.is_set():
            await _sleep(stop, woken, interval)
            if not woken.is_set():
                continue
            woken.clear()
            named = named_for_events()
            if not named or idle.is_set():
                continue  # the tick to come takes them
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(idle.wait(), settings.delivery_turn_seconds)
            for workspace_id in sorted(named):
                with metrics.contained_step(log, "workspace", workspace_id):
                    # Another batch of its events while they keep coming and the tick is held.
                    while not idle.is_set() and not stop.is_set():
                        if not await run_event_lanes(database, settings, workspace_id, clock, stop, streaks):
                            break


# How soon a worker whose clock file could not be read tries again (at most its interval).
CLOCK_RETRY_SECONDS = 1.0


def _now_or_none(clock: Clock) -> datetime | None:
    """The clock's time; None, logged, when its file (`HERALD_CLOCK_FILE`) does not hold one for
    now: rewritten in place (`echo $t > file` empties it first) or garbled. The API answers 503 in
    that moment, and the worker waits for it to hold a time again instead of exiting."""
    try:
        return clock.now()
    except SettingsError as exc:
        log.warning("%s; the next tick waits for it", exc)
        return None


async def _sleep(stop: asyncio.Event, wake: asyncio.Event, interval: float) -> None:
    """Until `stop` or `wake` is set, or `interval` seconds have passed."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waits, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*waits, return_exceptions=True)
