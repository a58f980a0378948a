"""The engine's hot statements read what they take, however much has piled up: asserted on the
statement's plan, as each engine's planner chooses it (an empty table says nothing about time, but
the plan is what decides how a statement's cost grows with the queue or with each user's history)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event, text

from herald.delivery.engine import run
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import publish, tick
from tests.delivery.test_engine_triggers import EVENT, ready, send_event, titles
from tests.factories import Tenant


async def test_a_triggered_campaigns_claim_walks_its_pending_firings_in_order(app: FastAPI) -> None:
    # The oldest firings first, read from the partial index of PENDING firings: no sort of every
    # firing waiting (a claim that grew with the queue made a worker that fell behind fall further).
    never_claimed = run._CLAIMABLE_IN_EVENT_ORDER[2].limit(200)
    values = {"workspace_id": "w", "execution_id": "e", "now": datetime(2026, 1, 1, tzinfo=UTC)}
    database = app.state.herald.database
    async with database.engine.connect() as connection:
        compiled = never_claimed.params(values).compile(
            dialect=connection.dialect, compile_kwargs={"literal_binds": True}
        )
        if connection.dialect.name == "postgresql":
            await connection.execute(text("SET LOCAL enable_seqscan = off"))
            plan = "\n".join(row[0] for row in await connection.execute(text(f"EXPLAIN {compiled}")))
            assert "Sort" not in plan, plan
        else:
            rows = await connection.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))
            plan = "\n".join(str(row[-1]) for row in rows)
            assert "TEMP B-TREE" not in plan, plan
    assert "ix_delivery_execution_users_ws_execution_pending_firing" in plan, plan


async def test_sqlite_reads_a_batchs_events_by_their_key_when_matching_triggers(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    # Without statistics SQLite read them through the (action, customer) index: every event of
    # the batch's users with the action, more with each event they send.
    database = app.state.herald.database
    if database.engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL's statistics choose the plan there")
    await ready(app, workspace, webhook, "ana")
    await publish(client, workspace, EVENT)
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "fired" in statement and "audience_events" in statement:
            seen.append((statement, parameters))

    event.listen(database.engine.sync_engine, "before_cursor_execute", record)
    try:
        await send_event(client, workspace, "ana", "added_to_cart", product="Boots")
        await tick(app, workspace)
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", record)
    assert titles(webhook) == [("ana", "Still want Boots?")]
    assert seen, "the batch was matched by another statement"
    statement, parameters = seen[0]
    async with database.engine.connect() as connection:
        raw = await connection.get_raw_connection()
        cursor = raw.driver_connection.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    # The batch's events are `fired` (or the table itself, read into the materialised `fired`);
    # `ex0` is the filter's own probe of the user's past actions.
    events_read = [
        line for line in plan.splitlines() if line.startswith(("SEARCH fired", "SEARCH audience_events"))
    ]
    assert events_read, plan
    assert all("(workspace_id=? AND id=?)" in line for line in events_read), plan
