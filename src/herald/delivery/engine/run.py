"""Dispatching an execution: batches of users claimed, decided, rendered and handed to connectors.

A batch is claimed in one short write transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so
several workers take disjoint batches; SQLite has one writer and one process): each user is held
out (control group), suppressed (push token of no campaign platform, audience limit) or CLAIMED.
No transaction is open while messages go out. Each message then takes the test sends' path
(`Dispatcher.send`: outbox row committed PENDING, attempt, SENT/FAILED committed); its outbox id
is derived from (execution, user, platform), so the outbox primary key makes a second message for
the same slot impossible, whatever the interleaving of workers. Before each hand-off the campaign's
status is read again: once it is no longer SENDING (STOP), nothing more is handed to a connector.

Failures: a transient one puts the user in RETRY until the message's next attempt time (the
dispatcher's backoff), when it is claimed again and only its unsettled messages are attempted. A
worker that dies leaves its users CLAIMED; once their lease (`HERALD_DELIVERY_LEASE_SECONDS`, on
the worker's clock) has passed, another worker takes them over and attempts again, under the same
ids, the messages left PENDING (outcome unknown: at least once on the wire, once per id). When the
campaign's connector reaches its error threshold, the execution is PAUSED (`engine.pause`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import User
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, Channel
from herald.db import Database
from herald.delivery.dispatch import Dispatcher
from herald.delivery.engine.content import SendPlan, live_version, replan
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.pause import pause
from herald.delivery.messages import Envelope, Outcome
from herald.delivery.models import OutboxEntry
from herald.delivery.recipients import push_recipient, recipient_for
from herald.delivery.rendering import RenderError

log = logging.getLogger("herald.delivery.engine")

BATCH = 200


class UserState:
    PENDING = "PENDING"
    CLAIMED = "CLAIMED"
    RETRY = "RETRY"
    SENT = "SENT"
    FAILED = "FAILED"
    HELD_OUT = "HELD_OUT"
    SUPPRESSED = "SUPPRESSED"


@dataclass(frozen=True)
class _Claimed:
    customer_id: str
    user: User


@dataclass(frozen=True)
class _Result:
    """How a user's messages went: all sent, one to try again at `retry_at`, or failed."""

    sent: bool
    reason: str | None = None
    retry_at: datetime | None = None


def delivery_id(execution_id: str, customer_id: str, platform: str) -> str:
    """The stable id of the one message of (execution, user, platform): outbox key and webhook id."""
    return hashlib.sha256(f"{execution_id}\x00{customer_id}\x00{platform}".encode()).hexdigest()[:24]


def _audience_limit(plan: SendPlan) -> int | None:
    limit = plan.campaign.document.campaign_audience_limit
    if limit is None or not limit.is_campaign_audience_limit_enabled or limit.limit is None:
        return None
    return int(limit.limit)


def _mine(execution: Execution) -> tuple[object, ...]:
    return (ExecutionUser.workspace_id == execution.workspace_id, ExecutionUser.execution_id == execution.id)


async def _set_users(
    session: AsyncSession,
    execution: Execution,
    ids: list[str],
    state: str,
    reason: str | None = None,
    **more: object,
) -> None:
    if ids:
        await session.execute(
            update(ExecutionUser)
            .where(*_mine(execution), ExecutionUser.customer_id.in_(ids))  # type: ignore[arg-type]
            .values(state=state, reason=reason, **more)
        )


def _has_message(plan: SendPlan, customer_id: str, user: User) -> bool:
    """False for a push user whose token is for none of the campaign's platforms."""
    if plan.channel is not Channel.PUSH or not plan.groups:
        return True
    profile = recipient_for(user, customer_id, plan.channel).profile or {}
    return bool(plan.messages_for(plan.group_for(customer_id, profile), profile))


