"""Outbox rows of messages whose next attempt will never come, settled FAILED with why.

A message that failed transiently stays PENDING with its `next_attempt_at` (`outbox.record_retry`).
When its execution ends before that moment (a STOP, the campaign's expiry, a periodic campaign
PAUSED), nobody will attempt it again: left PENDING, the row would say "outcome unknown" for ever
and `herald_outbox_pending` would count it for ever. Only rows waiting for a retry are settled: a
row whose attempt has begun (its `next_attempt_at` cleared) may be on the wire, and a user CLAIMED
is in a live worker's hands (it finds the row settled and attempts nothing), so both are left as
they are. The users' own states are not touched: the stats count them as the stopped execution's
`unsent`. Once a CLAIMED user's lease has passed, its worker is dead (a live one renews its claims):
its messages on the wire are settled FAILED, the outcome unknown (`settle_orphans`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Select, String, Table, bindparam, case, exists, func, literal, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, Channel, Platform
from herald.db import Database
from herald.delivery.engine import periodic
from herald.delivery.engine.models import OF_ITS_EXECUTION, Execution, ExecutionUser
from herald.delivery.engine.pause import PAUSED
from herald.delivery.engine.resolve import ExecutionStatus
from herald.delivery.engine.run import delivery_id
from herald.delivery.models import WAITING_RETRY, OutboxEntry
from herald.delivery.outbox import OutboxStatus

# Why the next attempt never comes, by the status the campaign ended its execution with.
WHY = {
    CampaignStatus.STOPPED.value: "The campaign was stopped before the next attempt",
    CampaignStatus.SENT.value: "The campaign expired before the next attempt",
    CampaignStatus.PAUSED.value: "The campaign was paused before the next attempt",
}


# What an execution is while it may still send (`end_executions` ends those).
LIVE = (ExecutionStatus.RESOLVING, ExecutionStatus.DISPATCHING, PAUSED)


async def end_executions(session: AsyncSession, workspace_id: str, ids: list[str], now: datetime) -> None:
    """End the executions `ids` STOPPED (their pending users stay unsent): a periodic run's child
    campaign with them, their outbox rows waiting for a retry FAILED with why (`settle_stopped`).
    The caller commits."""
    if not ids:
        return
    await session.execute(
        update(Execution)
        .where(Execution.workspace_id == workspace_id, Execution.id.in_(ids))
        .values(status=ExecutionStatus.STOPPED, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    await periodic.settle_children(session, workspace_id, ids)
    await settle_stopped(session, workspace_id, ids, now)


async def end_runs_of(session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime) -> None:
    """A periodic campaign PAUSED: its run in flight ends now, in the PAUSE's transaction (the
    campaign's row is locked by it). Left to the workers' next tick, a RESUME committed before that
    tick found the run still DISPATCHING, and its unsent users went out after all."""
    live = select(Execution.id).where(
        Execution.workspace_id == workspace_id,
        Execution.campaign_id == campaign_id,
        Execution.status.in_(LIVE),
    )
    await end_executions(session, workspace_id, list((await session.scalars(live)).all()), now)


async def settle_stopped(session: AsyncSession, workspace_id: str, ids: list[str], now: datetime) -> None:
    """The outbox rows of the executions `ids` (just STOPPED) waiting for a retry that will never
    come, FAILED with the reason their campaign gives (stopped, expired, paused). The caller
    commits."""
    runs = (
        await session.execute(
            select(Execution.id, Execution.campaign_id, Execution.child_campaign_id).where(
                Execution.workspace_id == workspace_id, Execution.id.in_(ids)
            )
        )
    ).all()
    latest = select(Campaign.campaign_id, Campaign.status).where(
        Campaign.workspace_id == workspace_id,
        Campaign.is_latest,
        Campaign.campaign_id.in_({campaign_id for _, campaign_id, _ in runs}),
    )
    statuses = dict((await session.execute(latest)).tuples().all())
    # By campaign: its executions end together, and the rows of a periodic campaign's runs may
    # carry the parent's id, so a user CLAIMED in any of them keeps its rows.
    of_campaign: dict[str, tuple[set[str], list[str]]] = {}
    for execution_id, campaign_id, child_id in runs:
        campaign_ids, execution_ids = of_campaign.setdefault(campaign_id, ({campaign_id}, []))
        execution_ids.append(execution_id)
        if child_id is not None:
            campaign_ids.add(child_id)
    for campaign_id, (campaign_ids, execution_ids) in of_campaign.items():
        why = WHY.get(statuses.get(campaign_id, ""), WHY[CampaignStatus.STOPPED.value])
        await _fail_waiting(session, workspace_id, sorted(campaign_ids), execution_ids, why, now)


async def _fail_waiting(
    session: AsyncSession,
    workspace_id: str,
    campaign_ids: list[str],
    execution_ids: list[str],
    why: str,
    now: datetime,
) -> None:
    """The rows of `campaign_ids` (a periodic run's are its child's) waiting for a retry, FAILED
    with `why` and the last attempt's reason; those of users CLAIMED in `execution_ids` (the
    executions that just ended) excepted. The caller commits."""
    claimed = exists(
        select(ExecutionUser.customer_id).where(
            ExecutionUser.workspace_id == workspace_id,
            ExecutionUser.execution_id.in_(execution_ids),
            ExecutionUser.customer_id == OutboxEntry.customer_id,
            ExecutionUser.state == "CLAIMED",
        )
    )
    last = literal(f"{why}; the last attempt: ", String) + OutboxEntry.failure_reason
    # A message never handed over (`engine.halting`) keeps its own reason: there was no attempt.
    reason = case(
        (OutboxEntry.attempts == 0, OutboxEntry.failure_reason), else_=func.coalesce(last, f"{why}.")
    )
    await session.execute(
        update(OutboxEntry)
        .where(
            OutboxEntry.workspace_id == workspace_id,
            OutboxEntry.campaign_id.in_(campaign_ids),
            text(WAITING_RETRY),  # word for word: the partial index of these rows (migration 0027)
            ~claimed,
        )
        .values(
            status=OutboxStatus.FAILED.value,
            failure_reason=reason,
            next_attempt_at=None,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )


# Why a dead worker's message of an ended execution is settled FAILED (`settle_orphans`).
ORPHANED = (
    "Outcome unknown: the worker sending it stopped before its answer was recorded, and the "
    "campaign's run ended before it could be sent again"
)


def _orphans(workspace_id: str, cutoff: datetime) -> Select[tuple[str, str, str, int, bool]]:
    """Users of the workspace's ended (STOPPED) runs still CLAIMED since before `cutoff` (a live
    worker renews its claims long before, so their worker died with their messages in hand), with
    what their messages' delivery ids are made of: the run, the user, its firing and rank, and
    whether the run's ids are in send order."""
    return (
        select(
            ExecutionUser.execution_id,
            ExecutionUser.customer_id,
            ExecutionUser.firing,
            ExecutionUser.rank,
            Execution.ordered_ids,
        )
        .join(Execution, OF_ITS_EXECUTION)
        .where(
            ExecutionUser.workspace_id == workspace_id,
            ExecutionUser.state == "CLAIMED",
            ExecutionUser.claimed_at < cutoff,
            Execution.status == "STOPPED",
        )
    )


