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

Side by side (PostgreSQL; SQLite has one writer, so the two never overlap). Ingestion writes events,
then reads windows; opening windows writes windows, then reads events. Under READ COMMITTED two such
transactions at once each read before the other committed, and the conversion was never recorded.
They take turns per user: before its read, a transaction opening windows takes its users'
transaction-scoped advisory locks exclusive, an ingesting one shared (ingestions need not wait for
each other: neither writes what the other reads), so whichever comes second waits for the first's
commit, and its read, a statement after the wait, sees it. A lock stands for a bucket of users
(`BUCKETS` per workspace, `advisory_locks.lock_key`): a transaction over many users (an import batch
of 20,000, an audience chunk) takes at most `BUCKETS` of them, where one per user would exhaust the
server's shared lock table (about 13,000 locks on its defaults); two users of one bucket wait for
each other for nothing, and only for the end of a transaction.

- Only where it can matter: ingestion takes its locks only in a workspace that has attribution
  windows (one none of whose campaigns with goals ever settled a user has none), asked in the
  locking statement itself. A stale "none" does not bring the race back: the transaction that opens
  a workspace's first windows first takes `audience_events` in SHARE mode (`_gate`), which waits
  for every transaction writing events and holds new writers back (every workspace's, once per
  workspace, until it commits). An ingestion that found no window had written its events before
  asking (it reads after writing), so it either committed before the gate was granted, and the
  windows' read of events sees them, or it waited at its write and then found the windows. Windows
  are never deleted: once a workspace has one, every later transaction finds it and takes its turn.
