"""Live activities: a BROADCAST_LIVE_ACTIVITY campaign (Push, iOS only) is one message per
execution, not one per user: the iOS push gateway fans a broadcast out to every device subscribed
to the activity, so Herald resolves no audience and hands the workspace's push connector exactly
one message.

Publishing makes such a campaign ACTIVE (at its start, when scheduled); the worker tick then
starts its execution (run 1, created once: the unique run index settles a race between workers),
takes it over with a conditional update (RESOLVING → DISPATCHING; only one worker wins, and a
worker that died mid-send is taken over once `HERALD_DELIVERY_LEASE_SECONDS` have passed) and
delivers the campaign's iOS message, rendered without a user (personalization falls back to its
defaults), through the dispatcher: an outbox row under `broadcast_id(execution)`, the webhook's
`id` (so a receiver drops a repeat by it), and `recipient.address` "BROADCAST". A transient failure
is attempted again at a later tick after the dispatcher's backoff; once SENT or FAILED the
execution is DONE and the stats show the message (`executions[].broadcast`). The campaign stays
ACTIVE: the activity lives on the devices; its updates are not part of v5.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType, Platform
from herald.campaigns.schemas.content import DEFAULT_LOCALE
from herald.db import Database
from herald.delivery.dispatch import Dispatcher
from herald.delivery.engine.content import live_campaign, plan_sends
from herald.delivery.engine.models import Execution
from herald.delivery.engine.resolve import ExecutionStatus, LiveCampaign, start_execution
from herald.delivery.engine.run import delivery_id
from herald.delivery.messages import Envelope, Recipient, Slot
from herald.delivery.models import OutboxEntry
from herald.delivery.rendering import RenderError

log = logging.getLogger("herald.delivery.engine")

BROADCAST = "BROADCAST"


def broadcast_id(execution_id: str) -> str:
    """The stable id of an execution's one broadcast message (outbox key and webhook id)."""
    return delivery_id(execution_id, f"\x00{BROADCAST}", Platform.IOS.value)


async def due(database: Database, workspace_id: str) -> list[LiveCampaign]:
    """The workspace's live-activity campaigns whose message is not settled yet."""
    async with database.reader() as session:
        rows = (
            await session.scalars(
                select(Campaign)
                .where(
                    Campaign.workspace_id == workspace_id,
                    Campaign.is_latest,
                    Campaign.status.in_([CampaignStatus.ACTIVE.value, CampaignStatus.SENDING.value]),
                    Campaign.delivery_type == DeliveryType.BROADCAST_LIVE_ACTIVITY.value,
                    Campaign.channel == Channel.PUSH.value,
                    Campaign.campaign_id.not_in(
                        select(Execution.campaign_id).where(
                            Execution.workspace_id == workspace_id, Execution.status == ExecutionStatus.DONE
                        )
                    ),
                )
                .order_by(Campaign.id)
            )
        ).all()
    return [campaign for row in rows if (campaign := live_campaign(row)) is not None]


async def _take(database: Database, execution: Execution, now: datetime, lease: timedelta) -> bool:
    """Whether this worker takes the execution's send (and no other worker has it)."""
    async with database.writer() as session:
        retry_at = await session.scalar(
            select(OutboxEntry.next_attempt_at).where(
                OutboxEntry.workspace_id == execution.workspace_id,
                OutboxEntry.id == broadcast_id(execution.id),
            )
        )
        if retry_at is not None and retry_at > now:
            return False  # a transient failure: attempted again after the dispatcher's backoff
        taken = await session.execute(
            update(Execution)
            .where(
                Execution.workspace_id == execution.workspace_id,
                Execution.id == execution.id,
                or_(
                    Execution.status == ExecutionStatus.RESOLVING,
                    and_(Execution.status == ExecutionStatus.DISPATCHING, Execution.updated_at < now - lease),
                ),
            )
            .values(status=ExecutionStatus.DISPATCHING, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        await session.commit()
    return getattr(taken, "rowcount", 0) == 1


async def _settle(database: Database, execution: Execution, status: str, now: datetime) -> None:
    async with database.writer() as session:
        await session.execute(
            update(Execution)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .values(status=status, updated_at=now)
        )
        await session.commit()


async def run_broadcasts(
    database: Database, dispatcher: Dispatcher, campaigns: list[LiveCampaign], now: datetime, lease: timedelta
) -> None:
    """Send the one message of each of `campaigns` (from `due`) unless another worker has it."""
    for campaign in campaigns:
        execution = await start_execution(database, campaign, now)
        if execution.status not in (ExecutionStatus.RESOLVING, ExecutionStatus.DISPATCHING):
            continue  # DONE: its message went (or failed for good)
        if await _take(database, execution, now, lease):
            await _send(database, dispatcher, campaign, execution, now)


async def _send(
    database: Database, dispatcher: Dispatcher, campaign: LiveCampaign, execution: Execution, now: datetime
) -> None:
    async with database.reader() as session:
        plan = await plan_sends(session, campaign, execution)
    items = [item for items in plan.groups.values() for item in items if item.slot.platform is Platform.IOS]
    slot = items[0].slot if items else Slot(Channel.PUSH, Platform.IOS, DEFAULT_LOCALE, "variation_1")
    envelope = Envelope(
        broadcast_id(execution.id),
        execution.workspace_id,
        campaign.campaign_id,
        False,
        slot,
        Recipient(BROADCAST, BROADCAST),
        {},
        now,
        plan.advanced_for(items[0], now) if items else None,
    )
    problem = plan.problem or (None if items else "The campaign has no iOS message.")
    if problem is None and plan.connector is None:
        problem = "No push connector."
    if problem is None:
        try:
            envelope = replace(
                envelope, message=await plan.render((slot.locale, slot.variation), {}, items[0])
            )
        except RenderError as exc:
            problem = f"Personalization failed: {exc}"
    if problem is not None:
        log.error(
            "campaign %s/%s: live activity not sent: %s", campaign.workspace_id, campaign.campaign_id, problem
        )
        await dispatcher.unsent(plan.connector, envelope, problem)
        await _settle(database, execution, ExecutionStatus.DONE, now)
        return
    assert plan.connector is not None
    outcome = await dispatcher.deliver(plan.connector, envelope)
    # A transient failure: RESOLVING again, taken once its next attempt is due.
    await _settle(
        database, execution, ExecutionStatus.RESOLVING if outcome.retry_at else ExecutionStatus.DONE, now
    )
