"""The engine's hot statements read what they take, however much has piled up: asserted on the
statement's plan, as each engine's planner chooses it (an empty table says nothing about time, but
the plan is what decides how a statement's cost grows with the queue or with each user's history)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from herald.delivery.engine import run
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import publish, tick
from tests.delivery.test_engine_triggers import EVENT, ready, send_event, titles
from tests.factories import Tenant
from tests.sql_probes import plan_of, recorded_statements


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
        plan = await plan_of(connection, str(compiled))
    assert "Sort" not in plan, plan  # PostgreSQL
    assert "TEMP B-TREE" not in plan, plan  # SQLite
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
    with recorded_statements(app) as statements:
        await send_event(client, workspace, "ana", "added_to_cart", product="Boots")
        await tick(app, workspace)
    assert titles(webhook) == [("ana", "Still want Boots?")]
    matching = [(s, p) for s, p in statements if "fired" in s and "audience_events" in s]
    assert matching, "the batch was matched by another statement"
    async with database.engine.connect() as connection:
        plan = await plan_of(connection, *matching[0])
    # The batch's events are `fired` (or the table itself, read into the materialised `fired`);
    # `ex0` is the filter's own probe of the user's past actions.
    events_read = [
        line for line in plan.splitlines() if line.startswith(("SEARCH fired", "SEARCH audience_events"))
    ]
    assert events_read, plan
    assert all("(workspace_id=? AND id=?)" in line for line in events_read), plan
