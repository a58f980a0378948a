"""Conversions: a user's events that reach a campaign's goal within its attribution window.

When the engine settles a user of a campaign with `conversion_goal_details.goals` (SENT, or
HELD_OUT in the campaign or global control group), it opens the user's attribution window: from
then (`opened_at`: when the message went, or would have gone) for `attribution_window_in_hours`
(`DEFAULT_WINDOW_HOURS` when absent). In an EVENT execution (an event-triggered campaign), where a
user gets a message per firing, each message opens a window of its own. Attribution happens as
events are stored, in the storing transaction, so a conversion is visible as soon as its event is:

- ingestion (`/v1/event`, `/v1/transition`, `herald audience import`) calls `attribute` with the
  events it wrote; one indexed read finds the users' windows that may contain them;
- opening windows calls `catch_up` for events of those users stored earlier with a time inside the
  window (an event that arrived while the message was being sent, or an import of events that
  happened after it).

An event converts a window's goal when its action is the goal's `goal_event_name`, its time
(`occurred_at`, as sent; historical imports included) lies in [opened_at, closes_at), it is not
the event that fired the window's message (a triggered campaign whose goal is its own trigger:
under an injected clock the two share their instant), and its attributes satisfy
`goal_event_attribute`, evaluated by the segmentation compiler (`segmentation.goal_filter` +
`event_predicate`: the one filter language). A goal whose condition cannot be read there never
converts. An event inside several windows of one user and execution (two messages of a triggered
campaign within the attribution window) counts for the latest of them only (last touch). At most
one conversion per window and goal: the primary key of `delivery_conversions`, inserted with ON
CONFLICT DO NOTHING, makes that hold across any number of ingesting processes; the first event
stored wins, with its revenue: the event's `revenue_attribute` when it is a JSON number (a string,
even of digits, or a missing value counts the conversion without revenue).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Insert, Table, and_, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience.models import Event
from herald.audience.segmentation import event_predicate, goal_filter
from herald.campaigns import durations
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.goals import CampaignGoal, ConversionGoalDetails
from herald.delivery.engine.models import AttributionWindow, Conversion, Execution
from herald.sql_lists import one_of

DEFAULT_WINDOW_HOURS = 24
_CHUNK = 500  # customer ids per IN list
_events = cast(Table, Event.__table__)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as written: its id, whose, what, its attributes and when it happened."""

    id: str
    customer_id: str
    action: str
    attributes: dict[str, Any]
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class _Window:
    execution_id: str
    customer_id: str
    firing: str
    campaign_id: str
    variation: str | None
    held_out: str | None
    opened_at: datetime
    closes_at: datetime


def goals_of(components: dict[str, Any] | None) -> ConversionGoalDetails | None:
    """The campaign's conversion goals, or None when it has none (no windows are opened)."""
    raw = (components or {}).get("conversion_goal_details")
    if not isinstance(raw, dict):
        return None
    try:
        details = ConversionGoalDetails.model_validate(raw)
    except ValidationError:
        return None
    return details if details.goals else None


def window_length(details: ConversionGoalDetails) -> timedelta:
    return durations.hours(details.attribution_window_in_hours or DEFAULT_WINDOW_HOURS)


def _insert_ignore(connection: AsyncConnection, table: Any) -> Insert:
    if connection.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


# --- windows ----------------------------------------------------------------------------------


async def open_windows(
    connection: AsyncConnection,
    execution: Execution,
    details: ConversionGoalDetails,
    users: Sequence[tuple[str, str | None, str | None, str]],
    at: datetime,
) -> None:
    """Open the attribution windows of `users` (customer id, variation, held-out reason, firing:
    '' but in an EVENT execution) at `at`, once (a window already open stays as it was), then
    attribute events already stored in them."""
    if not users:
        return
    closes_at = at + window_length(details)
    await connection.execute(
        _insert_ignore(connection, AttributionWindow),
        [
            {
                "workspace_id": execution.workspace_id,
                "execution_id": execution.id,
                "customer_id": customer_id,
                "firing": firing,
                "campaign_id": execution.campaign_id,
                "variation": variation,
                "held_out": held_out,
                "opened_at": at,
                "closes_at": closes_at,
            }
            for customer_id, variation, held_out, firing in users
        ],
    )
    customers = sorted({customer_id for customer_id, _, _, _ in users})
    await catch_up(connection, execution.workspace_id, customers, details, at)


