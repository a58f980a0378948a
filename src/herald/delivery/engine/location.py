"""Location-triggered campaigns: position updates ingested as `location_update` events (attributes
`latitude`, `longitude`, degrees) fire the campaign's geofences (`basic_details.geofences`) on the
same machinery as event triggers (`engine.triggers`: inbox, one EVENT execution, a user row per
firing, dispatch).

A user is inside a geofence when the haversine distance from its centre is at most `radius` metres.
Each update is compared with the one before it in the user's time-ordered history of updates (any
age; none counts as outside):

- ENTRY: outside → inside fires, due `response_time` after the update;
- EXIT: inside → outside fires, due `response_time` after the update;
- dwell: entering writes the firing at once, due `dwell_time` + `response_time` after the entry
  (keyed by the entering update, so once per stay); an update outside before it is due cancels it
  (SUPPRESSED, LEFT_GEOFENCE). The worker's tick sends it when due if the user never left.

Updates are not always read in their order (one sent late, late and recent ones in one request, two
workers each taking one with SKIP LOCKED). A batch's updates are fitted in among those of the user
already evaluated for the campaign, each between its true neighbours (`_runs`; an update still
waiting in the inbox is fitted in on its own turn), and every crossing is counted once: the
crossings the batch adds fire, one an evaluated update fired is not fired again when a late update
moves it earlier (`steps_of`), and a stay found to begin earlier takes its dwell firing with it.
Leaving cancels the dwell firings already written of stays entered before, and a dwell firing is
written cancelled when an update outside before its moment is already stored. The firings of a user
are written one transaction at a time (`triggers.hold_users`), so neither side misses the other's
uncommitted work and a send limit counts every firing.

One update fires a campaign at most once (the firing is keyed by (user, update); a re-entry at an
update whose earlier crossing moved away since gets a key of its own). Before a firing
is written the user must be in the audience (`segmentation_details`) and match the trigger's
`included_filters` when it has any; `send_limit_value` per `send_limit_granularity_in_hours`
counts the user's messages of the campaign sent in that window plus firings still waiting: over it,
the firing is SUPPRESSED (SEND_LIMIT). With a LIMITED_TIME `scheduling_details.geo_fence_timelimit`,
a firing whose message would be due outside its `timebounds` is SUPPRESSED (OUTSIDE_TIME_LIMIT).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import Event
from herald.audience.segmentation.audience import session_dialect
from herald.audience.segmentation.catalog import load_segments
from herald.audience.segmentation.compiler import Compiler
from herald.audience.segmentation.dialect import dialect_for
from herald.campaigns import durations
from herald.campaigns.schemas.basic_details import Geofence, GeofenceTrigger, PushBasicDetails
from herald.campaigns.schemas.common import resolve_datetime
from herald.campaigns.schemas.scheduling import NotificationSchedule, SchedulingDetails
from herald.clock import utc
from herald.delivery.engine.models import Execution, ExecutionUser, TriggerInbox
from herald.delivery.engine.rank import rank_of
from herald.delivery.engine.resolve import LiveCampaign
from herald.delivery.engine.trigger_match import in_audience
from herald.delivery.engine.triggers import (
    LOCATION_ACTION,
    Dropped,
    Fired,
    FiringWrites,
    firing_row,
    holdout,
)
from herald.errors import ValidationFailed
from herald.ids import object_id
from herald.timezones import zone_named

EARTH_RADIUS_M = 6_371_008.8  # mean Earth radius
WAITING = ("PENDING", "CLAIMED", "RETRY")

# --- geometry and transitions (pure) ----------------------------------------------------------


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle (haversine) distance in metres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def position(attributes: Any) -> tuple[float, float] | None:
    """(latitude, longitude) of a `location_update`'s attributes; None when either is missing,
    not a number or out of range."""
    if not isinstance(attributes, dict):
        return None
    if any(isinstance(attributes.get(name), bool) for name in ("latitude", "longitude")):
        return None  # `true` is no position, though float() reads it as 1.0
    try:
        lat, lon = float(attributes["latitude"]), float(attributes["longitude"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    return lat, lon


def _time_of_day(text: str) -> time | None:
    try:
        return time.fromisoformat(text)
    except ValueError:
        return None


def time_limit_of(details: SchedulingDetails | None) -> Callable[[datetime], bool] | None:
    """When a LIMITED_TIME `geo_fence_timelimit` lets a message go: at an instant inside one of its
    `timebounds`, each a time of day in the campaign timezone (a window past midnight wraps) or a
    pair of date-times, start included, end excluded. None: at any time (ALWAYS, or no limit). The
    bounds are read once, here, not at each firing."""
    limit = details.geo_fence_timelimit if details is not None else None
    if (
        details is None
        or limit is None
        or limit.notification_schedule is not NotificationSchedule.LIMITED_TIME
    ):
        return None
    daily: list[tuple[time, time]] = []
    spans: list[tuple[datetime, datetime]] = []
    for bound in limit.timebounds or []:
        start, end = _time_of_day(bound.start_time), _time_of_day(bound.end_time)
        if start is not None and end is not None:
            daily.append((start, end))
        elif start is None and end is None:
            timezone = details.timezone
            spans.append(
                (resolve_datetime(bound.start_time, timezone), resolve_datetime(bound.end_time, timezone))
            )
        # else: a time of day to a date-time (stored before create and publish refused it) names
        # no window. Read as one, it raised at every batch, and the campaign's updates were lost.
    tz = zone_named(details.timezone)

    def within(at: datetime) -> bool:
        local = at.astimezone(tz).time().replace(tzinfo=None)
        return any(
            (start <= local < end) if start <= end else (local >= start or local < end)
            for start, end in daily
        ) or any(start <= at < end for start, end in spans)

    return within


@dataclass(frozen=True)
class Fence:
    name: str
    latitude: float
    longitude: float
    radius: float
    triggered_at: GeofenceTrigger
    dwell: timedelta
    response: timedelta

    def contains(self, where: tuple[float, float] | None) -> bool:
        # "At most radius" within a millimetre: a point computed to lie on the circle is inside,
        # whatever the last bit of its floating-point distance.
        return where is not None and distance_m(self.latitude, self.longitude, *where) <= self.radius + 1e-3


def fences_of(campaign: LiveCampaign) -> list[Fence]:
    details = campaign.document.basic_details
    found = details.geofences if isinstance(details, PushBasicDetails) else None
    items: list[Geofence] = found if isinstance(found, list) else [found] if found is not None else []
    return [
        Fence(
            g.name,
            float(g.latitude),
            float(g.longitude),
            float(g.radius),
            g.triggered_at,
            durations.duration(g.dwell_time_value, g.dwell_time_granularity),
            durations.duration(g.response_time_value, g.response_time_granularity),
        )
        for g in items
    ]


@dataclass(frozen=True)
class Crossing:
    """What one update does to one geofence: fire (with the time it is due) or cancel a dwell."""

    fence: Fence
    due: datetime | None  # None: cancel the fence's dwell firings still waiting
    transition: str


def crossings(
    fences: list[Fence], before: tuple[float, float] | None, after: tuple[float, float], at: datetime
) -> list[Crossing]:
    found: list[Crossing] = []
    for fence in fences:
        was, now_in = fence.contains(before), fence.contains(after)
        if was == now_in:
            continue
        kind = fence.triggered_at
        if kind is GeofenceTrigger.ENTRY and now_in:
            found.append(Crossing(fence, at + fence.response, "ENTRY"))
        elif kind is GeofenceTrigger.EXIT and not now_in:
            found.append(Crossing(fence, at + fence.response, "EXIT"))
        elif kind is GeofenceTrigger.DWELL:
            due = at + fence.dwell + fence.response if now_in else None
            found.append(Crossing(fence, due, "DWELL"))
    return found


@dataclass(frozen=True)
class Located:
    """A location update with a valid position."""

    event: Fired
    where: tuple[float, float]


@dataclass(frozen=True)
class Run:
    """Updates of a batch that come one after the other in the user's time-ordered history, with the
    evaluated updates just before them (none: the user was outside) and just after them (none: they
    are the latest)."""

    before: Located | None
    updates: list[Located]
    after: Located | None


@dataclass(frozen=True)
class EarlierEntry:
    """A dwell stay that began earlier than read: `now` enters it in time order, not `then` (which
    wrote the stay's dwell firing when it was read)."""

    then: Fired
    now: Fired
    crossing: Crossing


def steps_of(fences: list[Fence], runs: list[Run]) -> tuple[list[tuple[Fired, Crossing]], list[EarlierEntry]]:
    """The crossings a batch's runs of updates bring (in time order, each with the update it is at),
    and the dwell stays found to begin earlier than read.

    A run goes between the evaluated updates around it: the step `before` → `after` becomes the
    chain `before` → its updates → `after`, whose crossings are the run's, less the one `after` had
    (fired when it was read). Sides alternate, so the chain crosses each geofence as the step did
    plus pairs, and the crossing counted then is the chain's last of that geofence and kind: the
    one into the stay (or the absence) `after` belongs to, moved to a late update when it is not at
    `after`. So a late update inside the stay already entered fires nothing more, and a late update
    outside makes `after` a re-entry, which fires. Leaving a dwell geofence is never taken out:
    cancelling again changes nothing, and leaving earlier than read cancels the firings due in
    between."""
    steps: list[tuple[Fired, Crossing]] = []
    earlier: list[EarlierEntry] = []
    for run in runs:
        found: list[tuple[Fired, Crossing]] = []
        where = run.before.where if run.before is not None else None
        for update_ in [*run.updates, *([run.after] if run.after is not None else [])]:
            found += [
                (update_.event, crossing)
                for crossing in crossings(fences, where, update_.where, update_.event.occurred_at)
            ]
            where = update_.where
        if run.after is not None:
            before = run.before.where if run.before is not None else None
            for counted in crossings(fences, before, run.after.where, run.after.event.occurred_at):
                if counted.due is None:
                    continue
                index = max(
                    i
                    for i, (_, crossing) in enumerate(found)
                    if crossing.fence == counted.fence and crossing.due is not None
                )
                event, crossing = found.pop(index)
                if crossing.transition == "DWELL" and event.id != run.after.event.id:
                    earlier.append(EarlierEntry(run.after.event, event, crossing))
        steps += found
    return steps, earlier


# --- firing -----------------------------------------------------------------------------------


async def fire_location(
    session: AsyncSession,
    firings: FiringWrites,
    campaign: LiveCampaign,
    execution: Execution,
    events: list[Fired],
    now: datetime,
) -> None:
    """The firings of a batch of inboxed updates, added to `firings` (dwell cancellations and the
    dwell firings of stays that began earlier than read written at once). Raises ValidationFailed
    when the trigger's filters cannot be evaluated."""
    fences = fences_of(campaign)
    updates = sorted(
        (e for e in events if e.action == LOCATION_ACTION and position(e.attributes) is not None),
        key=lambda e: (e.occurred_at, e.id),
    )
    if not fences or not updates:
        return
    by_user: dict[str, list[Fired]] = defaultdict(list)
    for event in updates:
        by_user[event.customer_id].append(event)
    eligible = await _qualified(session, campaign, set(by_user), now)
    held_out = await holdout(session, campaign)
    limit = _send_limit(campaign)
    within = time_limit_of(campaign.document.scheduling_details)
    rows: list[dict[str, Any]] = []
    for customer_id, mine in by_user.items():
        # A user who no longer qualifies (trigger filter, audience) fires nothing, but leaving a
        # geofence still cancels the dwell message waiting for them.
        qualifies = customer_id in eligible
        used = await _used(session, execution, customer_id, now, limit[1]) if limit and qualifies else 0
        rank = rank_of(campaign.campaign_id, customer_id)
        runs = await _runs(session, campaign, customer_id, mine)
        steps, earlier = steps_of(fences, runs)
        fired: set[str] = set()  # the updates that fired: one firing per update
        for entry in earlier:  # the stay's dwell firing, as read, moves to its entry in time order
            found = await _dwell_firing(session, execution, customer_id, entry)
            if found is None or (found[1] != "PENDING" and not qualifies):
                continue
            firing, was = found
            over_limit = was != "PENDING" and limit is not None and used >= limit[0]
            dropped = await _held_back(
                session, campaign.workspace_id, customer_id, entry.now, entry.crossing, within, over_limit
            )
            used += (dropped is None) - (was == "PENDING")
            await _move_dwell(session, execution, customer_id, firing, entry, dropped)
            fired.add(entry.now.id)
        # An evaluated update that fires now (a re-entry: a late update outside came before it) may
        # key a firing already, of a crossing that has moved to an earlier late update since: the
        # new one gets a key of its own.
        refiring = {run.after.event.id for run in runs if run.after is not None}
        taken = await _keys_taken(session, execution, customer_id, refiring & {e.id for e, _ in steps})
        for event, crossing in steps:
            if crossing.due is None:
                await _cancel_dwell(session, execution, customer_id, crossing.fence, event, rows)
                continue
            if event.id in fired or not qualifies:
                continue
            fired.add(event.id)
            held = held_out(customer_id, rank)
            over_limit = limit is not None and used >= limit[0]
            dropped = None
            if not held:
                dropped = await _held_back(
                    session, campaign.workspace_id, customer_id, event, crossing, within, over_limit
                )
            state, reason = held or (("SUPPRESSED", dropped) if dropped else ("PENDING", None))
            used += state == "PENDING"
            attributes = {
                **(event.attributes or {}),
                "geofence": crossing.fence.name,
                "transition": crossing.transition,
            }
            key = object_id(now) if event.id in taken else event.id
            row = firing_row(execution, customer_id, key, rank, state, reason, crossing.due, now, attributes)
            if crossing.transition == "DWELL":
                # Its moment is kept even when already past (a late update, a worker behind):
                # an exit seen before that moment still cancels it (`_cancel_dwell`).
                row["not_before"] = crossing.due
            rows.append(row)
    firings.add(execution, rows, campaign)


async def _held_back(
    session: AsyncSession,
    workspace_id: str,
    customer_id: str,
    event: Fired,
    crossing: Crossing,
    within: Callable[[datetime], bool] | None,
    over_limit: bool,
) -> str | None:
    """Why the firing of `crossing` at `event` (a user not held out) is dropped (a `Dropped`
    reason), or None: it waits for its moment."""
    assert crossing.due is not None
    if crossing.transition == "DWELL" and await _left_before(
        session, workspace_id, customer_id, crossing.fence, event, crossing.due
    ):
        return Dropped.LEFT_GEOFENCE
    if within is not None and not within(crossing.due):
        return Dropped.OUTSIDE_TIME_LIMIT
    if over_limit:
        return Dropped.SEND_LIMIT
    return None


async def _dwell_firing(
    session: AsyncSession, execution: Execution, customer_id: str, entry: EarlierEntry
) -> tuple[str, str] | None:
    """The key and state of the stay's dwell firing (the one due its dwell time after `entry.then`,
    which wrote it) when its moment still decides it: waiting (PENDING), or dropped because the user
    left before that moment (which is now earlier). None: none to move (sent or on its way, held
    out, or never written)."""
    fence = entry.crossing.fence
    found = await session.execute(
        select(ExecutionUser.firing, ExecutionUser.state, ExecutionUser.reason, ExecutionUser.event).where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == customer_id,
            ExecutionUser.not_before == entry.then.occurred_at + fence.dwell + fence.response,
        )
    )
    for firing, state, reason, event in found.all():
        if _is_dwell_of(event, fence) and (
            state == "PENDING" or (state == "SUPPRESSED" and reason == Dropped.LEFT_GEOFENCE)
        ):
            return str(firing), str(state)
    return None