async def _claim(
    database: Database, plan: SendPlan, execution: Execution, now: datetime, lease: timedelta
) -> list[_Claimed] | None:
    """The next batch to send (maybe empty after hold-outs); None when no user is left to claim."""
    async with database.writer() as session:
        current = await session.scalar(
            select(Execution)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .with_for_update()
        )
        assert current is not None
        rows = (
            await session.execute(
                select(ExecutionUser.customer_id, ExecutionUser.rank, ExecutionUser.state, User)
                .outerjoin(
                    User,
                    and_(
                        User.workspace_id == ExecutionUser.workspace_id,
                        User.customer_id == ExecutionUser.customer_id,
                    ),
                )
                .where(
                    *_mine(execution),  # type: ignore[arg-type]
                    or_(
                        ExecutionUser.state == UserState.PENDING,
                        and_(
                            ExecutionUser.state == UserState.CLAIMED, ExecutionUser.claimed_at < now - lease
                        ),
                        and_(ExecutionUser.state == UserState.RETRY, ExecutionUser.not_before <= now),
                    ),
                )
                .order_by(ExecutionUser.rank)
                .limit(BATCH)
                .with_for_update(skip_locked=True, of=ExecutionUser)
            )
        ).all()
        if not rows:
            return None
        limit = _audience_limit(plan)
        room = None if limit is None else max(0, limit - current.dispatched)
        held: list[str] = []
        gone: list[str] = []
        no_token: list[str] = []
        capped: list[str] = []
        claimed: list[_Claimed] = []
        reclaimed = 0
        for customer_id, rank, state, user in rows:
            if state in (UserState.CLAIMED, UserState.RETRY) and user is not None:
                # Decided and counted before (by this worker, or by one that died): only its
                # unsettled sends are left.
                claimed.append(_Claimed(customer_id, user))
                reclaimed += 1
            elif current.control_threshold is not None and rank <= current.control_threshold:
                held.append(customer_id)
            elif user is None:
                gone.append(customer_id)
            elif not _has_message(plan, customer_id, user):
                no_token.append(customer_id)
            elif room is not None and len(claimed) - reclaimed >= room:
                capped.append(customer_id)
            else:
                claimed.append(_Claimed(customer_id, user))
        await _set_users(session, execution, held, UserState.HELD_OUT, "CONTROL_GROUP")
        await _set_users(session, execution, gone, UserState.SUPPRESSED, "NO_USER")
        await _set_users(session, execution, no_token, UserState.SUPPRESSED, "NO_ADDRESS")
        await _set_users(session, execution, capped, UserState.SUPPRESSED, "AUDIENCE_LIMIT")
        await _set_users(
            session, execution, [c.customer_id for c in claimed], UserState.CLAIMED, claimed_at=now
        )
        current.dispatched += len(claimed) - reclaimed  # a reclaimed user was counted already
        current.updated_at = now
        await session.commit()
    return claimed


async def _still_sending(database: Database, execution: Execution) -> bool:
    """The campaign is SENDING (not stopped) and the execution DISPATCHING (not paused)."""
    campaign = (
        select(Campaign.status)
        .where(
            Campaign.workspace_id == execution.workspace_id,
            Campaign.campaign_id == execution.campaign_id,
            Campaign.is_latest,
        )
        .scalar_subquery()
    )
    async with database.reader() as session:
        found = (
            await session.execute(
                select(campaign, Execution.status).where(
                    Execution.workspace_id == execution.workspace_id, Execution.id == execution.id
                )
            )
        ).first()
    return found is not None and tuple(found) == (CampaignStatus.SENDING.value, "DISPATCHING")


async def _in_flight(database: Database, execution: Execution) -> bool:
    """Whether users are still CLAIMED (by another worker, or one that died within its lease) or
    waiting to be attempted again."""
    async with database.reader() as session:
        found = await session.execute(
            select(ExecutionUser.customer_id)
            .where(
                *_mine(execution),  # type: ignore[arg-type]
                ExecutionUser.state.in_([UserState.CLAIMED, UserState.RETRY]),
            )
            .limit(1)
        )
        return found.first() is not None


async def _release(database: Database, execution: Execution, ids: list[str]) -> None:
    """Users claimed but not handed over when the campaign stopped or the execution paused:
    pending again, uncounted (a later claim decides and counts them again)."""
    if not ids:
        return
    async with database.writer() as session:
        await _set_users(session, execution, ids, UserState.PENDING, claimed_at=None, not_before=None)
        await session.execute(
            update(Execution)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .values(dispatched=Execution.dispatched - len(ids))
        )
        await session.commit()


