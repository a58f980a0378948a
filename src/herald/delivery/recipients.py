"""Who a test goes to: `identifier_values` resolved against the workspace's users (one query).

- A value that names no user is an error (404, nothing sent), except an `EMAIL` address: it is
  sent to as given, with unpersonalized content.
- When several users share an e-mail, mobile or advertising id, the one with the lowest
  customer id is used (deterministic).
- `CUSTOM_SEGMENT` values name static segments (by id or name); their members, in customer id
  order. A test goes to at most 10 recipients: segments with more members in all are refused (400),
  never cut to the first 10 (the tester would not know who was left out). Filter-based segments
  are not test targets.
- Recipients are de-duplicated (two values naming one user give one recipient).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import BindParameter, Select, bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from herald.audience import store as audience_store
from herald.audience.models import USER_COLUMNS, Segment, SegmentMember, User, UserRow, UserValues
from herald.campaigns.schemas.common import Channel
from herald.delivery.messages import Recipient
from herald.delivery.testsend_request import MAX_RECIPIENTS, Identifier
from herald.direct_reads import RowSource, padded_in, padded_values, rows_in
from herald.personalization import users
from herald.problems import Problem

_COLUMNS: dict[Identifier, InstrumentedAttribute[Any]] = {
    Identifier.USER_ATTRIBUTE_UNIQUE_ID: User.customer_id,
    Identifier.ID: User.customer_id,
    Identifier.USER_ATTRIBUTE_USER_EMAIL: User.email,
    Identifier.EMAIL: User.email,
    Identifier.USER_ATTRIBUTE_USER_MOBILE: User.mobile,
    Identifier.MOBILE_NUMBER: User.mobile,
    # Herald keeps one advertising id per user (GAID on Android, IDFA on iOS) in `gaid`.
    Identifier.SVC_GAID: User.gaid,
    Identifier.ADVERTISING_IDENTIFIER: User.gaid,
}
VALUES_PATH = "test_campaign_meta.identifier_values"


@cache
def _users_by(identifier: Identifier, count: int) -> Select[Any]:
    """The users named by `count` values (a size class, `padded_in`), each row with the value that
    named it, built and compiled once per identifier and class: every test send reads them."""
    workspace_id: BindParameter[str] = bindparam("workspace_id")
    if identifier is Identifier.PUSH_ID:  # any token of the user (`store.push_token_holders`)
        holders = audience_store.push_token_holders(
            workspace_id, lambda token: padded_in(token, "value", count)
        ).subquery()
        return (
            select(*USER_COLUMNS, holders.c.token.label("named_by"))
            .join(holders, User.customer_id == holders.c.customer_id)
            .where(User.workspace_id == workspace_id)
            .order_by(User.customer_id)
        )
    column = _COLUMNS[identifier].expression
    return (
        select(*USER_COLUMNS, column.label("named_by"))
        .where(User.workspace_id == workspace_id, padded_in(column, "value", count))
        .order_by(User.customer_id)
    )


@dataclass
class Resolution:
    recipients: list[Recipient] = field(default_factory=list)
    not_found: list[Problem] = field(default_factory=list)  # → 404
    unusable: list[Problem] = field(default_factory=list)  # → 422
    too_many: list[Problem] = field(default_factory=list)  # → 400: more than MAX_RECIPIENTS


def profile_of(user: UserValues) -> dict[str, Any]:
    """The attribute values templates see for this user (exactly as the C9 preview sees them)."""
    return users.attribute_values(user)


def recipient_for(user: UserValues, value: str, channel: Channel) -> Recipient:
    contact = {"push_id": user.push_id, "gaid": user.gaid} if channel is Channel.PUSH else {}
    address = user.email if channel is Channel.EMAIL else user.push_id
    reason = None
    if not address:
        what = "e-mail address" if channel is Channel.EMAIL else "push token (push_id)"
        reason = f"User '{user.customer_id}' has no {what}."
    return Recipient(value, address, user.customer_id, profile_of(user), reason, contact)


async def resolve(
    source: RowSource,
    session: AsyncSession,
    workspace_id: str,
    channel: Channel,
    identifier: Identifier,
    values: Sequence[str],
) -> Resolution:
    """Users and their tokens are read from `source` (compiled single statements); custom segments,
    rarer, through `session`'s ORM."""
    if identifier is Identifier.CUSTOM_SEGMENT:
        resolution = await _resolve_segments(session, workspace_id, channel, values)
    else:
        resolution = await _resolve_users(source, workspace_id, channel, identifier, values)
    resolution.recipients = _unique(resolution.recipients)
    if len(resolution.recipients) > MAX_RECIPIENTS and not resolution.too_many:
        # Each segment is within the cap, together they are not (only segments name several).
        resolution.too_many.append(
            Problem(
                "OUT_OF_RANGE",
                VALUES_PATH,
                f"The segments have {len(resolution.recipients)} members in all; "
                f"a test goes to at most {MAX_RECIPIENTS} recipients.",
            )
        )
    if channel is Channel.PUSH:
        resolution.recipients = await with_push_tokens(source, workspace_id, resolution.recipients)
    return resolution


