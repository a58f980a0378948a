"""What an execution sends, read from the campaign's latest version at each tick (so content
changes to a SENDING campaign apply to messages not yet dispatched): the connector, the messages
by (locale, variation), each group prepared once for personalization, and the per-user choice of
locale, variation and push platform.

Rendering is the test sends' (`delivery.rendering`, the C9 engine); only the slot choice and the
tracking parameters are the engine's own.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.basic_details import PushBasicDetails
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType, Platform
from herald.campaigns.schemas.content import DEFAULT_LOCALE
from herald.campaigns.schemas.goals import ConversionGoalDetails
from herald.campaigns.validation import load_document
from herald.db import Database
from herald.delivery.engine.conversions import goals_of
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.resolve import LiveCampaign
from herald.delivery.engine.split import (
    VARIATION_MODULUS,
    VariationKey,
    locale_for,
    share_bounds,
    tagged,
    utm_of,
    variation_bounds_at,
    variation_for,
    variation_key,
)
from herald.delivery.messages import Recipient
from herald.delivery.models import Connector
from herald.delivery.push_options import push_options
from herald.delivery.rendering import (
    PreparedContent,
    RenderError,
    message_at,
    personalize_content,
    personalize_contents,
    prepare_content,
    pruned_content,
)
from herald.delivery.testsend_connector import choose_connector
from herald.delivery.testsend_plan import SlotMessage, slot_messages
from herald.errors import ValidationFailed

Group = tuple[str, str]  # (locale, variation)
Version = tuple[str, int]

log = logging.getLogger("herald.delivery.engine")


@dataclass
class SendPlan:
    campaign: LiveCampaign
    channel: Channel
    connector: Connector | None
    problem: str | None  # why nothing can be sent (no connector, unpreparable content)
    groups: dict[Group, list[SlotMessage]] = field(default_factory=dict)
    prepared: dict[Group, PreparedContent] = field(default_factory=dict)
    locales: list[str] = field(default_factory=list)
    shares: list[tuple[str, float]] = field(default_factory=list)
    # The variation key of the last user of each variation but the last (None: that one is empty).
    bounds: list[VariationKey | None] = field(default_factory=list)
    utm: dict[str, str] = field(default_factory=dict)
    # (row id, revision) of the campaign version planned from: a new version or any write since
    # means the content may have changed (`live_version`).
    version: Version | None = None

    @functools.cached_property
    def goals(self) -> ConversionGoalDetails | None:
        """The campaign's conversion goals (None: no attribution windows to open), read once."""
        return goals_of(self.campaign.components)

    def group_for(self, customer_id: str, rank: int, profile: dict[str, Any]) -> Group:
        """The user's (locale, variation); `rank` is its execution rank, which is
        `rank_of(campaign, customer_id)` (taken from the claim: not hashed again)."""
        locale = locale_for(profile.get("locale"), self.locales, DEFAULT_LOCALE)
        names = [name for name, _ in self.shares]
        key = variation_key(rank, customer_id)
        variation = variation_for(key, self.bounds, names)
        if (locale, variation) not in self.groups:  # a locale without this variation: the default's
            locale = (
                DEFAULT_LOCALE if (DEFAULT_LOCALE, variation) in self.groups else next(iter(self.groups))[0]
            )
        if (locale, variation) not in self.groups:
            variation = next(v for (loc, v) in self.groups if loc == locale)
        return locale, variation

    def messages_for(self, group: Group, profile: dict[str, Any]) -> list[SlotMessage]:
        """The messages of the group a user may get: Email's one, Push's for every campaign
        platform (which of them a user gets depends on its tokens: `deliveries`)."""
        messages = self.groups[group]
        return messages[:1] if self.channel is Channel.EMAIL else messages

    def deliveries(self, group: Group, recipient: Recipient) -> list[tuple[SlotMessage, Recipient]]:
        """The messages this user is sent, each with the recipient as it reaches them: Email's one;
        Push's for every campaign platform it has a token for (one message per platform), or, for a
        user with only a `push_id`, the campaign's first platform."""
        messages = self.groups[group]
        if self.channel is Channel.EMAIL or not recipient.tokens:
            return [(messages[0], recipient)] if messages and recipient.address else []
        return [
            (message, recipient.on(message.slot.platform))
            for message in messages
            if message.slot.platform is not None and message.slot.platform.value in recipient.tokens
        ]

    def advanced_for(self, item: SlotMessage, now: datetime) -> dict[str, Any] | None:
        if self.channel is not Channel.PUSH:
            return None
        return push_options(self.campaign.document.advanced, item.slot.platform, now)

    async def render(self, group: Group, profile: dict[str, Any], item: SlotMessage) -> dict[str, Any]:
        """The message for this user, without an event (a user's send goes through `render_many`);
        raises RenderError when it cannot be rendered for them."""
        return self._message(await personalize_content(self.prepared[group], profile, {}), item)

    async def render_many(
        self,
        wanted: Sequence[tuple[Group, dict[str, Any], Sequence[SlotMessage]]],
        events: Sequence[dict[str, Any] | None],
    ) -> list[list[dict[str, Any] | RenderError]]:
        """`render` for a window of users, each with its event (`event.*`: none, a business
        event's, or the event of the user's firing): see `render_plans`."""
        return (await render_plans([(self, wanted, events)]))[0]

    def _message(self, content: dict[str, Any], item: SlotMessage) -> dict[str, Any]:
        return tagged(message_at(content, item.path), self.channel is Channel.EMAIL, self.utm)


