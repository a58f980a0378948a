"""An execution's start: its row created once, its audience resolved and materialised in chunks.

The audience is the segmentation engine's (the same rules as C7's reachability count): the users
`segmentation_details` selects, minus opt-outs unless the campaign sends to them, minus users
unsubscribed from a PROMOTIONAL e-mail's category, minus users with no address on the channel.

`prepare` counts the left-out groups (stats show them by reason) and fixes the campaign control
group before any user is written: the ⌊p·N⌉ users with the smallest rank, found by the database
over the audience query. Every user written after that is dispatchable at once, so a campaign
whose audience can be cut chunk by chunk (`content.streams`) is DISPATCHING from then on, while
`resolve_chunk` writes the rest in customer-id order: one INSERT ... SELECT per chunk, the
database selecting, ranking (`ranking.rank_sql`) and splitting off the workspace's global control
group (written HELD_OUT) without a row passing through Python; neither worker nor database holds
the whole audience in memory, and a worker that stops half-way resumes after the last customer id
written. `resolved_at` records that the whole audience is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, case, func, insert, literal, not_, null, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from herald import planner_statistics
from herald.audience.models import User
from herald.audience.segmentation.audience import (
    Reach,
    audience_count_query,
    audience_counts_query,
    audience_query,
    reach_of,
    segments_for,
    session_dialect,
)
from herald.campaigns.schemas.campaign import CampaignDocument
from herald.db import Database
from herald.delivery.engine import conversions, send_time
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.ranking import in_global_control_sql, rank_sql
from herald.delivery.engine.split import control_group_size
from herald.direct_reads import rows_in
from herald.wake import wake_on_commit
from herald.workspaces.delivery_settings import DeliverySettings, settings_of
from herald.workspaces.models import Workspace

log = logging.getLogger("herald.delivery.engine")

# `Execution.audience` of a streamed execution whose left-out groups are not counted yet (they are
# taken with its second chunk): the stats count only the users written so far until then.
UNCOUNTED = -1
FIRST_CHUNK = 1000  # users of the first chunk written (dispatchable as soon as it commits)
MAX_CHUNK = 50_000  # users written by one statement at most


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
    # The stored version read (row id, revision): what is derived from it alone may be kept by it.
    version: tuple[str, int] | None = None
    published_at: datetime | None = None  # None: published before Herald recorded it

    @property
    def reach(self) -> Reach:
        return reach_of(self.channel, self.components)


def segmentation_of(campaign: LiveCampaign, with_opted_out: bool) -> dict[str, Any]:
    """The campaign's `segmentation_details` as the segmentation engine evaluates them (every user
    when it has none), opted-out users included when `with_opted_out`."""
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
            execution = Execution.starting(
                campaign.workspace_id,
                campaign.campaign_id,
                run,
                ExecutionStatus.RESOLVING,
                now,
                scheduled_for=scheduled_for,
            )
            session.add(execution)
            await session.flush()
            if with_run is not None:
                await with_run(session, execution)
            await session.commit()
    except IntegrityError:
        pass  # another worker started it first: use theirs
    else:
        # Here only: every worker racing to start a run used to log that it started it.
        log.info(
            "campaign %s/%s: run %d%s started (execution %s)",
            campaign.workspace_id,
            campaign.campaign_id,
            run,
            f" for {scheduled_for.isoformat()}" if scheduled_for is not None else "",
            execution.id,
        )
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
    details = segmentation_of(campaign, rules.pop("with_opted_out"))
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


async def _counts(session: AsyncSession, campaign: LiveCampaign, now: datetime) -> tuple[int, int, int, int]:
    """The users the filters select, then those left after opt-outs, unsubscriptions and the
    channel's address in turn: one statement (a publish waits for it before the first send)."""
    details = segmentation_of(campaign, with_opted_out=False)
    segments = await segments_for(session, campaign.workspace_id, details)
    query = audience_counts_query(
        details,
        campaign.channel,
        campaign.workspace_id,
        now,
        dialect=session_dialect(session),
        segments=segments,
        reach=campaign.reach,
    )
    everyone, allowed, subscribed, reachable = (await session.execute(query)).one()
    return int(everyone), int(allowed), int(subscribed), int(reachable)