async def _move_dwell(
    session: AsyncSession,
    execution: Execution,
    customer_id: str,
    firing: str,
    entry: EarlierEntry,
    reason: str | None,
) -> None:
    """The stay's dwell firing (`firing`) becomes that of the update entering it in time order:
    keyed by it (a dwell firing is keyed by its entry: once per stay), due its dwell time after it,
    and waiting or dropped (`reason`) as decided for that moment."""
    await session.execute(
        update(ExecutionUser)
        .where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == customer_id,
            ExecutionUser.firing == firing,
        )
        .values(
            firing=entry.now.id,
            state="PENDING" if reason is None else "SUPPRESSED",
            reason=reason,
            not_before=entry.crossing.due,
            event={
                **(entry.now.attributes or {}),
                "geofence": entry.crossing.fence.name,
                "transition": entry.crossing.transition,
            },
        )
        .execution_options(synchronize_session=False)
    )


async def _keys_taken(
    session: AsyncSession, execution: Execution, customer_id: str, events: set[str]
) -> set[str]:
    """Those of `events` that key a firing of the user already."""
    if not events:
        return set()
    found = await session.scalars(
        select(ExecutionUser.firing).where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == customer_id,
            ExecutionUser.firing.in_(events),
        )
    )
    return set(found.all())


