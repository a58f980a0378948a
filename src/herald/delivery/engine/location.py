"""Location-triggered campaigns: position updates ingested as `location_update` events (attributes
`latitude`, `longitude`, degrees) fire the campaign's geofences (`basic_details.geofences`) on the
same machinery as event triggers (`engine.triggers`: inbox, one EVENT execution, a user row per
firing, dispatch).

A user is inside a geofence when the haversine distance from its centre is at most `radius` metres.
Each update is compared with the user's previous one (the latest `location_update` before it, any
age; none counts as outside):

- ENTRY: outside → inside fires, due `response_time` after the update;
- EXIT: inside → outside fires, due `response_time` after the update (an update that comes after a
  later-timed one was evaluated is fitted in between: `_steps`);
- dwell: entering writes the firing at once, due `dwell_time` + `response_time` after the entry
  (keyed by the entering update, so once per stay); an update outside before it is due cancels it
  (SUPPRESSED, LEFT_GEOFENCE). The worker's tick sends it when due if the user never left.

Updates are not always read in their order (one sent late; two workers each taking one, with
SKIP LOCKED), so each side looks for the other: leaving cancels the dwell firings already written,
and a dwell firing is written cancelled when an update outside before its moment is already
stored. The firings of a user are written one transaction at a time (`triggers.hold_users`), so
neither side misses the other's uncommitted work and a send limit counts every firing.

One update fires a campaign at most once (the firing is keyed by (user, update)). Before a firing
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


# --- firing -----------------------------------------------------------------------------------


async def fire_location(
    session: AsyncSession,
    firings: FiringWrites,
    campaign: LiveCampaign,
    execution: Execution,
    events: list[Fired],
    now: datetime,
) -> None:
    """The firings of a batch of inboxed updates, added to `firings` (dwell cancellations written
    at once). Raises ValidationFailed when the trigger's filters cannot be evaluated."""
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
        before = await _previous(session, campaign.workspace_id, customer_id, mine[0])
        used = await _used(session, execution, customer_id, now, limit[1]) if limit and qualifies else 0
        rank = rank_of(campaign.campaign_id, customer_id)
        steps = await _steps(session, execution, fences, before, mine)
        fired: set[str] = set()  # the updates that fired: one firing per update
        for event, crossing in steps:
            if crossing.due is None:
                await _cancel_dwell(session, execution, customer_id, crossing.fence, event, rows)
                continue
            if event.id in fired or not qualifies:
                continue
            fired.add(event.id)
            state, reason = held_out(customer_id, rank) or ("PENDING", None)
            left = crossing.transition == "DWELL" and await _left_before(
                session, campaign.workspace_id, customer_id, crossing.fence, event, crossing.due
            )
            if state == "PENDING" and left:
                state, reason = "SUPPRESSED", Dropped.LEFT_GEOFENCE
            elif state == "PENDING" and within is not None and not within(crossing.due):
                state, reason = "SUPPRESSED", Dropped.OUTSIDE_TIME_LIMIT
            elif state == "PENDING" and limit is not None and used >= limit[0]:
                state, reason = "SUPPRESSED", Dropped.SEND_LIMIT
            elif state == "PENDING":
                used += 1
            attributes = {
                **(event.attributes or {}),
                "geofence": crossing.fence.name,
                "transition": crossing.transition,
            }
            row = firing_row(
                execution, customer_id, event.id, rank, state, reason, crossing.due, now, attributes
            )
            if crossing.transition == "DWELL":
                # Its moment is kept even when already past (a late update, a worker behind):
                # an exit seen before that moment still cancels it (`_cancel_dwell`).
                row["not_before"] = crossing.due
            rows.append(row)
    firings.add(execution, rows, campaign)


async def _steps(
    session: AsyncSession,
    execution: Execution,
    fences: list[Fence],
    before: tuple[float, float] | None,
    mine: list[Fired],
) -> list[tuple[Fired, Crossing]]:
    """The crossings of a user's updates `mine` (in time order, after the position `before`), each
    with the update it is at. When an update timed after them was evaluated already (they came
    late), the ENTRY and EXIT crossings are those of the whole sequence up to it: the one into that
    update is added, and the crossing it fired then (from `before`, as it saw it) is taken out, so
    a late update inside neither fires the same stay's entry twice nor, outside, loses the
    re-entry at the update after it. (Dwell firings have their own rule: `_cancel_dwell`,
    `_left_before`.)"""
    steps: list[tuple[Fired, Crossing]] = []
    where = before
    for event in mine:
        after = position(event.attributes)
        assert after is not None
        steps += [(event, crossing) for crossing in crossings(fences, where, after, event.occurred_at)]
        where = after
    later = await _next_evaluated(session, execution, mine)
    if later is None:
        return steps
    update_, at, fired_then = later
    steps += [
        (update_, crossing)
        for crossing in crossings(fences, where, at, update_.occurred_at)
        if crossing.transition != "DWELL"
    ]
    if fired_then is not None:
        for index in range(len(steps) - 1, -1, -1):
            crossing = steps[index][1]
            if crossing.transition == fired_then[1] and crossing.fence.name == fired_then[0]:
                del steps[index]
                break
    return steps


