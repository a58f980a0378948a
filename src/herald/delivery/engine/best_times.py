"""Each user's best time to send (SEND_IN_BTS), computed from their event history in the audience
store and kept per user (`BestTime`): read when a BTS run claims the user, recomputed when older
than a day or computed in another timezone than the user's now."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import Event
from herald.delivery.engine.models import BestTime
from herald.delivery.engine.send_time import best_hour

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
        for row in (
            await session.scalars(
                select(BestTime).where(
                    BestTime.workspace_id == workspace_id, BestTime.customer_id.in_(list(zones))
                )
            )
        ).all()
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
        found |= await _recompute(session, workspace_id, {c: zones[c] for c in stale}, now)
    return found


async def _recompute(
    session: AsyncSession, workspace_id: str, zones: dict[str, ZoneInfo], now: datetime
) -> dict[str, int | None]:
    moments: dict[str, list[datetime]] = defaultdict(list)
    rows = await session.execute(
        select(Event.customer_id, Event.occurred_at).where(
            Event.workspace_id == workspace_id,
            Event.customer_id.in_(list(zones)),
            Event.occurred_at > now - HISTORY,
            Event.occurred_at <= now,
        )
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
        for customer_id, hour in computed.items()
    ]
    assert session.bind is not None
    insert = postgresql.insert if session.bind.dialect.name == "postgresql" else sqlite.insert
    statement = insert(BestTime).values(values)
    # Two runs claiming the same user at once both compute it: the last one written stands.
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=["workspace_id", "customer_id"],
            set_={
                "hour": statement.excluded.hour,
                "timezone": statement.excluded.timezone,
                "computed_at": statement.excluded.computed_at,
            },
        )
    )
    return computed