async def prepare(
    database: Database, campaign: LiveCampaign, execution: Execution, now: datetime, *, streaming: bool
) -> Execution:
    """Count the left-out groups and fix the control group before any user is written, so each
    chunk written after is dispatchable at once; with `streaming` the execution is DISPATCHING from
    here on, while the rest of its audience is written (`resolve_chunk`). Raises ValidationFailed if
    the filters cannot be evaluated."""
    # Without a control group to fix, the counts are for the stats only: a streamed execution
    # takes them with its second chunk (`resolve_chunk`), once its first users are on their way.
    deferred = streaming and _control_percentage(campaign) is None
    counts: tuple[int, int, int, int] | None = None
    threshold: int | None = None
    if not deferred:
        async with database.reader() as session:
            counts = await _counts(session, campaign, now)
            threshold = await _control_threshold(session, campaign, now, counts[3])
    async with database.writer() as session:
        current = await session.scalar(_locked(execution))
        assert current is not None
        if current.resolved_after is None and current.status == ExecutionStatus.RESOLVING:
            _set_counts(current, counts)
            current.control_threshold = threshold
            current.resolved_after = ""  # before every customer id: nothing written yet
            current.updated_at = now
            if streaming:
                current.status = ExecutionStatus.DISPATCHING
                await wake_on_commit(session, execution.workspace_id, new_work=False)  # other workers join
        await session.commit()
    async with database.reader() as session:  # this execution, whichever run it is
        found = await session.get(Execution, (execution.workspace_id, execution.id))
    assert found is not None
    return found


async def count_left_out(
    database: Database, campaign: LiveCampaign, execution: Execution, now: datetime
) -> None:
    """The counts `prepare` left for later (a streamed execution without a control group), taken
    while its first chunk is being sent rather than when the second chunk is written: that waits
    for the first chunk's messages, which a slow receiver makes seconds, and a STOP meanwhile
    would leave the execution with the first chunk as its audience for good."""
    async with database.reader() as session:
        current = await session.get(Execution, (execution.workspace_id, execution.id))
        if current is None or current.audience != UNCOUNTED:
            return
        counts = await _counts(session, campaign, now)
    async with database.writer() as session:
        current = await session.scalar(_locked(execution))
        if current is not None and current.audience == UNCOUNTED:
            _set_counts(current, counts)
            await session.commit()


def _set_counts(execution: Execution, counts: tuple[int, int, int, int] | None) -> None:
    """The left-out groups and the audience on the execution (None: not counted yet)."""
    if counts is None:
        execution.audience = UNCOUNTED
        return
    everyone, allowed, subscribed, reachable = counts
    execution.opted_out = everyone - allowed
    execution.unsubscribed = allowed - subscribed
    execution.no_address = subscribed - reachable
    # The users still to be written count as pending in the stats until they are.
    execution.audience = reachable


def _control_percentage(campaign: LiveCampaign) -> float | None:
    control = campaign.document.control_group_details
    if control is None or not control.is_campaign_control_group_enabled:
        return None
    return control.campaign_control_group_percentage or None


async def _control_threshold(
    session: AsyncSession, campaign: LiveCampaign, now: datetime, reachable: int
) -> int | None:
    """The rank of the last user of the campaign control group (None: no control group): the
    ⌊p·N⌉ smallest ranks among the users the global control group leaves, found by the database
    over the audience query before anything is written."""
    percentage = _control_percentage(campaign)
    if not percentage or reachable == 0:
        return None
    dialect = session_dialect(session)
    share = await global_control_share(session, campaign)
    selected = await _selected(session, campaign, now)
    customer_id = selected.selected_columns[0]
    held = in_global_control_sql(dialect, campaign.workspace_id, customer_id, share)
    eligible = reachable
    if held is not None:
        selected = selected.where(not_(held))
        eligible = int(
            (await session.execute(select(func.count()).select_from(selected.subquery()))).scalar_one()
        )
    size = control_group_size(eligible, percentage)
    if size == 0:
        return None
    rank = rank_sql(dialect, campaign.campaign_id, customer_id)
    found = await session.scalar(selected.with_only_columns(rank).order_by(rank).offset(size - 1).limit(1))
    return int(found) if found is not None else None