- No deadlock: a transaction takes its conversion locks in one statement, in key order (the locking
  function applied above the sort), and after them waits only for another holder of the same keys:
  ingestion reads windows, writes conversions (in key order: two ingestions of the same conversion
  wait in one order), records its idempotency key (claimed already) and commits; the engine calls
  `open_windows` once per transaction, last (callers collect a transaction's windows: a claim's
  lanes, a batch's firings), writing windows and conversions that no other holder of their keys can
  be writing, then commits rows it had locked already. A holder never waits for the row locks
  others hold (the claim's execution and users, ingestion's users, inbox rows), so no cycle forms
  through these locks. The gate is taken before them, and the event writers it waits for have
  written their users already: they wait only for conversion locks, which it does not hold yet.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Insert, Table, TextClause, and_, bindparam, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.advisory_locks import lock_key
from herald.audience.models import Event
from herald.audience.segmentation import event_predicate, goal_filter
from herald.campaigns import durations
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.goals import CampaignGoal, ConversionGoalDetails
from herald.delivery.engine.models import AttributionWindow, Conversion, Execution
from herald.sql_lists import one_of

DEFAULT_WINDOW_HOURS = 24
BUCKETS = 256  # advisory locks per workspace (see the module's docstring: "Side by side")
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
class Opening:
    """Windows to open: `users` of `execution` (customer id, variation, held-out reason, firing: ''
    but in an EVENT execution) at `at`, for the campaign's `details`."""

    execution: Execution
    details: ConversionGoalDetails
    users: Sequence[tuple[str, str | None, str | None, str]]
    at: datetime


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


async def open_windows(connection: AsyncConnection, openings: Sequence[Opening]) -> None:
    """Open the windows of `openings` (all of one workspace), each once (a window already open stays
    as it was), then attribute events already stored in them. The last statements of the caller's
    transaction, and its only call: it takes the users' turn (see "Side by side")."""
    openings = [opening for opening in openings if opening.users]
    if not openings:
        return
    [workspace_id] = {opening.execution.workspace_id for opening in openings}
    everyone = {customer_id for opening in openings for customer_id, _, _, _ in opening.users}
    await _turn_to_open(connection, workspace_id, everyone)
    for opening in openings:
        execution, at = opening.execution, opening.at
        closes_at = at + window_length(opening.details)
        await connection.execute(
            _insert_ignore(connection, AttributionWindow),
            [
                {
                    "workspace_id": workspace_id,
                    "execution_id": execution.id,
                    "customer_id": customer_id,
                    "firing": firing,
                    "campaign_id": execution.campaign_id,
                    "variation": variation,
                    "held_out": held_out,
                    "opened_at": at,
                    "closes_at": closes_at,
                }
                for customer_id, variation, held_out, firing in opening.users
            ],
        )
        customers = sorted({customer_id for customer_id, _, _, _ in opening.users})
        await catch_up(connection, workspace_id, customers, opening.details, at)


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
    return await _attribute(connection, workspace_id, found, since, seen_before=True)


# --- taking turns (PostgreSQL) ----------------------------------------------------------------


def _keys(workspace_id: str, customer_ids: Iterable[str]) -> list[int]:
    """The advisory lock keys of the users' buckets, in the order they are taken."""
    buckets = {lock_key("conversion", workspace_id, customer_id) % BUCKETS for customer_id in customer_ids}
    return sorted(lock_key("conversion", workspace_id, "bucket", str(bucket)) for bucket in buckets)


def _locking(function: str, *, if_windows: bool) -> TextClause:
    """Take `function` (an advisory lock) of each key, in key order: the sort sits below the call
    (the function is volatile, so PostgreSQL evaluates it above the sort, row by row: verified with
    EXPLAIN VERBOSE and a held key). `if_windows`: only in a workspace with attribution windows; no
    row then means none was taken."""
    windows = (
        f" WHERE EXISTS (SELECT 1 FROM {AttributionWindow.__tablename__} WHERE workspace_id = :workspace_id)"
        if if_windows
        else ""
    )
    return text(f"SELECT {function}(k) FROM unnest(CAST(:keys AS bigint[])) AS k{windows} ORDER BY k")


_SHARED_IF_WINDOWS = _locking("pg_advisory_xact_lock_shared", if_windows=True)
_EXCLUSIVE_IF_WINDOWS = _locking("pg_advisory_xact_lock", if_windows=True)
_EXCLUSIVE = _locking("pg_advisory_xact_lock", if_windows=False)
_GATE = text(f"LOCK TABLE {Event.__tablename__} IN SHARE MODE")


async def _turn_to_attribute(
    connection: AsyncConnection, workspace_id: str, customer_ids: Iterable[str]
) -> None:
    """Ingestion's turn to read the users' windows: their buckets' locks, shared, in a workspace
    that has windows."""
    if connection.dialect.name == "postgresql":
        values = {"keys": _keys(workspace_id, customer_ids), "workspace_id": workspace_id}
        await connection.execute(_SHARED_IF_WINDOWS, values)


async def _turn_to_open(connection: AsyncConnection, workspace_id: str, customer_ids: Iterable[str]) -> None:
    """The turn to open windows for the users and read their events: their buckets' locks,
    exclusive; in a workspace without windows yet, after the gate."""
    if connection.dialect.name != "postgresql":
        return
    values = {"keys": _keys(workspace_id, customer_ids), "workspace_id": workspace_id}
    if (await connection.execute(_EXCLUSIVE_IF_WINDOWS, values)).all():  # a row per lock taken
        return
    await _gate(connection)
    await connection.execute(_EXCLUSIVE, values)


async def _gate(connection: AsyncConnection) -> None:
    """Wait until every transaction writing events has ended, and hold new writers back until this
    one ends: an ingestion that found no window in the workspace (and so took no turn) has then
    committed before this transaction reads events, and one writing later finds this one's windows
    (see "Side by side")."""
    await connection.execute(_GATE)


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
    connection: AsyncConnection, workspace_id: str, events: Sequence[StoredEvent], now: datetime
) -> int:
    """Record the conversions `events` (just stored, in this transaction) make; how many are new.
    Called last in the storing transaction, after the events are written (see "Side by side")."""
    if not events:
        return 0
    await _turn_to_attribute(connection, workspace_id, {event.customer_id for event in events})
    return await _attribute(connection, workspace_id, events, now)


async def _attribute(
    connection: AsyncConnection,
    workspace_id: str,
    events: Sequence[StoredEvent],
    now: datetime,
    *,
    seen_before: bool = False,
) -> int:
    """`attribute`, the caller having taken its turn (`seen_before`: events stored earlier, and
    attributed then to the windows open at the time)."""
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
    # In key order: two ingestions writing the same conversions (holding their turns shared) wait
    # for each other in one order only.
    rows_to_write.sort(key=lambda row: (row["execution_id"], row["customer_id"], row["firing"], row["goal"]))
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
