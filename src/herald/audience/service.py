"""Ingestion use cases: upsert a customer, record events, apply a transition (all or nothing).

Services never commit (the request's unit of work does) and take plain values. Everything is
validated before anything is written, so a refused request leaves no trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import store
from herald.audience.ingest import (
    CustomerWrite,
    Element,
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


@dataclass
class _Plan:
    """What a transition's elements do, given the users that exist (in element order)."""

    counts: dict[str, int] = field(default_factory=lambda: {"created": 0, "updated": 0, "skipped": 0})
    skipped: list[str] = field(default_factory=list)
    writes: list[CustomerWrite] = field(default_factory=list)
    events: list[EventWrite] = field(default_factory=list)
    made_by_events: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # by customer elements


def _plan(elements: list[Element], existing: set[str]) -> _Plan:
    """Outcomes are decided in element order, so an event that creates a user is seen by a later
    `update_existing_only` element."""
    known = set(existing)
    plan = _Plan()
    for element in elements:
        if isinstance(element, CustomerWrite):
            [outcome] = store.plan_customers([element], known)
            plan.counts[outcome] += 1
            if outcome == "skipped":
                plan.skipped.append(element.customer_id)
            else:
                plan.writes.append(element)
                if outcome == "created":
                    plan.created.append(element.customer_id)
        else:
            if element.customer_id not in known:
                known.add(element.customer_id)
                plan.made_by_events.append(element.customer_id)
            plan.events += element.events
    return plan


async def ingest_transition(
    session: AsyncSession, workspace_id: str, raw: Any, now: datetime
) -> dict[str, Any]:
    elements, problems = parse_transition(raw, now)
    if problems:
        raise ValidationFailed(problems)
    # Every user the batch creates is inserted first, bare (`store.claim_new_users`): a concurrent
    # request that made one first is the one that counts it created, and the outcomes are decided
    # again with it known. Then the customer upserts in order, then every event.
    known = await store.existing_ids(session, workspace_id, (element.customer_id for element in elements))
    plan = _plan(elements, known)
    await store.claim_new_users(session, workspace_id, [*plan.created, *plan.made_by_events], known, now)
    plan = _plan(elements, known)
    await store.upsert_customers(session, workspace_id, plan.writes, now)
    events = plan.events
    ids = await store.insert_events(session, workspace_id, events, now)
    await triggers.enqueue(session, workspace_id, list(zip(ids, events, strict=True)), now)
    await conversions.attribute(await session.connection(), workspace_id, _stored(ids, events), now)
    return {
        "elements": len(elements),
        "customers": {**plan.counts, "skipped_customer_ids": plan.skipped},
        "events": {"accepted": len(events), "users_created": len(plan.made_by_events)},
    }