async def render_plans(
    parts: Sequence[
        tuple[
            SendPlan,
            Sequence[tuple[Group, dict[str, Any], Sequence[SlotMessage]]],
            Sequence[dict[str, Any] | None],
        ]
    ],
) -> list[list[list[dict[str, Any] | RenderError]]]:
    """Windows of users of several plans (campaigns), each user with its event: each user's content
    rendered once for all its messages, every user of every plan in one worker-thread hop; per
    plan, per user, per message, its body or why it cannot be rendered."""
    contents = await personalize_contents(
        [
            (plan.prepared[group], profile, event or {})
            for plan, wanted, events in parts
            for (group, profile, _), event in zip(wanted, events, strict=True)
        ]
    )
    found: list[list[list[dict[str, Any] | RenderError]]] = []
    at = 0
    for plan, wanted, _ in parts:
        bodies: list[list[dict[str, Any] | RenderError]] = []
        for (_, _, messages), content in zip(wanted, contents[at : at + len(wanted)], strict=True):
            if isinstance(content, RenderError):
                # Each message fails with its own failures only: a user's Android message goes
                # out when only the iOS one cannot be rendered.
                own = [(item, content.rendered_for(item.path)) for item in messages]
                bodies.append(
                    [
                        rendered if isinstance(rendered, RenderError) else plan._message(rendered, item)
                        for item, rendered in own
                    ]
                )
            else:
                bodies.append([plan._message(content, item) for item in messages])
        at += len(wanted)
        found.append(bodies)
    return found


def _shares(campaign: LiveCampaign, variations: list[str]) -> list[tuple[str, float]]:
    content = campaign.document.campaign_content
    details = content.variation_details if content is not None else None
    manual = details.manual_distribution_percentage if details is not None else None
    if manual and all(name in manual for name in variations):
        return [(name, float(manual[name])) for name in variations]
    return [(name, 100 / len(variations)) for name in variations]


