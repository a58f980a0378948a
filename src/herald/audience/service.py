"""Ingestion use cases: upsert a customer, record events, apply a transition (all or nothing).

Services never commit (the request's unit of work does) and take plain values. Everything is
validated before anything is written, so a refused request leaves no trace.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import store
from herald.audience.ingest import (
    CustomerWrite,
    EventWrite,
    parse_customer,
    parse_event,
    parse_transition,
)
from herald.delivery.engine import conversions, triggers
from herald.errors import ValidationFailed


def _stored(ids: list[str], events: list[EventWrite]) -> list[conversions.StoredEvent]:
    """Stored events as conversion attribution reads them (sends of campaigns with goals)."""
    return [
        conversions.StoredEvent(event_id, e.customer_id, e.action, e.attributes, e.occurred_at)
        for event_id, e in zip(ids, events, strict=True)
    ]


async def ingest_customer(
    session: AsyncSession, workspace_id: str, raw: Any, now: datetime
) -> dict[str, Any]:
    write, problems = parse_customer(raw)
    if write is None:
        raise ValidationFailed(problems)
    [outcome] = await store.write_customers(session, workspace_id, [write], now)
    return {"customer_id": write.customer_id, "result": outcome}


async def ingest_event(session: AsyncSession, workspace_id: str, raw: Any, now: datetime) -> dict[str, Any]:
    batch, problems = parse_event(raw, now)
    if batch is None:
        raise ValidationFailed(problems)
    created = await store.ensure_users(session, workspace_id, [batch.customer_id], now)
    ids = await store.insert_events(session, workspace_id, batch.events, now)
    # Live events fire event-triggered campaigns (an import of past events does not).
    await triggers.enqueue(session, workspace_id, list(zip(ids, batch.events, strict=True)), now)
    await conversions.attribute(await session.connection(), workspace_id, _stored(ids, batch.events), now)
    return {
        "customer_id": batch.customer_id,
        "accepted": len(ids),
        "event_ids": ids,
        "user_created": bool(created),
    }


async def ingest_transition(
    session: AsyncSession, workspace_id: str, raw: Any, now: datetime
) -> dict[str, Any]:
    elements, problems = parse_transition(raw, now)
    if problems:
        raise ValidationFailed(problems)
    # Outcomes are decided in element order against the users that exist, so an event that creates a
    # user is seen by a later `update_existing_only` element. The writes then go out set-based: bare
    # users for events, customer upserts in order (merging onto a bare user gives the same row as
    # creating it), then every event.
    known = await store.existing_ids(session, workspace_id, (element.customer_id for element in elements))
    counts = {"created": 0, "updated": 0, "skipped": 0}
    skipped: list[str] = []
    writes: list[CustomerWrite] = []
    events: list[EventWrite] = []
    made_by_events: list[str] = []
    for element in elements:
        if isinstance(element, CustomerWrite):
            [outcome] = store.plan_customers([element], known)
            counts[outcome] += 1
            if outcome == "skipped":
                skipped.append(element.customer_id)
            else:
                writes.append(element)
        else:
            if element.customer_id not in known:
                known.add(element.customer_id)
                made_by_events.append(element.customer_id)
            events += element.events
    made_by_events = await store.insert_bare_users(session, workspace_id, made_by_events, now)
    await store.upsert_customers(session, workspace_id, writes, now)
    ids = await store.insert_events(session, workspace_id, events, now)
    await triggers.enqueue(session, workspace_id, list(zip(ids, events, strict=True)), now)
    await conversions.attribute(await session.connection(), workspace_id, _stored(ids, events), now)
    return {
        "elements": len(elements),
        "customers": {**counts, "skipped_customer_ids": skipped},
        "events": {"accepted": len(events), "users_created": len(made_by_events)},
    }