def _send_limit(campaign: LiveCampaign) -> tuple[int, timedelta] | None:
    controls = campaign.document.delivery_controls
    value = getattr(controls, "send_limit_value", None)
    hours = getattr(controls, "send_limit_granularity_in_hours", None)
    if value is None or hours is None:
        return None
    # A whole number of any size (digits, by the schema): through a float, a huge one overflowed.
    return int(value), durations.hours(hours)


async def _used(
    session: AsyncSession, execution: Execution, customer_id: str, now: datetime, window: timedelta
) -> int:
    """The user's messages of this campaign sent within `window`, plus firings still waiting."""
    count = await session.scalar(
        select(func.count()).where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == customer_id,
            or_(
                ExecutionUser.state.in_(WAITING),
                and_(ExecutionUser.state == "SENT", ExecutionUser.claimed_at > now - window),
            ),
        )
    )
    return int(count or 0)


# --- the user's updates around a batch's --------------------------------------------------------


async def _runs(
    session: AsyncSession, campaign: LiveCampaign, customer_id: str, mine: list[Fired]
) -> list[Run]:
    """A batch's updates of a user (`mine`, in time order, valid positions) in runs between their
    neighbours in the user's whole time-ordered history of updates evaluated for the campaign, so
    each crossing is judged against the updates truly around it, read in an earlier batch or in
    this one. (Two late updates of one request can be far apart, with evaluated ones between.)"""
    workspace_id, campaign_id = campaign.workspace_id, campaign.campaign_id
    first, last = mine[0], mine[-1]
    batch = {event.id: event for event in mine}
    earlier = await _read(session, _updates_beside(workspace_id, customer_id, first, later=False))
    later = await _read(session, _updates_beside(workspace_id, customer_id, last, later=True))
    between = await _read(session, _updates_between(workspace_id, first, last)) if len(mine) > 1 else []
    read = [update_.id for update_ in (*earlier, *between, *later) if update_.id not in batch]
    waiting = await _waiting(session, workspace_id, campaign_id, read)
    nearest = _Nearest(session, workspace_id, campaign_id, customer_id)
    before = await nearest.evaluated(earlier, waiting, later=False)
    runs: list[Run] = []
    current: list[Located] = []
    for update_ in between or [first]:
        event = batch.get(update_.id)
        if event is not None:
            current.append(Located(event, _position_of(event)))
        elif (evaluated := _evaluated(update_, waiting)) is not None:
            if current:
                runs.append(Run(before, current, evaluated))
                current = []
            before = evaluated
    runs.append(Run(before, current, await nearest.evaluated(later, waiting, later=True)))
    return runs