async def catch_up(
    connection: AsyncConnection,
    workspace_id: str,
    customer_ids: Sequence[str],
    details: ConversionGoalDetails,
    since: datetime,
) -> int:
    """Attribute the goal events of `customer_ids` stored before their windows opened (those that
    converted a window of the same goal already, seen by the ingestion that stored them, are not
    counted again)."""
    names = sorted({goal.goal_event_name for goal in details.goals or []})
    found: list[StoredEvent] = []
    for chunk in _chunks(list(customer_ids)):
        rows = await connection.execute(
            select(
                _events.c.id,
                _events.c.customer_id,
                _events.c.action,
                _events.c.attributes,
                _events.c.occurred_at,
            ).where(
                _events.c.workspace_id == workspace_id,
                _events.c.customer_id.in_(chunk),
                _events.c.occurred_at >= since,
                _events.c.action.in_(names),
            )
        )
        found += [StoredEvent(*row) for row in rows.all()]
    return await attribute(connection, workspace_id, found, since, seen_before=True)


# --- attribution ------------------------------------------------------------------------------


# Built once: every ingestion runs it, and built per call the statement cost more CPU than the
# database takes to answer it.
_OPEN_WINDOWS = select(
    AttributionWindow.execution_id,
    AttributionWindow.customer_id,
    AttributionWindow.firing,
    AttributionWindow.campaign_id,
    AttributionWindow.variation,
    AttributionWindow.held_out,
    AttributionWindow.opened_at,
    AttributionWindow.closes_at,
).where(
    AttributionWindow.workspace_id == bindparam("workspace_id"),
    one_of(AttributionWindow.customer_id, "customers"),
    AttributionWindow.closes_at > bindparam("earliest"),
    AttributionWindow.opened_at <= bindparam("latest"),
)


async def attribute(
    connection: AsyncConnection,
    workspace_id: str,
    events: Sequence[StoredEvent],
    now: datetime,
    *,
    seen_before: bool = False,
) -> int:
    """Record the conversions `events` (just stored, in this transaction; `seen_before`: stored
    earlier, and attributed then to the windows open at the time) make; how many are new."""
    if not events:
        return 0
    earliest = min(event.occurred_at for event in events)
    latest = max(event.occurred_at for event in events)
    customers = sorted({event.customer_id for event in events})
    windows: list[_Window] = []
    for chunk in _chunks(customers):
        rows = await connection.execute(
            _OPEN_WINDOWS,
            {"workspace_id": workspace_id, "customers": list(chunk), "earliest": earliest, "latest": latest},
        )
        windows += [_Window(*row) for row in rows.all()]
    if not windows:
        return 0
    wanted = sorted({window.campaign_id for window in windows})
    rows = await connection.execute(
        select(Campaign.campaign_id, Campaign.components).where(
            Campaign.workspace_id == workspace_id, Campaign.is_latest, Campaign.campaign_id.in_(wanted)
        )
    )
    goals = {campaign_id: goals_of(found) for campaign_id, found in rows.all()}
    by_user: dict[str, list[StoredEvent]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.occurred_at, e.id)):
        by_user[event.customer_id].append(event)
    # A user's windows per execution: one, or in an EVENT execution one per message.
    runs: dict[tuple[str, str], list[_Window]] = defaultdict(list)
    for window in windows:
        if goals.get(window.campaign_id) is not None:
            runs[(window.execution_id, window.customer_id)].append(window)
    # (execution, user, goal index) -> the goal's events, each with the window it counts for,
    # earliest first.
    candidates: dict[tuple[str, str, int], list[tuple[StoredEvent, _Window]]] = {}
    for (execution_id, customer_id), its_windows in runs.items():
        details = goals[its_windows[0].campaign_id]
        assert details is not None
        counted = [
            (event, holder)
            for event in by_user[customer_id]
            if (holder := _latest_holding(its_windows, event)) is not None
        ]
        for index, goal in enumerate(details.goals or []):
            inside = [(event, holder) for event, holder in counted if event.action == goal.goal_event_name]
            if inside:
                candidates[(execution_id, customer_id, index)] = inside
    if not candidates:
        return 0
    ids: dict[tuple[str, int], set[str]] = defaultdict(set)
    for (_, _, index), inside in candidates.items():
        ids[(inside[0][1].campaign_id, index)].update(event.id for event, _ in inside)
    matching = await _matching(connection, workspace_id, goals, ids, now)
    converted = await _converted(connection, workspace_id, list(candidates)) if seen_before else set()
    rows_to_write: list[dict[str, Any]] = []
    for (execution_id, customer_id, index), inside in candidates.items():
        campaign_id = inside[0][1].campaign_id
        goal = (goals[campaign_id].goals or [])[index]  # type: ignore[union-attr]
        wanted_ids = matching[(campaign_id, index)]
        firsts: dict[_Window, StoredEvent] = {}
        for event, holder in inside:
            if event.id in wanted_ids and (execution_id, index, event.id) not in converted:
                firsts.setdefault(holder, event)
        rows_to_write += [
            {
                "workspace_id": workspace_id,
                "execution_id": execution_id,
                "customer_id": customer_id,
                "firing": window.firing,
                "goal": index,
                "campaign_id": window.campaign_id,
                "goal_name": goal.goal_name,
                "variation": window.variation,
                "held_out": window.held_out,
                "event_id": first.id,
                "occurred_at": first.occurred_at,
                "revenue": revenue_of(goal, first.attributes),
                "created_at": now,
            }
            for window, first in firsts.items()
        ]
    if not rows_to_write:
        return 0
    result = await connection.execute(_insert_ignore(connection, Conversion), rows_to_write)
    return max(int(getattr(result, "rowcount", 0) or 0), 0)


