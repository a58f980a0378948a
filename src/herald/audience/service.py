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
    Element,
    EventBatch,
    parse_customer,
    parse_event,
    parse_transition,
)
from herald.errors import ValidationFailed


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
    counts = {"created": 0, "updated": 0, "skipped": 0}
    skipped: list[str] = []
    accepted = users_created = 0
    # Consecutive elements of one kind are written together; the order between kinds is kept, so an
    # event that creates a user is seen by a later `update_existing_only` customer element.
    for group in _consecutive(elements):
        if isinstance(group[0], CustomerWrite):
            writes = [element for element in group if isinstance(element, CustomerWrite)]
            outcomes = await store.write_customers(session, workspace_id, writes, now)
            for write, outcome in zip(writes, outcomes, strict=True):
                counts[outcome] += 1
                if outcome == "skipped":
                    skipped.append(write.customer_id)
        else:
            batches = [element for element in group if isinstance(element, EventBatch)]
            created = await store.ensure_users(session, workspace_id, (b.customer_id for b in batches), now)
            events = [event for batch in batches for event in batch.events]
            accepted += len(await store.insert_events(session, workspace_id, events, now))
            users_created += len(created)
    return {
        "elements": len(elements),
        "customers": {**counts, "skipped_customer_ids": skipped},
        "events": {"accepted": accepted, "users_created": users_created},
    }


def _consecutive(elements: list[Element]) -> list[list[Element]]:
    groups: list[list[Element]] = []
    for element in elements:
        if groups and type(groups[-1][0]) is type(element):
            groups[-1].append(element)
        else:
            groups.append([element])
    return groups