async def _existing(database: Database, workspace_id: str, outbox_id: str) -> Outcome:
    async with database.reader() as session:
        row = await session.get(OutboxEntry, (workspace_id, outbox_id))
    if row is not None and row.status == "SENT":
        return Outcome(True)
    reason = row.failure_reason if row is not None and row.failure_reason else None
    return Outcome(False, reason or "The message could not be sent.")


async def _send_user(
    database: Database,
    dispatcher: Dispatcher,
    plan: SendPlan,
    execution: Execution,
    item: _Claimed,
    now: datetime,
) -> _Result:
    if not plan.groups:
        return _Result(False, plan.problem or "The campaign has nothing to send.")
    recipient = recipient_for(item.user, item.customer_id, plan.channel)
    recipient = await push_recipient(database, execution.workspace_id, recipient)
    profile = recipient.profile or {}
    group = plan.group_for(item.customer_id, profile)
    deliveries = plan.deliveries(group, recipient)
    if not deliveries:  # its tokens changed since the audience was resolved
        return _Result(False, "The user has no push token for the campaign's platforms.")
    failures: list[str] = []
    retry_at: datetime | None = None
    for message, reached in deliveries:
        platform = message.slot.platform.value if message.slot.platform else plan.channel.value
        envelope_id = delivery_id(execution.id, item.customer_id, platform)
        try:
            body = await plan.render(group, profile, message)
            reason = None
        except RenderError as exc:
            body, reason = message.message(), f"Personalization failed: {exc}"
        envelope = Envelope(
            envelope_id,
            execution.workspace_id,
            plan.campaign.campaign_id,
            False,
            message.slot,
            reached,
            body,
            now,
            plan.advanced_for(message, now),
        )
        if plan.problem is None and plan.connector is not None and reason is None:
            outcome = await dispatcher.deliver(plan.connector, envelope)
        else:
            try:
                outcome = await dispatcher.unsent(
                    plan.connector, envelope, reason or plan.problem or "No connector."
                )
            except IntegrityError:  # recorded before this user was taken over
                outcome = await _existing(database, execution.workspace_id, envelope_id)
        if outcome.retry_at is not None:
            retry_at = max(retry_at or outcome.retry_at, outcome.retry_at)
        if not outcome.sent:
            failures.append(outcome.reason or "The send failed.")
    reason = "; ".join(failures) or None
    if retry_at is not None:
        return _Result(False, reason, retry_at)
    return _Result(not failures, reason)


async def dispatch(
    database: Database,
    dispatcher: Dispatcher,
    plan: SendPlan,
    execution: Execution,
    now: datetime,
    lease: timedelta,
) -> bool:
    """Send batch after batch while the campaign is SENDING and the execution DISPATCHING; True
    when every user is settled."""
    while True:
        if not await _still_sending(database, execution):
            return False
        claimed = await _claim(database, plan, execution, now, lease)
        if claimed is None:
            return not await _in_flight(database, execution)
        for index, item in enumerate(claimed):
            failing = dispatcher.failing(plan.connector) if plan.connector is not None else None
            if failing is not None:
                await pause(database, execution, failing, now)
            if failing is not None or not await _still_sending(database, execution):
                await _release(database, execution, [c.customer_id for c in claimed[index:]])
                return False
            _, version = await live_version(database, execution.workspace_id, execution.campaign_id)
            if version != plan.version:  # changed while SENDING: the rest get the new content
                plan = await replan(database, plan, execution)
            result = await _send_user(database, dispatcher, plan, execution, item, now)
            async with database.writer() as session:
                if result.retry_at is not None:
                    state, more = UserState.RETRY, {"not_before": result.retry_at, "claimed_at": None}
                else:
                    state, more = (UserState.SENT if result.sent else UserState.FAILED), {}
                await _set_users(session, execution, [item.customer_id], state, result.reason, **more)
                await session.commit()