async def _variation_bounds(
    session: AsyncSession, execution: Execution, shares: list[tuple[str, float]]
) -> list[VariationKey | None]:
    """Where the MANUAL split cuts the execution's audience (less the control group), read in one
    ordered pass by the database: exact shares to one user, the same for every worker and tick."""
    mine = [ExecutionUser.workspace_id == execution.workspace_id, ExecutionUser.execution_id == execution.id]
    # Read again: the caller's row may predate the resolution that fixed the control group.
    threshold = await session.scalar(
        select(Execution.control_threshold).where(
            Execution.workspace_id == execution.workspace_id, Execution.id == execution.id
        )
    )
    if threshold is not None:
        mine.append(ExecutionUser.rank > threshold)
    total = int(await session.scalar(select(func.count()).select_from(ExecutionUser).where(*mine)) or 0)
    positions = variation_bounds_at(total, shares)
    wanted = [position + 1 for position in positions if position >= 0]
    key = ExecutionUser.rank % VARIATION_MODULUS
    # Ties of the key (1 in 2^31 per pair) are broken by customer id as Python orders it; a
    # collation that orders ids otherwise could move one tied user across a cut.
    numbered = (
        select(
            key.label("key"),
            ExecutionUser.customer_id,
            func.row_number().over(order_by=(key, ExecutionUser.customer_id)).label("n"),
        )
        .where(*mine)
        .subquery()
    )
    found: dict[int, VariationKey] = {}
    if wanted:
        rows = await session.execute(
            select(numbered.c.n, numbered.c.key, numbered.c.customer_id).where(numbered.c.n.in_(wanted))
        )
        found = {int(n): (int(k), str(c)) for n, k, c in rows.all()}
    return [found.get(position + 1) if position >= 0 else None for position in positions]


def streams(campaign: LiveCampaign) -> bool:
    """Whether the campaign's users can be sent while its audience is still being written: not when
    a MANUAL split over several variations cuts the whole audience (`_variation_bounds`), nor when
    an audience limit picks which users are sent (by rank, over the whole audience)."""
    document = campaign.document
    limit = document.campaign_audience_limit
    if limit is not None and limit.is_campaign_audience_limit_enabled:
        return False
    content = document.campaign_content
    if content is None:
        return True
    variations = {item.slot.variation for item in slot_messages(content, document.basic_details)}
    return len(variations) <= 1


async def plan_sends(session: AsyncSession, campaign: LiveCampaign, execution: Execution) -> SendPlan:
    if execution.child_campaign_id is not None:
        campaign = await _as_run_began(session, campaign, execution.child_campaign_id)
    document = campaign.document
    channel = Channel(campaign.channel)
    choice = await choose_connector(
        await session.connection(), campaign.workspace_id, channel, None, document.connector
    )
    problems = [*choice.bad_request, *choice.unprocessable]
    plan = SendPlan(campaign, channel, choice.connector, "; ".join(p.message for p in problems) or None)
    plan.version = await _version(session, campaign.workspace_id, campaign.campaign_id)
    content = document.campaign_content
    if content is None:
        plan.problem = plan.problem or "The campaign has no content."
        return plan
    for item in slot_messages(content, document.basic_details):
        plan.groups.setdefault((item.slot.locale, item.slot.variation), []).append(item)
    basic = document.basic_details
    listed = basic.platforms if isinstance(basic, PushBasicDetails) else None
    if listed:
        # Each group's messages in the order of the campaign's `platforms`: a user with only a
        # `push_id` is sent the first (`deliveries`), the campaign's first platform.
        rank: dict[Platform | None, int] = {platform: index for index, platform in enumerate(listed)}
        for messages in plan.groups.values():
            messages.sort(key=lambda item: rank.get(item.slot.platform, len(rank)))
    if not plan.groups:
        plan.problem = plan.problem or "The campaign has no message for its platforms."
        return plan
    plan.locales = list(dict.fromkeys(locale for locale, _ in plan.groups))
    plan.shares = _shares(campaign, list(dict.fromkeys(variation for _, variation in plan.groups)))
    if len(plan.shares) > 1 and execution.trigger:
        # A triggered audience is never complete: each user's variation is the share its key falls
        # in (exact on average, the same for the user at every firing).
        plan.bounds = share_bounds(plan.shares)
    elif len(plan.shares) > 1:
        plan.bounds = await _variation_bounds(session, execution, plan.shares)
    plan.utm = utm_of(document.utm_params)
    try:
        for group, items in plan.groups.items():
            written = [(item.path, item.message()) for item in items]
            plan.prepared[group] = await prepare_content(
                session, campaign.workspace_id, channel, pruned_content(written)
            )
    except ValidationFailed as exc:
        # A content that cannot be prepared (a custom template deleted since the publish) has no
        # message to render for anyone: each user fails with the reason, the run goes on.
        plan.problem = plan.problem or "; ".join(f"{d.target}: {d.message}" for d in exc.details)
        plan.groups.clear()
        plan.prepared.clear()
    return plan