async def _selected(session: AsyncSession, campaign: LiveCampaign, now: datetime) -> Select[tuple[str]]:
    """The audience to materialise (reachable users), as the segmentation engine selects it."""
    details = segmentation_of(campaign, with_opted_out=False)
    segments = await segments_for(session, campaign.workspace_id, details)
    return audience_query(
        details,
        campaign.channel,
        campaign.workspace_id,
        now,
        dialect=session_dialect(session),
        segments=segments,
        reachable_only=True,
        reach=campaign.reach,
    )


def next_chunk_size(size: int) -> int:
    """Users written by the chunk after one of `size`: the first chunk is small, so the first users
    are dispatchable within milliseconds; then they grow (each chunk is one statement over the
    audience query, seeking past the last customer id written), capped so a chunk holds SQLite's
    write lock briefly."""
    return min(MAX_CHUNK, size * 4)


async def resolve_chunk(
    database: Database, campaign: LiveCampaign, execution: Execution, now: datetime, size: int = FIRST_CHUNK
) -> bool | None:
    """Write the next chunk of the audience (one INSERT ... SELECT: the database selects, ranks and
    splits off the global control group; no user row passes through Python). True when the whole
    audience is written (the execution records when); False when there is more; None when another
    worker is writing it or the execution is no longer running. Raises ValidationFailed if the
    filters cannot be evaluated any more."""
    async with database.writer() as session:
        current = await session.scalar(_locked(execution))
        if current is None or current.resolved_at is not None:
            return True if current is not None else None
        if current.status not in (ExecutionStatus.RESOLVING, ExecutionStatus.DISPATCHING):
            return None  # stopped, paused or failed: resumed by a later tick
        after = current.resolved_after
        assert after is not None, "prepare() first"
        if current.audience == UNCOUNTED and after != "":  # the first chunk is written (`prepare`)
            _set_counts(current, await _counts(session, campaign, now))
        dialect = session_dialect(session)
        selected = await _selected(session, campaign, now)
        customer_id = selected.selected_columns[0]
        rank = rank_sql(dialect, campaign.campaign_id, customer_id)
        share = await global_control_share(session, campaign)
        if send_time.per_user(campaign.document.scheduling_details):
            # Each user has a moment of their own: the claim holds them out at it, when their
            # message would have gone (`controls.decide`), and their conversions count from there.
            share = None
        held = in_global_control_sql(dialect, campaign.workspace_id, customer_id, share)
        state: ColumnElement[Any] = literal("PENDING")
        reason: ColumnElement[Any] = null()
        if held is not None:
            state = case((held, literal("HELD_OUT")), else_=literal("PENDING"))
            reason = case((held, literal("GLOBAL_CONTROL")), else_=null())
        chunk = (
            selected.with_only_columns(
                literal(execution.workspace_id), literal(execution.id), customer_id, rank, state, reason
            )
            .where(customer_id > after)
            .order_by(customer_id)
            .limit(size)
        )
        table = cast(Table, ExecutionUser.__table__)
        # Written in rank order: the (workspace, state, execution, rank) index then takes the chunk's rows in
        # one ordered pass instead of one random descent each (on a large audience, most of a
        # chunk's time).
        ranked = chunk.subquery()
        result = await session.execute(
            insert(table).from_select(
                ["workspace_id", "execution_id", "customer_id", "rank", "state", "reason"],
                select(*ranked.c).order_by(ranked.c[3]),
            )
        )
        inserted = int(getattr(result, "rowcount", 0) or 0)
        if inserted < size:  # the audience is exhausted: the execution holds all of it
            if current.audience == UNCOUNTED:
                _set_counts(current, await _counts(session, campaign, now))
            current.audience = int(
                await session.scalar(
                    select(func.count()).select_from(ExecutionUser).where(*_users_of(execution))
                )
                or 0
            )
            current.resolved_at = now
            if current.status == ExecutionStatus.RESOLVING:
                current.status = ExecutionStatus.DISPATCHING
            # Workers that found it resolving join its dispatch.
            await wake_on_commit(session, execution.workspace_id, new_work=False)
        if inserted:
            # Claims and updates read these from the first chunk on (see `planner_statistics`).
            await planner_statistics.analyze_if_unknown(
                session, {ExecutionUser.__tablename__: FIRST_CHUNK, User.__tablename__: 0}
            )
            last = await session.scalar(
                select(func.max(ExecutionUser.customer_id)).where(*_users_of(execution))
            )
            goals = conversions.goals_of(campaign.components)
            if goals is not None and held is not None:
                # The chunk's global control users: their conversions count from now, when they
                # were held out (the campaign control group's windows open when they are claimed).
                held_ids = await session.scalars(
                    select(ExecutionUser.customer_id).where(
                        *_users_of(execution),
                        ExecutionUser.customer_id > after,
                        ExecutionUser.state == "HELD_OUT",
                        ExecutionUser.reason == "GLOBAL_CONTROL",
                    )
                )
                users = [(customer, None, "GLOBAL_CONTROL", "") for customer in held_ids]
                # Last in the transaction (see `conversions.open_windows`).
                opening = conversions.Opening(execution, goals, users, now)
                await conversions.open_windows(await session.connection(), [opening])
            current.resolved_after = last
        current.updated_at = now
        await session.commit()
        return inserted < size


