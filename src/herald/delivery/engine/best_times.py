"""Each user's best time to send (SEND_IN_BTS, and INTELLIGENT_DELAY's hour), computed from their
event history in the audience store and kept per user with events (`BestTime`): read when a run
claims the user (or an event fires them), recomputed when older than a day or computed in another
timezone than the user's now."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import cast
from zoneinfo import ZoneInfo

from sqlalchemy import Insert, Table, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import Event
from herald.delivery.engine.models import BestTime
from herald.delivery.engine.send_time import best_hour
from herald.sql_lists import one_of

FRESH = timedelta(days=1)  # recomputed at most daily
HISTORY = timedelta(days=90)  # the events a best time is computed from


async def hours(
    session: AsyncSession, workspace_id: str, zones: dict[str, ZoneInfo], now: datetime
) -> dict[str, int | None]:
    """The best local hour of each user (None: no events), in the zone given for them."""
    if not zones:
        return {}
    stored = {
        row.customer_id: row
        for row in await session.execute(_STORED, {"workspace_id": workspace_id, "ids": list(zones)})
    }
    found: dict[str, int | None] = {}
    stale: list[str] = []
    for customer_id, zone in zones.items():
        row = stored.get(customer_id)
        if row is not None and row.computed_at > now - FRESH and row.timezone == zone.key:
            found[customer_id] = row.hour
        else:
            stale.append(customer_id)
    if stale:
        found |= await _recompute(session, workspace_id, {c: zones[c] for c in stale}, set(stored), now)
    return found


async def _recompute(
    session: AsyncSession, workspace_id: str, zones: dict[str, ZoneInfo], kept: set[str], now: datetime
) -> dict[str, int | None]:
    """The best hours of the users of `zones`, computed and stored. A user with no events and no
    row (`kept`: the users that have one) gets none: there is nothing to keep, reading their (no)
    events again costs what reading a row would, and their first events count at once. Half the
    users of a 100,000-user BTS benchmark have none: their rows were half its writes."""
    moments: dict[str, list[datetime]] = defaultdict(list)
    rows = await session.execute(
        _HISTORY,
        {"workspace_id": workspace_id, "ids": list(zones), "since": now - HISTORY, "now": now},
    )
    for customer_id, occurred_at in rows.all():
        moments[customer_id].append(occurred_at)
    computed = {
        customer_id: best_hour(moments.get(customer_id, []), zone) for customer_id, zone in zones.items()
    }
    values = [
        {
            "workspace_id": workspace_id,
            "customer_id": customer_id,
            "hour": hour,
            "timezone": zones[customer_id].key,
            "computed_at": now,
        }
        # In customer order: two workers upserting overlapping users lock their rows in one order,
        # so neither waits on the other in a cycle (a deadlock on PostgreSQL).
        for customer_id, hour in sorted(computed.items())
        if hour is not None or customer_id in kept
    ]
    if values:
        assert session.bind is not None
        await session.execute(_UPSERT[session.bind.dialect.name], values)
    return computed


# Built once, each list one parameter (`sql_lists`) and the rows written as one executemany: a claim
# of 1,000 users compiled a statement with 1,000 placeholders for each read and one with 5,000 for
# the write, and the server parsed them anew (71 ms a write on PostgreSQL, at 20,000 users).
_STORED = select(BestTime.customer_id, BestTime.hour, BestTime.timezone, BestTime.computed_at).where(
    BestTime.workspace_id == bindparam("workspace_id"), one_of(BestTime.customer_id, "ids")
)
_HISTORY = select(Event.customer_id, Event.occurred_at).where(
    Event.workspace_id == bindparam("workspace_id"),
    one_of(Event.customer_id, "ids"),
    Event.occurred_at > bindparam("since"),
    Event.occurred_at <= bindparam("now"),
)


def _upsert(insert: type[postgresql.Insert] | type[sqlite.Insert]) -> Insert:
    # Two runs claiming the same user at once both compute it: the last one written stands. On the
    # table, not the entity: the ORM's bulk path handles each row in Python (3 s of a 20,000-user
    # send's worker CPU); the Core executemany hands them to the driver.
    statement = insert(cast(Table, BestTime.__table__))
    return statement.on_conflict_do_update(
        index_elements=["workspace_id", "customer_id"],
        set_={
            "hour": statement.excluded.hour,
            "timezone": statement.excluded.timezone,
            "computed_at": statement.excluded.computed_at,
        },
    )


_UPSERT = {"postgresql": _upsert(postgresql.Insert), "sqlite": _upsert(sqlite.Insert)}
