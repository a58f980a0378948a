"""Delivery stats of a campaign (a Herald extension): per execution, where each user of its
audience stands, counted by the database from the engine's own rows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import repository as campaigns_repository
from herald.campaigns.schemas.common import DeliveryType
from herald.delivery.engine.broadcast import broadcast_id
from herald.delivery.engine.conversion_stats import execution_conversions
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.models import OutboxEntry
from herald.errors import NotFound
from herald.ids import is_object_id
from herald.timefmt import rfc3339

_STATES = ("PENDING", "CLAIMED", "RETRY", "SENT", "FAILED", "HELD_OUT", "SUPPRESSED")


async def campaign_stats(session: AsyncSession, workspace_id: str, campaign_id: str) -> dict[str, Any]:
    row = None
    if is_object_id(campaign_id):
        row = await campaigns_repository.get_latest_or_version(session, workspace_id, campaign_id)
        if row is not None and not row.is_latest:
            # A later version's own id, which C2 reads too: its campaign's stats (deliveries are the
            # campaign's, whichever version each run sent).
            row = await campaigns_repository.get_latest(session, workspace_id, row.campaign_id)
    if row is None:
        raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")
    live_activity = row.delivery_type == DeliveryType.BROADCAST_LIVE_ACTIVITY.value
    mine = (
        # A periodic run's child campaign: the one execution of its parent that is this run.
        (Execution.campaign_id == row.parent_id, Execution.child_campaign_id == row.campaign_id)
        if row.parent_id is not None
        else (Execution.campaign_id == row.campaign_id,)
    )
    executions = (
        await session.scalars(
            select(Execution).where(Execution.workspace_id == workspace_id, *mine).order_by(Execution.run)
        )
    ).all()
    return {
        "campaign_id": row.campaign_id,
        "status": row.status,
        "executions": [await _one(session, e, row.components, live_activity) for e in executions],
    }


async def _one(
    session: AsyncSession, execution: Execution, components: dict[str, Any] | None, live_activity: bool
) -> dict[str, Any]:
    counts = (
        await session.execute(
            select(ExecutionUser.state, ExecutionUser.reason, func.count())
            .where(
                ExecutionUser.workspace_id == execution.workspace_id,
                ExecutionUser.execution_id == execution.id,
            )
            .group_by(ExecutionUser.state, ExecutionUser.reason)
        )
    ).all()
    deferred = int(
        await session.scalar(
            select(func.count()).where(
                ExecutionUser.workspace_id == execution.workspace_id,
                ExecutionUser.execution_id == execution.id,
                ExecutionUser.state == "PENDING",
                ExecutionUser.not_before.is_not(None),
            )
        )
        or 0
    )
    by_state = dict.fromkeys(_STATES, 0)
    written = sum(int(count) for _, _, count in counts)
    # While the audience is still being written, the users not written yet are pending too.
    # An audience not counted yet (`resolve.UNCOUNTED`, for a moment after the first chunk): as written.
    audience = execution.audience if execution.audience >= 0 else written
    unwritten = max(0, audience - written) if execution.resolved_at is None else 0
    # The audience is known: counted, partly written, or written whole (perhaps nobody).
    known = execution.audience >= 0 or written > 0 or execution.resolved_at is not None
    suppressed = {
        "opted_out": execution.opted_out,
        "unsubscribed": execution.unsubscribed,
        "no_address": execution.no_address,
        "audience_limit": 0,
        "no_user": 0,
        "frequency_cap": 0,
        "dnd": 0,
        "minimum_delay": 0,
    }
    held_out = {"control_group": 0, "global_control": 0}
    failures: dict[str, int] = {}
    for state, reason, count in counts:
        by_state[state] = by_state.get(state, 0) + int(count)
        if state == "FAILED":
            key = reason or "Unknown."
            failures[key] = failures.get(key, 0) + int(count)
        if state == "SUPPRESSED" and reason:
            key = reason.lower()
            suppressed[key] = suppressed.get(key, 0) + int(count)
        elif state == "HELD_OUT":
            key = (reason or "CONTROL_GROUP").lower()
            held_out[key] = held_out.get(key, 0) + int(count)
    waiting = by_state["PENDING"] + by_state["CLAIMED"] + by_state["RETRY"] + unwritten
    # A STOPPED execution's users still waiting never get their turn: unsent, not pending. Those
    # CLAIMED are in a worker's hands: on the wire (their messages may still arrive), or about to
    # be released by it; pending until it records their end (a dead worker's: FAILED once its
    # lease passes), not counted unsent meanwhile.
    ended = execution.status == "STOPPED"
    pending = by_state["CLAIMED"] if ended else waiting
    unsent = waiting - pending if ended else 0
    settled = by_state["SENT"] + by_state["FAILED"] + unsent
    return {
        "id": execution.id,
        "run": execution.run,
        "status": execution.status,
        "reason": execution.reason,
        "trigger": execution.trigger,
        # The occurrence a periodic run is for (a one-time campaign's start_time; None for ASAP).
        "scheduled_for": rfc3339(execution.scheduled_for) if execution.scheduled_for else None,
        # A periodic run's child campaign.
        "child_campaign_id": execution.child_campaign_id,
        "started_at": rfc3339(execution.created_at),
        "updated_at": rfc3339(execution.updated_at),
        # Selected by the segmentation, before the channel's suppressions.
        "audience": audience + execution.opted_out + execution.unsubscribed + execution.no_address,
        "held_out": held_out,
        "suppressed": suppressed,
        "pending": pending,
        # Of the users to send to (after hold-outs and suppressions), the share settled: sent,
        # failed, or unsent (stopped). 100 when none is left, or there is none; 0 while the
        # audience is not known yet (a business raise not resolved, a streamed audience neither counted
        # nor written yet: nothing is settled).
        "progress": _progress(execution.status, settled, pending, known),
        # Of the pending users, those decided on whose messages wait for their next attempt: after a
        # transient failure, or not made when a pause or the error threshold halted their window.
        "retrying": 0 if ended else by_state["RETRY"],
        # Of the pending users, those waiting for the end of quiet hours or of the minimum delay.
        "deferred": 0 if ended else deferred,
        "sent": by_state["SENT"],
        "failed": by_state["FAILED"],
        "failures": _commonest(failures),
        "unsent": unsent,
        "conversions": await execution_conversions(session, execution, components),
        "broadcast": await _broadcast(session, execution) if live_activity else None,
    }


# The failure reasons a stats answer lists: a connector's reasons are few (one per kind of answer),
# and a long tail of one-user reasons (each naming its address) says nothing the outbox does not.
FAILURES_LISTED = 10


def _commonest(failures: dict[str, int]) -> list[dict[str, Any]]:
    """The reasons users failed with, the most users first (then by reason), `FAILURES_LISTED` of
    them at most."""
    ranked = sorted(failures.items(), key=lambda item: (-item[1], item[0]))[:FAILURES_LISTED]
    return [{"reason": reason, "users": users} for reason, users in ranked]


def _progress(status: str, settled: int, pending: int, audience_known: bool) -> float:
    if settled + pending:
        return round(100 * settled / (settled + pending), 1)
    # Nobody to send to: done, unless nobody is known yet (resolving; or dispatching a streamed
    # audience whose first chunk is not written, and not counted yet). 100 then, and 0 a moment
    # later once the chunk is in, told a client watching for 100 that the send was over.
    return 0.0 if status == "RESOLVING" or not audience_known else 100.0


async def _broadcast(session: AsyncSession, execution: Execution) -> dict[str, Any]:
    """A live activity's one message: its outbox id and how it went (PENDING until attempted)."""
    message_id = broadcast_id(execution.id)
    row = await session.get(OutboxEntry, {"workspace_id": execution.workspace_id, "id": message_id})
    return {
        "id": message_id,
        "status": row.status if row is not None else "PENDING",
        "failure_reason": row.failure_reason if row is not None else None,
        "attempts": row.attempts if row is not None else 0,
    }