# The platforms a message's delivery id may name (`run.delivery_id`): a push platform, or EMAIL.
_PLATFORMS = (*(platform.value for platform in Platform), Channel.EMAIL.value)

# Delivery ids per statement (four candidates a user: one per platform a message may be on).
_CHUNK = 500

# One user row of a run, by its key (Core: run as an executemany, the ORM would update by its own
# primary-key parameters).
_USERS = cast(Table, ExecutionUser.__table__)
_SET_USER = (
    update(_USERS)
    .where(
        _USERS.c.workspace_id == bindparam("ws"),
        _USERS.c.execution_id == bindparam("run"),
        _USERS.c.customer_id == bindparam("customer"),
        _USERS.c.firing == bindparam("firing_of"),
        _USERS.c.state == "CLAIMED",
    )
    .values(state=bindparam("to_state"), reason=bindparam("to_reason"), claimed_at=None)
)


async def settle_orphans(database: Database, workspace_id: str, now: datetime, lease: timedelta) -> None:
    """The messages a worker had on the wire when it died, once their run has ended (a STOP, the
    campaign's expiry, a periodic campaign paused) and their claim's lease has passed. Nobody takes
    over an ended run's users, so their rows stayed PENDING for ever (and counted as pending in
    `herald_outbox_pending`); they are settled FAILED, the outcome unknown (`ORPHANED`), and the
    users (an event-triggered run's firings) FAILED with them; users it claimed and handed nothing
    of are pending again (unsent, the run being over). Each message is found by its delivery id,
    which names the run, the user, the platform and the firing. A row waiting for a retry is
    `settle_stopped`'s."""
    orphans = _orphans(workspace_id, now - lease)
    # A read first: on SQLite a write transaction at every tick would make the API's writers wait.
    async with database.reader() as session:
        if (await session.execute(orphans.limit(1))).first() is None:
            return
    async with database.writer() as session:
        found = (await session.execute(orphans)).tuples().all()
        owner: dict[str, tuple[str, str, str]] = {}  # a candidate delivery id → its user row's key
        for execution_id, customer_id, firing, rank, ordered in found:
            for platform in _PLATFORMS:
                message = delivery_id(execution_id, customer_id, platform, firing, rank if ordered else None)
                owner[message] = (execution_id, customer_id, firing)
        on_the_wire = [
            OutboxEntry.workspace_id == workspace_id,
            OutboxEntry.status == OutboxStatus.PENDING.value,
            OutboxEntry.next_attempt_at.is_(None),
        ]
        handed: set[tuple[str, str, str]] = set()
        ids = sorted(owner)
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            rows = await session.scalars(
                select(OutboxEntry.id).where(*on_the_wire, OutboxEntry.id.in_(chunk))
            )
            settled = list(rows.all())
            handed |= {owner[message] for message in settled}
            if settled:
                await session.execute(
                    update(OutboxEntry)
                    .where(*on_the_wire, OutboxEntry.id.in_(settled))
                    .values(status=OutboxStatus.FAILED.value, failure_reason=f"{ORPHANED}.", updated_at=now)
                    .execution_options(synchronize_session=False)
                )
        users = []
        for execution_id, customer_id, firing, _, _ in found:
            was_handed = (execution_id, customer_id, firing) in handed
            users.append(
                {
                    "ws": workspace_id,
                    "run": execution_id,
                    "customer": customer_id,
                    "firing_of": firing,
                    "to_state": "FAILED" if was_handed else "PENDING",
                    "to_reason": f"{ORPHANED}." if was_handed else None,
                }
            )
        await (await session.connection()).execute(_SET_USER, users)
        await session.commit()
