"""An execution's start: its row created once, its audience resolved and materialised in chunks.

The audience is the segmentation engine's (the same rules as C7's reachability count): the users
`segmentation_details` selects, minus opt-outs unless the campaign sends to them, minus users
unsubscribed from a PROMOTIONAL e-mail's category, minus users with no address on the channel. The
left-out groups are counted (stats show them by reason); the rest is streamed in customer-id order
and written to `delivery_execution_users` page by page, so neither the worker nor the database holds
the whole audience in memory, and a worker that stops half-way resumes after the last customer id
written. Users in the workspace's global control group (when the campaign takes
part in it) are written HELD_OUT at once; then the campaign control group is fixed among the rest:
the ⌊p·N⌉ users with the smallest rank.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.segmentation.audience import (
    Reach,
    audience_count_query,
    audience_query,
    reach_of,
    segments_for,
    session_dialect,
)
from herald.campaigns.schemas.campaign import CampaignDocument
from herald.db import Database
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.split import control_group_size, in_global_control, rank_of
from herald.ids import object_id
from herald.wake import wake_on_commit
from herald.workspaces.delivery_settings import settings_of
from herald.workspaces.models import Workspace

CHUNK = 1000  # users resolved per keyset page (one read, one write transaction)


class ExecutionStatus:
    RESOLVING = "RESOLVING"
    DISPATCHING = "DISPATCHING"
    DONE = "DONE"
    FAILED = "FAILED"  # the audience could not be resolved (`reason` says why)
    STOPPED = "STOPPED"


@dataclass(frozen=True)
class LiveCampaign:
    """The latest version of a campaign being sent, as the engine reads it at each tick."""

    workspace_id: str
    campaign_id: str  # the public id
    channel: str
    document: CampaignDocument
    components: dict[str, Any]

    @property
    def reach(self) -> Reach:
        return reach_of(self.channel, self.components)


def _segmentation(campaign: LiveCampaign, with_opted_out: bool) -> dict[str, Any]:
    found = campaign.components.get("segmentation_details")
    details = dict(found) if isinstance(found, dict) else {"is_all_user_campaign": True}
    if with_opted_out:
        details["send_campaign_to_opt_out_users"] = True
    return details


async def start_execution(
    database: Database,
    campaign: LiveCampaign,
    now: datetime,
    run: int = 1,
    scheduled_for: datetime | None = None,
    with_run: Callable[[AsyncSession, Execution], Awaitable[None]] | None = None,
) -> Execution:
    """The campaign's execution of `run`, created if there is none yet (one per one-time campaign,
    one per periodic occurrence); `with_run` writes what goes with a new run in its transaction (a
    periodic run's child campaign). The unique index on (workspace, campaign, run) makes a second
    worker racing to start the same run use the first one's."""
    found = await _execution(database, campaign, run)
    if found is not None:
        return found
    try:
        async with database.writer() as session:
            execution = Execution(
                workspace_id=campaign.workspace_id,
                id=object_id(now),
                campaign_id=campaign.campaign_id,
                run=run,
                status=ExecutionStatus.RESOLVING,
                opted_out=0,
                unsubscribed=0,
                no_address=0,
                audience=0,
                dispatched=0,
                created_at=now,
                updated_at=now,
                scheduled_for=scheduled_for,
            )
            session.add(execution)
            await session.flush()
            if with_run is not None:
                await with_run(session, execution)
            await session.commit()
    except IntegrityError:
        pass  # another worker started it first: use theirs
    created = await _execution(database, campaign, run)
    assert created is not None
    return created


async def _execution(database: Database, campaign: LiveCampaign, run: int) -> Execution | None:
    async with database.reader() as session:
        found: Execution | None = await session.scalar(
            select(Execution).where(
                Execution.workspace_id == campaign.workspace_id,
                Execution.campaign_id == campaign.campaign_id,
                Execution.run == run,
            )
        )
        return found


async def _count(session: AsyncSession, campaign: LiveCampaign, now: datetime, **rules: bool) -> int:
    details = _segmentation(campaign, rules.pop("with_opted_out"))
    segments = await segments_for(session, campaign.workspace_id, details)
    query = audience_count_query(
        details,
        campaign.channel,
        campaign.workspace_id,
        now,
        dialect=session_dialect(session),
        segments=segments,
        reach=campaign.reach,
        **rules,
    )
    return int((await session.execute(query)).scalar_one())


async def resolve(database: Database, campaign: LiveCampaign, execution: Execution, now: datetime) -> None:
    """Materialise the rest of the audience and fix the control group; the execution then
    DISPATCHING. Raises ValidationFailed if the filters cannot be evaluated."""
    details = _segmentation(campaign, with_opted_out=False)
    after = execution.resolved_after
    if after is None and execution.audience == 0:
        async with database.reader() as session:
            everyone = await _count(session, campaign, now, with_opted_out=True, subscribed_only=False)
            allowed = await _count(session, campaign, now, with_opted_out=False, subscribed_only=False)
            subscribed = allowed
            if campaign.reach.subscription_category is not None:
                subscribed = await _count(session, campaign, now, with_opted_out=False)
            reachable = await _count(session, campaign, now, with_opted_out=False, reachable_only=True)
        await _update(
            database,
            execution,
            opted_out=everyone - allowed,
            unsubscribed=allowed - subscribed,
            no_address=subscribed - reachable,
        )
    # One query streams the audience in customer-id order (from the resume point); each page is
    # written in a transaction of its own. A query per page would evaluate the filters again from
    # the start of the audience for every page: quadratic in the audience's size.
    async with database.reader() as session:
        segments = await segments_for(session, campaign.workspace_id, details)
        share = await _global_control(session, campaign)
        selected = audience_query(
            details,
            campaign.channel,
            campaign.workspace_id,
            now,
            dialect=session_dialect(session),
            segments=segments,
            reachable_only=True,
            reach=campaign.reach,
        ).subquery()
        query = select(selected.c.customer_id).order_by(selected.c.customer_id)
        if after is not None:
            query = query.where(selected.c.customer_id > after)
        stream = await session.stream_scalars(query.execution_options(yield_per=CHUNK))
        async for page in stream.partitions(CHUNK):
            after = await _write_page(database, campaign, execution, after, list(page), share)
            if after is None:
                return  # another worker is resolving it
            # SQLite's statements run on the event loop's thread (herald.sqlite_inline) and complete
            # without suspending: let the requests of an embedding `herald serve` in between pages.
            await asyncio.sleep(0)
    await _fix_control_group(database, campaign, execution, now)


async def _global_control(session: AsyncSession, campaign: LiveCampaign) -> float | None:
    """The workspace's global control share if this campaign takes part in it."""
    control = campaign.document.control_group_details
    if control is None or not control.is_global_control_group_enabled:
        return None
    workspace = await session.get(Workspace, campaign.workspace_id)
    return settings_of(workspace.delivery if workspace is not None else None).global_control


async def _update(database: Database, execution: Execution, **values: Any) -> None:
    async with database.writer() as session:
        await session.execute(
            update(Execution)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .values(**values)
        )
        await session.commit()


async def _write_page(
    database: Database,
    campaign: LiveCampaign,
    execution: Execution,
    after: str | None,
    ids: list[str],
    global_share: float | None,
) -> str | None:
    """Write one page if nobody else has; the new resume point, or None when someone else did."""
    async with database.writer() as session:
        current = await session.scalar(
            select(Execution.resolved_after)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .with_for_update()
        )
        if current != after:
            return None
        await session.execute(
            insert(ExecutionUser),
            [
                {
                    "workspace_id": execution.workspace_id,
                    "execution_id": execution.id,
                    "customer_id": customer_id,
                    "rank": rank_of(campaign.campaign_id, customer_id),
                    **(
                        {"state": "HELD_OUT", "reason": "GLOBAL_CONTROL"}
                        if in_global_control(execution.workspace_id, customer_id, global_share)
                        else {"state": "PENDING", "reason": None}
                    ),
                }
                for customer_id in ids
            ],
        )
        await session.execute(
            update(Execution)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .values(resolved_after=ids[-1], audience=Execution.audience + len(ids))
        )
        await session.commit()
    return ids[-1]


async def _fix_control_group(
    database: Database, campaign: LiveCampaign, execution: Execution, now: datetime
) -> None:
    control = campaign.document.control_group_details
    percentage = (
        control.campaign_control_group_percentage
        if control is not None and control.is_campaign_control_group_enabled
        else None
    )
    async with database.writer() as session:
        where = (
            ExecutionUser.workspace_id == execution.workspace_id,
            ExecutionUser.execution_id == execution.id,
            ExecutionUser.state == "PENDING",  # not the global control group
        )
        eligible = int(
            await session.scalar(select(func.count()).select_from(ExecutionUser).where(*where)) or 0
        )
        audience = int(
            await session.scalar(select(func.count()).select_from(ExecutionUser).where(*where[:2])) or 0
        )
        size = control_group_size(eligible, percentage)
        threshold = None
        if size > 0:
            threshold = await session.scalar(
                select(ExecutionUser.rank)
                .where(*where)
                .order_by(ExecutionUser.rank)
                .offset(size - 1)
                .limit(1)
            )
        await session.execute(
            update(Execution)
            .where(
                Execution.workspace_id == execution.workspace_id,
                Execution.id == execution.id,
                Execution.status == ExecutionStatus.RESOLVING,
            )
            .values(
                status=ExecutionStatus.DISPATCHING,
                control_threshold=threshold,
                audience=audience,
                updated_at=now,
            )
        )
        # Workers that found the execution still resolving went back to sleep: wake them to share
        # the dispatch.
        await wake_on_commit(session)
        await session.commit()