async def _next_evaluated(
    session: AsyncSession, execution: Execution, mine: list[Fired]
) -> tuple[Fired, tuple[float, float], tuple[str, str] | None] | None:
    """The user's first update with a valid position timed after `mine`, if it was evaluated
    already (no longer in the inbox): the update, its position, and the (geofence, transition)
    it fired for this execution, if an ENTRY or EXIT."""
    last, batch = mine[-1], {event.id for event in mine}
    page = _updates_beside(execution.workspace_id, last.customer_id, last.occurred_at, last.id, later=True)
    rows = (await session.execute(page)).all()
    found = next(((row, at) for row in rows if row[1] not in batch and (at := position(row[2]))), None)
    if found is None:
        return None
    (occurred_at, event_id, attributes), at = found
    waiting = await session.scalar(
        select(TriggerInbox.event_id).where(
            TriggerInbox.workspace_id == execution.workspace_id, TriggerInbox.event_id == event_id
        )
    )
    if waiting is not None:
        return None  # it is evaluated later, after these (its previous update is theirs then)
    fired = await session.scalar(
        select(ExecutionUser.event).where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == last.customer_id,
            ExecutionUser.firing == event_id,
        )
    )
    then = None
    if isinstance(fired, dict) and fired.get("transition") in ("ENTRY", "EXIT"):
        then = (str(fired.get("geofence")), str(fired["transition"]))
    update_ = Fired(event_id, last.customer_id, LOCATION_ACTION, dict(attributes or {}), utc(occurred_at))
    return update_, at, then


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


# Earlier updates read at once while looking for the last valid position (most are valid: one page).
_PREVIOUS_PAGE = 20


async def _previous(
    session: AsyncSession, workspace_id: str, customer_id: str, first: Fired
) -> tuple[float, float] | None:
    """The user's position before `first`: the latest earlier update with a valid position, however
    many invalid ones came after it (they are ignored, not a loss of where the user was)."""
    before_at, before_id = first.occurred_at, first.id
    while True:
        page = _updates_beside(workspace_id, customer_id, before_at, before_id, later=False)
        rows = (await session.execute(page)).all()
        for _, _, attributes in rows:
            found = position(attributes)
            if found is not None:
                return found
        if len(rows) < _PREVIOUS_PAGE:
            return None
        before_at, before_id = rows[-1][0], rows[-1][1]


def _updates_beside(
    workspace_id: str, customer_id: str, at: datetime, event_id: str, *, later: bool
) -> Select[tuple[datetime, str, Any]]:
    """A page of the user's location updates (time, id, attributes) next to the one timed `at`
    with id `event_id`: those before it, nearest first, or (`later`) those after it."""
    order: tuple[ColumnElement[Any], ...]
    if later:
        beside = or_(Event.occurred_at > at, and_(Event.occurred_at == at, Event.id > event_id))
        order = (Event.occurred_at.asc(), Event.id.asc())
    else:
        beside = or_(Event.occurred_at < at, and_(Event.occurred_at == at, Event.id < event_id))
        order = (Event.occurred_at.desc(), Event.id.desc())
    return (
        select(Event.occurred_at, Event.id, Event.attributes)
        .where(
            Event.workspace_id == workspace_id,
            Event.customer_id == customer_id,
            Event.action == LOCATION_ACTION,
            beside,
        )
        .order_by(*order)
        .limit(_PREVIOUS_PAGE)
    )


async def _left_before(
    session: AsyncSession, workspace_id: str, customer_id: str, fence: Fence, entered: Fired, due: datetime
) -> bool:
    """Whether an update of the user after `entered` and timed before the dwell moment `due`, already
    stored, is outside `fence`: the user left before the dwell time was up. That update may have
    been read before `entered` was, and found no firing to cancel."""
    later = await session.scalars(
        select(Event.attributes).where(
            Event.workspace_id == workspace_id,
            Event.customer_id == customer_id,
            Event.action == LOCATION_ACTION,
            or_(
                Event.occurred_at > entered.occurred_at,
                and_(Event.occurred_at == entered.occurred_at, Event.id > entered.id),
            ),
            Event.occurred_at < due,
        )
    )
    return any(
        (where := position(attributes)) is not None and not fence.contains(where) for attributes in later
    )


async def _cancel_dwell(
    session: AsyncSession,
    execution: Execution,
    customer_id: str,
    fence: Fence,
    left: Fired,
    pending: list[dict[str, Any]],
) -> None:
    """The user left `fence` at `left`: its dwell firings not yet due by then are not sent."""

    def stays(event: Any, due: datetime | None) -> bool:
        return not (
            isinstance(event, dict)
            and event.get("geofence") == fence.name
            and event.get("transition") == "DWELL"
            and due is not None
            and due > left.occurred_at
        )

    for row in pending:
        mine = row["customer_id"] == customer_id and row["state"] == "PENDING"
        if mine and not stays(row["event"], row["not_before"]):
            row["state"], row["reason"] = "SUPPRESSED", Dropped.LEFT_GEOFENCE
    waiting = await session.execute(
        select(ExecutionUser.firing, ExecutionUser.event, ExecutionUser.not_before).where(
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.customer_id == customer_id,
            ExecutionUser.state == "PENDING",
        )
    )
    cancelled = [firing for firing, event, due in waiting.all() if not stays(event, due)]
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
