"""C8: send a campaign's content as a test to up to 10 recipients, through the workspace's connectors.

Order of work, and why it leaves nothing half-written:
1. The body is read; what the body alone gets wrong is one 400.
2. In one short read-only transaction: the draft (404), the connector, the narrowing (400), the
   content's completeness (400 inline, 422 for a saved draft), the recipients (404/422), and every
   message rendered. Nothing has been sent or written yet, so any refusal leaves no trace.
3. That transaction is closed (no database lock is held across network I/O), then each message is
   sent; its outbox row is committed PENDING before and SENT/FAILED after, in transactions of its
   own (`delivery.outbox`), so the record of a send never depends on the request's fate.
The request's Idempotency-Key is claimed with the first outbox write and its answer recorded with the
last (`joined_writes.ClaimedWrites`): a replay of the same key returns the stored answer and sends
nothing again; a refusal claims it first, in a transaction of its own, so the key answers first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import repository as campaigns_repository
from herald.campaigns.schemas.advanced import Advanced
from herald.campaigns.schemas.basic_details import BasicDetails
from herald.campaigns.schemas.common import CREATABLE_CHANNELS, Channel, DeliveryType
from herald.campaigns.schemas.connector import Connector as ConnectorRef
from herald.campaigns.schemas.content import CampaignContent
from herald.campaigns.validation import load_document
from herald.clock import Clock
from herald.config import Settings
from herald.db import Database
from herald.delivery import recipients as recipients_lookup
from herald.delivery.config import is_smtp
from herald.delivery.dispatch import Dispatcher, Lanes
from herald.delivery.engine.split import tagged, utm_of
from herald.delivery.messages import Envelope, Outcome, Recipient
from herald.delivery.models import Connector
from herald.delivery.push_options import push_options
from herald.delivery.rendering import (
    PreparedContent,
    RenderError,
    custom_templates,
    message_at,
    personalize_content,
    prepare_content,
    pruned_content,
)
from herald.delivery.testsend_connector import choose_connector
from herald.delivery.testsend_plan import SlotMessage, narrow, readiness_problems, slot_messages
from herald.delivery.testsend_request import CampaignTestRequest, channel_problems, check_test_body
from herald.direct_reads import DirectReads
from herald.errors import HeraldError, NotFound, Unprocessable, ValidationFailed
from herald.ids import is_object_id, object_id
from herald.joined_writes import ClaimedWrites, FirstWrite, Joined
from herald.problems import Problem

# Sends of one request (messages x recipients): beyond it, narrow by platform, locale or variation.
MAX_SENDS = 100
PROCESSED_MESSAGE = "Test campaign processed"


@dataclass(frozen=True)
class Deployment:
    """What a test send needs from the running app."""

    settings: Settings
    clock: Clock
    database: Database
    lanes: Lanes | None = None  # shared by the process's test sends (else the request's own)


@dataclass(frozen=True)
class _Source:
    channel: Channel
    content: CampaignContent | None
    basic_details: BasicDetails | None
    connector: ConnectorRef | None
    campaign_id: str | None
    advanced: Advanced | None = None
    utm: dict[str, str] = field(default_factory=dict)  # a draft's `utm_params`, as live sends add them


@dataclass(frozen=True)
class _Plan:
    connector: Connector
    campaign_id: str | None
    messages: list[SlotMessage]
    recipients: list[Recipient]
    prepared: PreparedContent
    advanced: Advanced | None = None
    utm: dict[str, str] = field(default_factory=dict)


Results = dict[str, dict[str, str]]


async def test_campaign(
    deployment: Deployment,
    workspace_id: str,
    raw: object,
    request_id: str | None,
    claimed: ClaimedWrites[Results],
) -> Results:
    """The C8 answer's inner `data`: per message key, SENT or FAILED with a reason. The request's
    idempotency claim (`claimed`) goes with the first outbox write and its answer with the last."""
    try:
        request = check_test_body(raw)
        # Each read its own snapshot, without a transaction around them (on PostgreSQL a BEGIN and a
        # ROLLBACK fewer): what a test goes to (a draft, a connector, users and their tokens) is
        # read once, and none of it must agree with the rest at one instant. The connector, users
        # and tokens, read by every test, run on the driver (`database.direct`): an ORM session's
        # set-up, begin and close cost a sixth of a test send's CPU on SQLite. The session serves
        # the rarer reads (a draft, a segment, templates and blocks) and connects only for them.
        async with deployment.database.single_statement_reader() as session:
            plan = await _plan(_Reads(deployment.database.direct, session), workspace_id, request)
    except HeraldError:
        await claimed.apart()  # the key answers first (a replay, a 409), as when claimed before
        raise
    dispatcher = Dispatcher(
        deployment.settings, deployment.clock, deployment.database, request_id, deployment.lanes
    )
    async with dispatcher:
        return await _execute(deployment.clock, dispatcher, workspace_id, request, plan, claimed)


async def _source(session: AsyncSession, workspace_id: str, request: CampaignTestRequest) -> _Source:
    if request.draft_id is None:
        assert request.channel is not None
        return _Source(request.channel, request.content, request.basic_details, request.connector, None)
    draft_id = request.draft_id
    row = (
        await campaigns_repository.get_latest(session, workspace_id, draft_id)
        if is_object_id(draft_id)
        else None
    )
    if row is None:
        raise NotFound("No campaign with this id exists in the workspace.", target="draft_id")
    channel = Channel(row.channel)
    if channel not in CREATABLE_CHANNELS:
        raise ValidationFailed(
            [
                Problem(
                    "INVALID_ENUM_VALUE",
                    "draft_id",
                    f"{channel.value} campaigns cannot be test-sent; only PUSH and EMAIL.",
                )
            ]
        )
    document, problems = load_document(channel, DeliveryType(row.delivery_type), row.components)
    if document is None:
        raise Unprocessable("The saved campaign cannot be read; update it before testing.", details=problems)
    if document.campaign_content is None:
        raise Unprocessable(
            "The saved campaign has no content to test.",
            details=[
                Problem("REQUIRED_FIELD_MISSING", "campaign_content", "The draft has no campaign_content.")
            ],
        )
    return _Source(
        channel,
        document.campaign_content,
        document.basic_details,
        document.connector,
        row.campaign_id,
        document.advanced if channel is Channel.PUSH else None,
        utm_of(document.utm_params),
    )


@dataclass(frozen=True)
class _Reads:
    rows: DirectReads  # compiled single statements on the driver
    session: AsyncSession  # ORM reads


async def _plan(reads: _Reads, workspace_id: str, request: CampaignTestRequest) -> _Plan:
    session = reads.session
    source = await _source(session, workspace_id, request)
    channel, draft_mode = source.channel, request.draft_id is not None
    problems = channel_problems(request, channel)
    if request.channel is not None and request.channel is not channel:
        problems.append(
            Problem(
                "INVALID_ENUM_VALUE",
                "channel",
                f"The draft is a {channel.value} campaign, not {request.channel.value}.",
            )
        )
    choice = await choose_connector(reads.rows, workspace_id, channel, request.connector, source.connector)
    problems += choice.bad_request
    assert source.content is not None
    messages, narrowing = narrow(
        slot_messages(source.content, source.basic_details),
        # An e-mail has no platform to narrow by: `channel_problems` says so, once.
        request.meta.platform if channel is Channel.PUSH else None,
        request.meta.locale_name,
        request.variation_key,
    )
    problems += narrowing
    senders = None
    if choice.connector is not None and is_smtp(choice.connector.type):
        senders = list((choice.connector.settings or {}).get("senders") or [])
    written = [(item.path, item.message()) for item in messages]
    # What a message lacks, once the custom template it names is filled in (as prepared below).
    templates, incomplete = await custom_templates(session, workspace_id, channel, pruned_content(written))
    incomplete += readiness_problems(messages, source.basic_details, senders, templates)
    if not draft_mode:
        problems += incomplete
    if problems:
        raise ValidationFailed(problems)
    if choice.unprocessable or incomplete:
        # Inline, nothing is saved: only the workspace (its connectors) can be what is missing.
        message = (
            "The campaign cannot be test-sent as saved."
            if draft_mode
            else "The test cannot be sent through this workspace's connectors."
        )
        raise Unprocessable(message, details=[*choice.unprocessable, *incomplete])
    assert choice.connector is not None

    recipients = await _recipients(reads, workspace_id, channel, request, len(messages))
    try:
        prepared = await prepare_content(session, workspace_id, channel, pruned_content(written), templates)
    except ValidationFailed as exc:
        if not draft_mode:
            raise
        raise Unprocessable("The saved content cannot be personalized.", details=exc.details) from None
    return _Plan(
        choice.connector, source.campaign_id, messages, recipients, prepared, source.advanced, source.utm
    )


async def _recipients(
    reads: _Reads, workspace_id: str, channel: Channel, request: CampaignTestRequest, messages: int
) -> list[Recipient]:
    """Who the test goes to: unknown values are 404, unusable ones 422, more recipients than a test
    may have 400 (nothing is sent then)."""
    resolution = await recipients_lookup.resolve(
        reads.rows,
        reads.session,
        workspace_id,
        channel,
        request.meta.identifier,
        request.meta.identifier_values,
    )
    if resolution.not_found:
        target = (
            resolution.not_found[0].target
            if len(resolution.not_found) == 1
            else "test_campaign_meta.identifier_values"
        )
        raise NotFound(
            "Some identifier_values name no user or segment of this workspace.",
            target=target,
            details=resolution.not_found,
        )
    if resolution.unusable:
        raise Unprocessable("Some identifier_values cannot receive a test.", details=resolution.unusable)
    if resolution.too_many:
        raise ValidationFailed(resolution.too_many)
    if messages * len(resolution.recipients) > MAX_SENDS:
        raise ValidationFailed(
            [
                Problem(
                    "OUT_OF_RANGE",
                    "test_campaign_meta",
                    f"This test would send {messages} messages to {len(resolution.recipients)} recipients "
                    f"(more than {MAX_SENDS}); narrow it with platform, locale_name or variation.",
                )
            ]
        )
    return resolution.recipients


async def _personalized(
    request: CampaignTestRequest, prepared: PreparedContent, recipient: Recipient
) -> tuple[dict[str, Any] | None, str | None]:
    """The content for one recipient, or why there is none."""
    if recipient.address is None:
        return None, recipient.unreachable_reason or "The recipient has no address."
    # Overrides win over the profile; for an address that is no user they are all there is.
    user = {**(recipient.profile or {}), **request.user_overrides}
    try:
        return await personalize_content(prepared, user, request.event_attributes), None
    except RenderError as exc:
        return None, f"Personalization failed: {exc}"


async def _execute(
    clock: Clock,
    dispatcher: Dispatcher,
    workspace_id: str,
    request: CampaignTestRequest,
    plan: _Plan,
    claimed: ClaimedWrites[Results],
) -> Results:
    """Send every message of the plan: the first alone (its write claims the request's key, and a
    replay or 409 stops everything there), those between side by side through the connector's
    lanes, the last alone (its write records the answer, made of every outcome). In turn, a
    receiver taking a second an answer held a request of 100 sends for 100 seconds."""
    rendered = [await _personalized(request, plan.prepared, recipient) for recipient in plan.recipients]
    sends = [
        (item, listed, content, rendering_failed)
        for item in plan.messages
        for listed, (content, rendering_failed) in zip(plan.recipients, rendered, strict=True)
    ]
    if not sends:
        await claimed.apart()
        return {}
    slots = [_Send.of(clock, workspace_id, plan, *send) for send in sends]
    *before, final = slots
    done: list[Outcome | None] = [None] * len(before)
    if before:
        done[0] = await before[0].send(dispatcher, plan, claimed.first())
    lanes = asyncio.Semaphore(dispatcher.requests(plan.connector))

    async def side_by_side(index: int) -> None:
        async with lanes:
            done[index] = await slots[index].send(dispatcher, plan)

    async with asyncio.TaskGroup() as group:
        for index in range(1, len(before)):
            group.create_task(side_by_side(index))
    outcomes: dict[str, list[tuple[Recipient, Outcome]]] = {}
    for slot, outcome in zip(before, done, strict=True):
        assert outcome is not None
        outcomes.setdefault(slot.key, []).append((slot.recipient, outcome))
    # The last send's outcome completes the answer, which its write records with the key's.
    results = outcomes.setdefault(final.key, [])
    first = None if before else claimed.first()
    await final.send(dispatcher, plan, first, _answered(claimed, outcomes, results, final.recipient))
    return _answer(outcomes)


@dataclass(frozen=True)
class _Send:
    """One message of a test send, for one recipient, as the live message will be tagged."""

    key: str  # its slot's (platform, locale, variation): the answer's grouping
    recipient: Recipient
    envelope: Envelope
    unsendable: str | None  # why it cannot be sent (rendering failed, no address on the platform)

    @classmethod
    def of(
        cls,
        clock: Clock,
        workspace_id: str,
        plan: _Plan,
        item: SlotMessage,
        listed: Recipient,
        content: dict[str, Any] | None,
        rendering_failed: str | None,
    ) -> _Send:
        now = clock.now()
        recipient = listed.on(item.slot.platform)  # its token on this platform
        reason = rendering_failed or (recipient.unreachable_reason if recipient.address is None else None)
        message = tagged(
            message_at(content or plan.prepared.campaign_content, item.path),
            item.slot.channel is Channel.EMAIL,
            plan.utm,
        )
        advanced = push_options(plan.advanced, item.slot.platform, now) if item.slot.platform else None
        envelope = Envelope(
            object_id(now), workspace_id, plan.campaign_id, True, item.slot, recipient, message, now, advanced
        )
        return cls(item.slot.key, recipient, envelope, reason)

    async def send(
        self,
        dispatcher: Dispatcher,
        plan: _Plan,
        first: FirstWrite | None = None,
        last: Callable[[Outcome], Joined | None] | None = None,
    ) -> Outcome:
        if self.unsendable is not None:
            return await dispatcher.unsent(plan.connector, self.envelope, self.unsendable, first, last)
        return await dispatcher.send(plan.connector, self.envelope, first, last)


def _answered(
    claimed: ClaimedWrites[Results],
    outcomes: dict[str, list[tuple[Recipient, Outcome]]],
    results: list[tuple[Recipient, Outcome]],
    recipient: Recipient,
) -> Callable[[Outcome], Joined | None]:
    def answered(outcome: Outcome) -> Joined | None:
        results.append((recipient, outcome))
        return claimed.last(_answer(outcomes))

    return answered


def _answer(outcomes: dict[str, list[tuple[Recipient, Outcome]]]) -> Results:
    return {key: _result(results) for key, results in outcomes.items()}


def _result(results: list[tuple[Recipient, Outcome]]) -> dict[str, str]:
    """SENT when every recipient got the message; else FAILED, saying who did not and why."""
    failed = [(recipient, outcome) for recipient, outcome in results if not outcome.sent]
    if not failed:
        return {"status": "SENT"}
    if len(results) == 1:
        return {"status": "FAILED", "failure_reason": failed[0][1].reason or "The send failed."}
    reasons = "; ".join(f"{recipient.identifier_value}: {outcome.reason}" for recipient, outcome in failed)
    return {
        "status": "FAILED",
        "failure_reason": f"{len(failed)} of {len(results)} recipients failed: {reasons}",
    }