def _position_of(event: Fired) -> tuple[float, float]:
    where = position(event.attributes)
    assert where is not None  # a batch's updates are those with a valid position
    return where


async def _read(session: AsyncSession, query: Select[tuple[datetime, str, str, Any]]) -> list[Fired]:
    return [
        Fired(event_id, customer_id, LOCATION_ACTION, dict(attributes or {}), utc(at))
        for at, event_id, customer_id, attributes in await session.execute(query)
    ]


async def _waiting(session: AsyncSession, workspace_id: str, campaign_id: str, events: list[str]) -> set[str]:
    """Those of `events` waiting in the inbox for the campaign (arrived since the batch was taken, or
    in another worker's batch): not evaluated yet, each is fitted in among the updates evaluated by
    then when its turn comes. (Read apart from the updates, by the inbox's key: joined to them, the
    inbox was scanned for each update once its planner statistics said it was empty.)"""
    if not events:
        return set()
    found = await session.execute(
        select(TriggerInbox.event_id, TriggerInbox.campaigns).where(
            TriggerInbox.workspace_id == workspace_id, TriggerInbox.event_id.in_(events)
        )
    )
    return {event_id for event_id, campaigns in found if campaign_id in (campaigns or ())}


def _evaluated(update_: Fired, waiting: set[str]) -> Located | None:
    """`update_` as a position evaluated for the campaign; None when it has no valid position (it is
    ignored, however many such come in between) or is `waiting`."""
    where = position(update_.attributes)
    return Located(update_, where) if where is not None and update_.id not in waiting else None


