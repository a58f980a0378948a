"""The engine's hot statements read what they take, however much has piled up: asserted on the
statement's plan, as each engine's planner chooses it (an empty table says nothing about time, but
the plan is what decides how a claim's cost grows with the queue)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import FastAPI
from sqlalchemy import text

from herald.delivery.engine import run


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
