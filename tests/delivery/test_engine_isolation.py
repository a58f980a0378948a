"""A worker tick goes on past what it cannot advance: a workspace whose stored settings the engine
cannot read (here a frequency cap stored as text, as an older version or a hand edit could leave
it) fails its own step, logged and counted, and every other workspace is still sent to."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
from fastapi import FastAPI
from sqlalchemy import update

from herald.campaigns import worker
from herald.clock import FrozenClock
from herald.ops import metrics
from herald.services import Services
from herald.workspaces.models import Workspace
from tests.delivery.builders import push_connector
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import PUSH, publish, status
from tests.factories import Tenant, make_tenant


async def _tenant_with_a_campaign(
    app: FastAPI, client: httpx.AsyncClient, webhook: HttpReceiver
) -> tuple[Tenant, str]:
    tenant = await make_tenant(app, rate_limits=OPEN_LIMITS)
    await push_connector(app, tenant, webhook)
    user = f"{tenant.workspace_id}-user"
    await add_users(
        app, tenant.workspace_id, {"customer_id": user, "push_id": f"tok-{user}", "platform": "ANDROID"}
    )
    return tenant, await publish(client, tenant, PUSH)


async def test_a_workspace_that_cannot_be_advanced_does_not_hold_back_the_others(
    app: FastAPI, client: httpx.AsyncClient, webhook: HttpReceiver, clock: FrozenClock
) -> None:
    services: Services = app.state.herald
    clock.set(datetime(2026, 3, 2, 23, 0, tzinfo=UTC))
    tenants = [await _tenant_with_a_campaign(app, client, webhook) for _ in range(3)]
    (broken, broken_campaign), *healthy = tenants
    async with services.database.writer() as session:
        await session.execute(
            update(Workspace)
            .where(Workspace.id == broken.workspace_id)
            .values(delivery={"frequency-cap-day": "three"})
        )
        await session.commit()
    failed_before = metrics.step_failures()
    ids = sorted(tenant.workspace_id for tenant, _ in tenants)
    await worker.run_tick(services.database, clock.now(), ids, services.settings)
    delivered = sorted(r.json()["recipient"]["customer_id"] for r in webhook.received)
    assert delivered == sorted(f"{tenant.workspace_id}-user" for tenant, _ in healthy)
    for tenant, campaign_id in healthy:
        assert await status(client, tenant, campaign_id) == "SENT"
    assert await status(client, broken, broken_campaign) == "SENDING"
    assert metrics.step_failures() > failed_before
