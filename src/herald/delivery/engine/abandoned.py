"""Outbox rows of messages whose next attempt will never come, settled FAILED with why.

A message that failed transiently stays PENDING with its `next_attempt_at` (`outbox.record_retry`).
When its execution ends before that moment (a STOP, the campaign's expiry, a periodic campaign
PAUSED), nobody will attempt it again: left PENDING, the row would say "outcome unknown" for ever
and `herald_outbox_pending` would count it for ever. Only rows waiting for a retry are settled: a
row whose attempt has begun (its `next_attempt_at` cleared) may be on the wire, and a user CLAIMED
is in a live worker's hands (it finds the row settled and attempts nothing), so both are left as
they are. The users' own states are not touched: the stats count them as the stopped execution's
`unsent`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String, exists, func, literal, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.models import WAITING_RETRY, OutboxEntry
from herald.delivery.outbox import OutboxStatus

# Why the next attempt never comes, by the status the campaign ended its execution with.
WHY = {
    CampaignStatus.STOPPED.value: "The campaign was stopped before the next attempt",
    CampaignStatus.SENT.value: "The campaign expired before the next attempt",
    CampaignStatus.PAUSED.value: "The campaign was paused before the next attempt",
}


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
            failure_reason=func.coalesce(last, f"{why}."),
            next_attempt_at=None,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
