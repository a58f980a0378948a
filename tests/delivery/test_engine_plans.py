"""The engine's hot statements read what they take, however much has piled up: asserted on the
statement's plan, as each engine's planner chooses it (an empty table says nothing about time, but
the plan is what decides how a statement's cost grows with the queue or with each user's history)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.delivery import outbox
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


async def test_a_windows_outbox_rows_are_settled_by_their_ids_however_stale_the_statistics(
    app: FastAPI,
) -> None:
    # A workspace's first campaign fills the outbox faster than the statistics follow: analysed
    # while the outbox held a few rows of many workspaces, the planner priced the workspace's
    # rows at one and read all of them for each id of the window (a second per window of 1,600
    # rows, growing with each window). The window's rows are read through the key by their ids,
    # and no other row is (the generic plan: the engine's pool plans each statement once).
    database = app.state.herald.database
    if database.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's planner reads no statistics")
    columns = "workspace_id, id, status, is_test, channel, locale, variation, recipient, summary, created_at, updated_at"
    row = "'PENDING', false, 'PUSH', 'default', 'A', 'token', '{}', now(), now()"
    window = [f"w{index:023d}" for index in range(400)]
    settle = outbox._SETTLE_MANY.compile(
        dialect=database.engine.dialect, column_keys=["status", "updated_at"]
    )
    async with database.engine.connect() as connection:
        await connection.exec_driver_sql(
            f"INSERT INTO delivery_outbox ({columns}) SELECT 'other' || n, 'o' || lpad(n::text, 23, '0'), {row}"
            " FROM generate_series(1, 50) AS n"
        )
        await connection.exec_driver_sql("ANALYZE delivery_outbox")
        await connection.exec_driver_sql(
            f"INSERT INTO delivery_outbox ({columns}) SELECT 'busy', 'w' || lpad(n::text, 23, '0'), {row}"
            " FROM generate_series(0, 3999) AS n"
        )
        await connection.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        await connection.exec_driver_sql(f"PREPARE settle AS {settle}")
        ids = "ARRAY[" + ", ".join(f"'{id_}'" for id_ in window) + "]::varchar[]"
        rows = await connection.exec_driver_sql(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE settle('SENT', now(), {ids})"
        )
        plan = rows.scalar_one()[0]["Plan"]
        await connection.exec_driver_sql("DEALLOCATE settle")  # a connection's, not the transaction's
        await connection.rollback()

    def steps(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(step for child in node.get("Plans", []) for step in steps(child))]

    read = [
        step
        for step in steps(plan)
        if step.get("Relation Name") == "delivery_outbox" and step["Node Type"] != "ModifyTable"
    ]
    assert [step.get("Index Name") for step in read] == ["pk_delivery_outbox"], plan
    assert sum(step["Actual Rows"] * step["Actual Loops"] for step in read) == len(window), plan
    removed = sum(
        step.get("Rows Removed by Filter", 0) + step.get("Rows Removed by Join Filter", 0)
        for step in steps(plan)
    )
    assert removed == 0, plan
