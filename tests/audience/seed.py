"""Audience rows written straight into the tables (the tests of segmentation do not go through
ingestion), and the queries the tests run on them."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime

from fastapi import FastAPI
from sqlalchemy import insert

from herald.audience.models import STANDARD_ATTRIBUTES, Event, Segment, SegmentMember, User
from herald.audience.segmentation import compile_filter_group, count_audience, load_segments
from herald.audience.segmentation.audience import Segmentation
from herald.audience.segmentation.reference import RefEvent, RefSegment, RefUser
from herald.campaigns.schemas.filters import FilterGroup
from herald.problems import Problem
from herald.services import Services
from herald.workspaces.models import Workspace

_FLAGS = ("email_opt_out", "push_opt_out", "sms_opt_out")


def services(app: FastAPI) -> Services:
    result: Services = app.state.herald
    return result


async def seed(
    app: FastAPI,
    users: Sequence[RefUser],
    events: Sequence[RefEvent] = (),
    segments: Sequence[RefSegment] = (),
    *,
    workspace_id: str | None = None,
) -> str:
    """These users, events and segments in a new workspace (or in `workspace_id`); returns its id."""
    herald = services(app)
    now = herald.clock.now()
    async with herald.database.writer() as session:
        if workspace_id is None:
            workspace_id = f"seg{secrets.token_hex(6)}"
            session.add(
                Workspace(id=workspace_id, name="segmentation", features={}, rate_limits={}, created_at=now)
            )
            await session.flush()
        if users:
            await session.execute(
                insert(User),
                [
                    {
                        "workspace_id": workspace_id,
                        "customer_id": user.customer_id,
                        **{
                            name: user.columns.get(name) for name in STANDARD_ATTRIBUTES if name not in _FLAGS
                        },
                        **{name: bool(user.columns.get(name, False)) for name in _FLAGS},
                        "attributes": dict(user.attributes),
                        "created_at": now,
                        "updated_at": now,
                    }
                    for user in users
                ],
            )
        if events:
            await session.execute(
                insert(Event),
                [
                    {
                        "workspace_id": workspace_id,
                        "id": f"{index:024x}",
                        "customer_id": event.customer_id,
                        "action": event.action,
                        "attributes": dict(event.attributes),
                        "occurred_at": now,
                        "received_at": now,
                    }
                    for index, event in enumerate(events)
                ],
            )
        for segment in segments:
            definition = segment.definition
            session.add(
                Segment(
                    workspace_id=workspace_id,
                    id=definition.id,
                    name=definition.name,
                    kind=definition.kind,
                    filters=None
                    if definition.filters is None
                    else definition.filters.model_dump(mode="json"),
                    created_at=now,
                )
            )
            await session.flush()
            if segment.members:
                await session.execute(
                    insert(SegmentMember),
                    [
                        {"workspace_id": workspace_id, "segment_id": definition.id, "customer_id": member}
                        for member in sorted(segment.members)
                    ],
                )
        await session.commit()
    return workspace_id


async def matching(
    app: FastAPI, workspace_id: str, group: FilterGroup, now: datetime, customers: list[str] | None = None
) -> tuple[set[str] | None, list[Problem]]:
    """The customer ids the compiled group selects (or its problems); among `customers` if given."""
    async with services(app).database.reader() as session:
        segments = await load_segments(session, workspace_id, [group])
        dialect = session.get_bind().dialect.name
        query, problems = compile_filter_group(
            group, workspace_id=workspace_id, now=now, dialect=dialect, segments=segments, customers=customers
        )
        if query is None:
            return None, problems
        return set((await session.scalars(query)).all()), []


async def audience_count(
    app: FastAPI, workspace_id: str, channel: str, segmentation: Segmentation, now: datetime, **kwargs: bool
) -> int:
    async with services(app).database.reader() as session:
        return await count_audience(session, workspace_id, channel, segmentation, now, **kwargs)