# A user's updates read at once next to a batch's (the nearest evaluated one is most often the first).
_PAGE = 20


@dataclass(frozen=True)
class _Nearest:
    """Reads on from a page of the user's updates next to a batch's."""

    session: AsyncSession
    workspace_id: str
    campaign_id: str
    customer_id: str

    async def evaluated(self, page: list[Fired], waiting: set[str], *, later: bool) -> Located | None:
        """The first update evaluated for the campaign in `page` (the user's updates before a
        batch's, nearest first, or `later` after them), read on page by page while there is none."""
        while True:
            found = next((e for update_ in page if (e := _evaluated(update_, waiting))), None)
            if found is not None or len(page) < _PAGE:
                return found
            query = _updates_beside(self.workspace_id, self.customer_id, page[-1], later=later)
            page = await _read(self.session, query)
            ids = [update_.id for update_ in page]
            waiting = await _waiting(self.session, self.workspace_id, self.campaign_id, ids)


def _follows(at: datetime, event_id: str) -> ColumnElement[bool]:
    """An update comes after the one timed `at` with id `event_id`: (time, id) order."""
    return or_(Event.occurred_at > at, and_(Event.occurred_at == at, Event.id > event_id))


def _precedes(at: datetime, event_id: str) -> ColumnElement[bool]:
    return or_(Event.occurred_at < at, and_(Event.occurred_at == at, Event.id < event_id))