async def resolve(database: Database, campaign: LiveCampaign, execution: Execution, now: datetime) -> bool:
    """Write the whole remaining audience, chunk after chunk (from the resume point); True when it
    is written, False when another worker is writing it or the execution stopped."""
    size = FIRST_CHUNK
    while True:
        done = await resolve_chunk(database, campaign, execution, now, size)
        if done is not False:
            return bool(done)
        size = next_chunk_size(size)
        # SQLite's statements run on the event loop's thread (herald.sqlite_inline) and complete
        # without suspending: let the requests of an embedding `herald serve` in between chunks.
        await asyncio.sleep(0)


def _users_of(execution: Execution) -> tuple[ColumnElement[bool], ...]:
    return (ExecutionUser.workspace_id == execution.workspace_id, ExecutionUser.execution_id == execution.id)


def _locked(execution: Execution) -> Select[tuple[Execution]]:
    return (
        select(Execution)
        .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
        .with_for_update()
    )


# A workspace's delivery settings, read on the driver: a dispatch reads them again for each batch
# it claims (`controls.load`), where loading the workspace's entity cost more than the read.
_SETTINGS = select(Workspace.delivery).where(Workspace.id == bindparam("workspace_id"))


async def workspace_settings(session: AsyncSession, workspace_id: str) -> DeliverySettings:
    """The delivery settings of the workspace `workspace_id` (the defaults if it has none)."""
    found = await rows_in(await session.connection(), _SETTINGS, {"workspace_id": workspace_id})
    return settings_of(found[0][0] if found else None)


def takes_part_in_global_control(campaign: LiveCampaign) -> bool:
    """Whether the campaign takes part in its workspace's global control group."""
    control = campaign.document.control_group_details
    return control is not None and bool(control.is_global_control_group_enabled)


async def global_control_share(session: AsyncSession, campaign: LiveCampaign) -> float | None:
    """The workspace's global control share if this campaign takes part in it."""
    if not takes_part_in_global_control(campaign):
        return None
    return (await workspace_settings(session, campaign.workspace_id)).global_control