async def with_push_tokens(
    source: RowSource, workspace_id: str, recipients: list[Recipient]
) -> list[Recipient]:
    """The recipients with their per-platform push tokens (one query; set on them, not copied)."""
    ids = [r.customer_id for r in recipients if r.customer_id is not None]
    tokens = await audience_store.push_tokens(source, workspace_id, ids) if ids else {}
    for recipient in recipients:
        if recipient.customer_id in tokens:
            recipient.tokens = tokens[recipient.customer_id]
    return recipients


async def _resolve_users(
    source: RowSource, workspace_id: str, channel: Channel, identifier: Identifier, values: Sequence[str]
) -> Resolution:
    by_value: dict[str, UserRow] = {}
    distinct = list(dict.fromkeys(values))
    values_of = {"workspace_id": workspace_id, **padded_values("value", distinct)}
    rows = await rows_in(source, _users_by(identifier, len(distinct)), values_of)
    for *columns, named_by in rows:
        by_value.setdefault(str(named_by), UserRow(*columns))
    resolution = Resolution()
    for index, value in enumerate(values):
        found = by_value.get(value)
        if found is not None:
            resolution.recipients.append(recipient_for(found, value, channel))
        elif identifier is Identifier.EMAIL:
            resolution.recipients.append(Recipient(value, value))  # not a user: unpersonalized
        else:
            resolution.not_found.append(
                Problem("NOT_FOUND", f"{VALUES_PATH}.{index}", f"No user with {identifier.value} '{value}'.")
            )
    return resolution


async def _resolve_segments(
    session: AsyncSession, workspace_id: str, channel: Channel, values: Sequence[str]
) -> Resolution:
    query = select(Segment).where(
        Segment.workspace_id == workspace_id, or_(Segment.id.in_(set(values)), Segment.name.in_(set(values)))
    )
    segments = (await session.scalars(query)).all()
    resolution = Resolution()
    for index, value in enumerate(values):
        segment = next((s for s in segments if s.id == value), None) or next(
            (s for s in segments if s.name == value), None
        )
        target = f"{VALUES_PATH}.{index}"
        if segment is None:
            resolution.not_found.append(Problem("NOT_FOUND", target, f"No custom segment '{value}'."))
        elif segment.kind != "static":
            resolution.unusable.append(
                Problem(
                    "INVALID_ENUM_VALUE",
                    target,
                    f"Segment '{segment.name}' is filter-based; test sends go to a static segment's members.",
                )
            )
        else:
            members = await _members(session, workspace_id, segment.id, channel)
            if not members:
                resolution.unusable.append(
                    Problem("OUT_OF_RANGE", target, f"Segment '{segment.name}' has no members.")
                )
            elif len(members) > MAX_RECIPIENTS:
                size = await _size(session, workspace_id, segment.id)
                resolution.too_many.append(
                    Problem(
                        "OUT_OF_RANGE",
                        target,
                        f"Segment '{segment.name}' has {size} members; "
                        f"a test goes to at most {MAX_RECIPIENTS} recipients.",
                    )
                )
            resolution.recipients += members
    return resolution


async def _members(
    session: AsyncSession, workspace_id: str, segment_id: str, channel: Channel
) -> list[Recipient]:
    # A member is known to the tester by customer id, so that is how results name it.
    query = (
        select(SegmentMember.customer_id, User)
        .outerjoin(
            User,
            (User.workspace_id == SegmentMember.workspace_id)
            & (User.customer_id == SegmentMember.customer_id),
        )
        .where(SegmentMember.workspace_id == workspace_id, SegmentMember.segment_id == segment_id)
        .order_by(SegmentMember.customer_id)
        .limit(MAX_RECIPIENTS + 1)  # one more than a test may take: enough to know it is too big
    )
    found: list[Recipient] = []
    for customer_id, user in (await session.execute(query)).all():
        if user is None:
            reason = f"Segment member '{customer_id}' is not a known user."
            found.append(Recipient(customer_id, None, customer_id, None, reason))
        else:
            found.append(recipient_for(user, customer_id, channel))
    return found


async def _size(session: AsyncSession, workspace_id: str, segment_id: str) -> int:
    query = select(func.count()).where(
        SegmentMember.workspace_id == workspace_id, SegmentMember.segment_id == segment_id
    )
    return int((await session.scalar(query)) or 0)


def _unique(recipients: list[Recipient]) -> list[Recipient]:
    seen: set[str] = set()
    unique: list[Recipient] = []
    for recipient in recipients:
        key = recipient.customer_id or f"address:{recipient.address}"
        if key not in seen:
            seen.add(key)
            unique.append(recipient)
    return unique