def _updates(
    workspace_id: str, customer_id: str, *where: ColumnElement[bool]
) -> Select[tuple[datetime, str, str, Any]]:
    """The user's location updates (time, id, customer, attributes) that match `where`."""
    return select(Event.occurred_at, Event.id, Event.customer_id, Event.attributes).where(
        Event.workspace_id == workspace_id,
        Event.customer_id == customer_id,
        Event.action == LOCATION_ACTION,
        *where,
    )


def _updates_between(workspace_id: str, first: Fired, last: Fired) -> Select[tuple[datetime, str, str, Any]]:
    """The user's updates from `first` to `last`, both included, in time order: all of them (a
    batch's updates of a user are most often a few minutes' worth)."""
    return _updates(
        workspace_id,
        first.customer_id,
        or_(Event.id == first.id, _follows(first.occurred_at, first.id)),
        or_(Event.id == last.id, _precedes(last.occurred_at, last.id)),
    ).order_by(Event.occurred_at.asc(), Event.id.asc())


def _updates_beside(
    workspace_id: str, customer_id: str, update_: Fired, *, later: bool
) -> Select[tuple[datetime, str, str, Any]]:
    """A page of the user's updates next to `update_`: those before it, nearest first, or (`later`)
    those after it."""
    at, event_id = update_.occurred_at, update_.id
    if later:
        beside, order = _follows(at, event_id), (Event.occurred_at.asc(), Event.id.asc())
    else:
        beside, order = _precedes(at, event_id), (Event.occurred_at.desc(), Event.id.desc())
    return _updates(workspace_id, customer_id, beside).order_by(*order).limit(_PAGE)


