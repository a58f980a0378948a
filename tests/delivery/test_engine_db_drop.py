"""A live worker whose database connections are dropped while its messages are on the wire
(PostgreSQL: `pg_terminate_backend`, as an operator or a failover does): the outcomes it holds in
memory are recorded once the database answers again, its users settled, and nothing goes out
twice. Before, the first statement on a dropped connection failed the dispatch: the windows on
the wire were cut short unrecorded (their rows PENDING, their users CLAIMED) until the lease
passed, and then every one of their messages was sent again."""

from __future__ import annotations

import asyncio
import collections
import dataclasses

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import make_url

from herald.campaigns import worker
from herald.services import Services
from tests.delivery.builders import outbox_rows, push_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import PUSH, publish, stats
from tests.delivery.test_engine_wake import _until
from tests.factories import Tenant

USERS = 60


@pytest.mark.own_database  # every connection of the database is terminated
async def test_outcomes_of_a_live_worker_are_recorded_after_its_connections_drop(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    services: Services = app.state.herald
    database = services.database
    if database.engine.dialect.name != "postgresql":
        pytest.skip("terminates PostgreSQL backends")
    import asyncpg

    # Four requests in flight: two windows of two lanes each on the wire, one more begun ahead.
    settings = dataclasses.replace(services.settings, delivery_concurrency=4)
    await push_connector(app, workspace, webhook)
    users = [
        {"customer_id": f"u{index:03d}", "push_id": f"tok-{index}", "platform": "ANDROID"}
        for index in range(USERS)
    ]
    await add_users(app, workspace.workspace_id, *users)
    campaign_id = await publish(client, workspace, PUSH)
    webhook.hold()
    ticking = asyncio.create_task(
        worker.run_tick(database, services.clock.now(), [workspace.workspace_id], settings)
    )
    url = make_url(str(database.engine.url)).set(drivername="postgresql")
    admin = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        await _until(lambda: len(webhook.received) == 4, "every lane's first request held")
        # Every connection of the worker's database goes, while its messages wait for answers.
        dropped = await admin.fetchval(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()) AS terminated"
        )
        assert dropped > 0
        webhook.release()
        await ticking
        states = dict(
            await admin.fetch(
                "SELECT state, count(*) FROM delivery_execution_users WHERE workspace_id = $1 GROUP BY 1",
                workspace.workspace_id,
            )
        )
    finally:
        webhook.release()
        await admin.close()
        if not ticking.done():
            ticking.cancel()
    # Every message handed over once, its outcome recorded, its user settled: no user CLAIMED
    # until the lease passes, no row PENDING with its answer known.
    ids = collections.Counter(str(request.json()["id"]) for request in webhook.received)
    assert [id_ for id_, count in ids.items() if count > 1] == []
    assert len(ids) == USERS
    assert states == {"SENT": USERS}
    rows = await outbox_rows(app, workspace)
    assert collections.Counter(row.status for row in rows) == {"SENT": USERS}
    [run] = (await stats(client, workspace, campaign_id))["executions"]
    assert (run["sent"], run["pending"]) == (USERS, 0)
