"""What `herald audience import --check` reports: the outcomes the real import would have, unwritten.

The real import learns each user's outcome from its writes (created, updated, or skipped for an
`update_existing_only` line whose user does not exist). A dry run learns it from reads: it looks up
which customer ids of each batch exist and applies `store.plan_customers`, the rule the writes follow,
remembering the users the file itself would create. After the events, it counts the customers the
import would create bare users for: those with events (in the file, or already stored without a user)
that neither exist nor come from the users file.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from herald.audience import store
from herald.audience.ingest import CustomerWrite, EventWrite
from herald.audience.models import Event
from herald.audience.store import Outcome
from herald.db import Database


class DryRun:
    def __init__(self, database: Database, workspace_id: str) -> None:
        self.database = database
        self.workspace_id = workspace_id
        self.created: set[str] = set()  # users the file would create so far
        self.event_customers: set[str] = set()

    async def users(self, batch: Sequence[CustomerWrite]) -> list[Outcome]:
        """The outcome of each line of `batch`, in order, as `store.write_customers` would find it."""
        unseen = [write.customer_id for write in batch if write.customer_id not in self.created]
        async with self.database.reader() as session:
            known = await store.existing_ids(session, self.workspace_id, unseen)
        known |= {write.customer_id for write in batch if write.customer_id in self.created}
        outcomes = store.plan_customers(batch, known)
        self.created.update(
            write.customer_id for write, outcome in zip(batch, outcomes, strict=True) if outcome == "created"
        )
        return outcomes

    def events(self, batch: Sequence[EventWrite]) -> None:
        self.event_customers.update(event.customer_id for event in batch)

    async def users_created_for_events(self) -> int:
        candidates = self.event_customers - self.created
        async with self.database.reader() as session:
            existing = await store.existing_ids(session, self.workspace_id, candidates)
            orphans = select(Event.customer_id).where(store.orphan_events(self.workspace_id)).distinct()
            stored_orphans = set((await session.scalars(orphans)).all())
        return len((candidates - existing) | (stored_orphans - self.created))