# --- dwell --------------------------------------------------------------------------------------


async def _left_before(
    session: AsyncSession, workspace_id: str, customer_id: str, fence: Fence, entered: Fired, due: datetime
) -> bool:
    """Whether an update of the user after `entered` and timed before the dwell moment `due`, already
    stored, is outside `fence`: the user left before the dwell time was up. That update may have
    been read before `entered` was, and found no firing to cancel."""
    later = await session.execute(
        _updates(
            workspace_id, customer_id, _follows(entered.occurred_at, entered.id), Event.occurred_at < due
        )
    )
    return any(
        (where := position(attributes)) is not None and not fence.contains(where) for *_, attributes in later
    )


async def _cancel_dwell(
    session: AsyncSession,
    execution: Execution,
    customer_id: str,
    fence: Fence,
    left: Fired,
    pending: list[dict[str, Any]],
) -> None:
    """The user left `fence` at `left`: the dwell firings of stays entered before then and not yet due
    by then are not sent. (A stay entered after `left`, read first, is not one it ends.)"""

    def ends(event: Any, firing: str, due: datetime | None) -> bool:
        if due is None or not _is_dwell_of(event, fence):
            return False
        # A dwell firing is due the dwell and response times after the update entering its stay, and
        # keyed by it (but for a re-entry at an update keying a firing already: see `fire_location`).
        entered_at = due - fence.dwell - fence.response
        return (entered_at, firing) < (left.occurred_at, left.id) and due > left.occurred_at

    for row in pending:
        mine = row["customer_id"] == customer_id and row["state"] == "PENDING"
        if mine and ends(row["event"], row["firing"], row["not_before"]):
            row["state"], row["reason"] = "SUPPRESSED", Dropped.LEFT_GEOFENCE
    waiting = await session.execute(
        select(ExecutionUser.firing, ExecutionUser.event, ExecutionUser.not_before).where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == customer_id,
            ExecutionUser.state == "PENDING",
        )
    )
    cancelled = [firing for firing, event, due in waiting.all() if ends(event, firing, due)]
    if cancelled:
        await session.execute(
            update(ExecutionUser)
            .where(
                ExecutionUser.workspace_id == execution.workspace_id,
                ExecutionUser.execution_id == execution.id,
                ExecutionUser.customer_id == customer_id,
                ExecutionUser.state == "PENDING",
                ExecutionUser.firing.in_(cancelled),
            )
            .values(state="SUPPRESSED", reason=Dropped.LEFT_GEOFENCE)
        )


def _is_dwell_of(event: Any, fence: Fence) -> bool:
    """Whether a firing's `event` attributes are those of a dwell in `fence`."""
    return (
        isinstance(event, dict) and event.get("geofence") == fence.name and event.get("transition") == "DWELL"
    )


async def _qualified(
    session: AsyncSession, campaign: LiveCampaign, customers: set[str], now: datetime
) -> set[str]:
    """Those of `customers` in the audience who match the trigger's `included_filters` (as a whole,
    when it has filters)."""
    members = await in_audience(session, campaign, customers, now)
    trigger = campaign.document.trigger_condition
    included = trigger.included_filters if trigger is not None else None
    if not members or included is None or not included.filters:
        return members
    segments = await load_segments(session, campaign.workspace_id, [included])
    compiler = Compiler(
        dialect_for(session_dialect(session)), campaign.workspace_id, now, segments, sorted(members)
    )
    matches = compiler.where(included, ("trigger_condition", "included_filters"))
    if compiler.problems:
        raise ValidationFailed(compiler.problems)
    query = (
        select(compiler.users.c.customer_id)
        .select_from(compiler.from_clause())
        .where(compiler.in_workspace(), matches)
    )
    return set((await session.scalars(query)).all()) & members
