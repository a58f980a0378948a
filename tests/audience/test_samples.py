"""The demo workspace's sample audience."""

from __future__ import annotations

from datetime import timedelta

from fastapi import FastAPI
from sqlalchemy import func, select

from herald.audience import segments
from herald.audience.models import Event, User
from herald.audience.samples import USERS, seed_demo_audience
from tests.factories import make_tenant


async def test_sample_audience_has_users_events_and_segments(app: FastAPI) -> None:
    tenant = await make_tenant(app)
    services = app.state.herald
    now = services.clock.now()
    async with services.database.writer() as session:
        await seed_demo_audience(session, tenant.workspace_id, now)
        await session.commit()
    async with services.database.reader() as session:
        users = await session.scalar(
            select(func.count()).select_from(User).where(User.workspace_id == tenant.workspace_id)
        )
        first_event, last_event, events = (
            await session.execute(
                select(func.min(Event.occurred_at), func.max(Event.occurred_at), func.count()).where(
                    Event.workspace_id == tenant.workspace_id
                )
            )
        ).one()
        listed = await segments.list_segments(session, tenant.workspace_id)
        user = await session.get(User, (tenant.workspace_id, "demo-user-001"))
    assert users == USERS
    assert events >= 2 * USERS
    assert now - first_event < timedelta(days=31)
    assert last_event <= now
    assert {(s.name, s.kind) for s in listed} == {
        ("vip_customers", "static"),
        ("newsletter_readers", "filter"),
    }
    assert user is not None
    assert user.email
    assert user.first_name
    assert user.timezone
    assert {"city", "plan", "ltv", "signed_up"} <= set(user.attributes)