def _latest_holding(windows: Sequence[_Window], event: StoredEvent) -> _Window | None:
    """The window the event counts for: the latest of those it falls in (but the one whose message
    it fired)."""
    holding = [w for w in windows if w.opened_at <= event.occurred_at < w.closes_at and w.firing != event.id]
    return max(holding, key=lambda w: (w.opened_at, w.firing)) if holding else None


async def _converted(
    connection: AsyncConnection, workspace_id: str, candidates: Sequence[tuple[str, str, int]]
) -> set[tuple[str, int, str]]:
    """(execution, goal, event) of the conversions of the candidates' (execution, user) pairs."""
    executions = sorted({execution_id for execution_id, _, _ in candidates})
    customers = sorted({customer_id for _, customer_id, _ in candidates})
    found: set[tuple[str, int, str]] = set()
    for chunk in _chunks(customers):
        rows = await connection.execute(
            select(Conversion.execution_id, Conversion.goal, Conversion.event_id).where(
                Conversion.workspace_id == workspace_id,
                Conversion.execution_id.in_(executions),
                Conversion.customer_id.in_(chunk),
            )
        )
        found.update((str(e), int(g), str(i)) for e, g, i in rows.all())
    return found


async def _matching(
    connection: AsyncConnection,
    workspace_id: str,
    goals: dict[str, ConversionGoalDetails | None],
    ids: dict[tuple[str, int], set[str]],
    now: datetime,
) -> dict[tuple[str, int], set[str]]:
    """Per (campaign, goal), the candidate event ids (`ids`) whose attributes satisfy the goal's
    condition: all of them without a condition; else those the segmentation compiler's predicate
    selects."""
    matching: dict[tuple[str, int], set[str]] = defaultdict(set)
    dialect = connection.dialect.name
    for (campaign_id, index), event_ids in ids.items():
        goal = (goals[campaign_id].goals or [])[index]  # type: ignore[union-attr]
        if goal.goal_event_attribute is None:
            matching[(campaign_id, index)] = event_ids
            continue
        # A condition the filter language cannot read never converts (see the module's docstring).
        group, _ = goal_filter(goal.goal_event_attribute)
        if group is None:
            continue
        predicate, _ = event_predicate(group, _events, workspace_id=workspace_id, now=now, dialect=dialect)
        if predicate is None:
            continue
        listed = sorted(event_ids)
        for chunk in _chunks(listed):
            rows = await connection.execute(
                select(_events.c.id).where(
                    and_(_events.c.workspace_id == workspace_id, _events.c.id.in_(chunk), predicate)
                )
            )
            matching[(campaign_id, index)].update(rows.scalars().all())
    return matching


def revenue_of(goal: CampaignGoal, attributes: dict[str, Any]) -> float | None:
    """The event's revenue for `goal`: its `revenue_attribute` when that is a finite JSON number."""
    if not goal.revenue_attribute:
        return None
    value = attributes.get(goal.revenue_attribute)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