async def _as_run_began(session: AsyncSession, campaign: LiveCampaign, child_id: str) -> LiveCampaign:
    """A periodic run's campaign as it was when the run began: "periodic campaigns apply changes
    from the next run" (the spec), so a run in flight sends what it began with, whatever the
    campaign's latest version says; its child campaign holds a copy of that (`periodic`). The plan
    keeps the latest version's `version`: a change is still seen (and the plan made again, with
    the same content), and a campaign no longer sending still halts the run."""
    row = await session.scalar(
        select(Campaign).where(
            Campaign.workspace_id == campaign.workspace_id,
            Campaign.campaign_id == child_id,
            Campaign.is_latest,
        )
    )
    began = live_campaign(row) if row is not None else None
    if began is None:
        return campaign
    return replace(campaign, document=began.document, components=began.components)


def _latest(workspace_id: str, campaign_id: str) -> Select[tuple[str, str, int]]:
    return select(Campaign.status, Campaign.id, Campaign.revision).where(
        Campaign.workspace_id == workspace_id, Campaign.campaign_id == campaign_id, Campaign.is_latest
    )


async def _version(session: AsyncSession, workspace_id: str, campaign_id: str) -> Version | None:
    row = (await session.execute(_latest(workspace_id, campaign_id))).first()
    return None if row is None else (str(row.id), int(row.revision))


async def live_versions(
    session: AsyncSession, workspace_id: str, campaign_ids: list[str]
) -> dict[str, Version]:
    """`live_version`'s version for several campaigns in one read (a campaign not found is left out)."""
    rows = await session.execute(
        select(Campaign.campaign_id, Campaign.id, Campaign.revision).where(
            Campaign.workspace_id == workspace_id, Campaign.campaign_id.in_(campaign_ids), Campaign.is_latest
        )
    )
    return {str(campaign_id): (str(row_id), int(revision)) for campaign_id, row_id, revision in rows}


async def live_version(
    database: Database, workspace_id: str, campaign_id: str
) -> tuple[bool, Version | None]:
    """Whether the campaign is still SENDING, and the version it is at (one indexed read)."""
    async with database.reader() as session:
        row = (await session.execute(_latest(workspace_id, campaign_id))).first()
    if row is None:
        return False, None
    return row.status == CampaignStatus.SENDING.value, (str(row.id), int(row.revision))


def live_campaign(row: Campaign) -> LiveCampaign | None:
    """The engine's reading of a stored campaign version; None (logged) when it cannot be read."""
    document, problems = load_document(Channel(row.channel), DeliveryType(row.delivery_type), row.components)
    if document is None:
        log.error(
            "campaign %s/%s cannot be read for sending: %s", row.workspace_id, row.campaign_id, problems
        )
        return None
    return LiveCampaign(
        row.workspace_id,
        row.campaign_id,
        row.channel,
        document,
        dict(row.components or {}),
        version=(str(row.id), int(row.revision)),
        published_at=row.published_at,
    )


async def replan(database: Database, plan: SendPlan, execution: Execution) -> SendPlan:
    """The plan made again from the campaign's latest version: a content change to a SENDING
    campaign applies to every message not yet handed to a connector. The old plan when the new
    version cannot be read."""
    async with database.reader() as session:
        row = await session.scalar(
            select(Campaign).where(
                Campaign.workspace_id == plan.campaign.workspace_id,
                Campaign.campaign_id == plan.campaign.campaign_id,
                Campaign.is_latest,
            )
        )
        campaign = live_campaign(row) if row is not None else None
        if campaign is None:
            return plan
        return await plan_sends(session, campaign, execution)
