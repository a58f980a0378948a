"""Dispatching an execution: batches of users claimed, decided, rendered and handed to connectors.

A batch is claimed in one short write transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so
several workers take disjoint batches; SQLite has one writer, which the engine processes on a file
take in turns, so the users' rows are read before it, `_read_ahead`): each user is held out,
suppressed, deferred or left waiting by the delivery controls (`controls.py`), or CLAIMED.
No transaction is open while messages go out. The batch is sent in windows of users
(`Dispatcher.deliver_many`): the window's outbox rows committed PENDING in one transaction, the
messages handed over side by side, their outcomes and the users' states committed in one more; each
outbox id is derived from (execution, user, platform), so the outbox primary key makes a second
message for the same slot impossible, whatever the interleaving of workers. The transaction that
writes a window's rows first reads the campaign's status: once it is no longer SENDING (STOP), or
its `expiry_time` has passed by the worker's clock, nothing more is handed to a connector.

Failures: a transient one puts the user in RETRY until the message's next attempt time (the
dispatcher's backoff), when it is claimed again and only its unsettled messages are attempted. A
worker that dies leaves its users CLAIMED; once their lease (`HERALD_DELIVERY_LEASE_SECONDS`, on
the worker's clock) has passed, another worker takes them over and attempts again, under the same
ids, the messages left PENDING (outcome unknown: at least once on the wire, once per id). A live
worker renews its claim on the batch in hand before a window once it is a third of the lease old
(`_Renewal`), so a batch sent slower than the lease is not taken over while it is sent. When the
campaign's connector reaches its error threshold, the execution is PAUSED (`engine.pause`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, cast

import orjson
from sqlalchemy import (
    JSON,
    ColumnElement,
    Integer,
    Select,
    String,
    Table,
    TextClause,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from herald import planner_statistics
from herald.audience.models import USER_COLUMNS, User, UserRow, UserValues
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus
from herald.clock import utc
from herald.db import Database, UTCDateTime
from herald.db_errors import retry_unavailable
from herald.delivery import outbox
from herald.delivery.dispatch import Dispatcher
from herald.delivery.engine import controls, conversions, halting
from herald.delivery.engine.content import (
    Group,
    SendPlan,
    Version,
    live_versions,
    render_plans,
    replan,
)
from herald.delivery.engine.models import PENDING_FIRINGS, Execution, ExecutionUser
from herald.delivery.engine.pause import pause
from herald.delivery.engine.rank import RANK_BITS
from herald.delivery.engine.throttle import Regrant
from herald.delivery.messages import Envelope, Outcome, Recipient
from herald.delivery.models import Connector, OutboxEntry
from herald.delivery.recipients import recipient_for, with_push_tokens
from herald.delivery.rendering import RenderError
from herald.delivery.testsend_plan import SlotMessage
from herald.direct_reads import rows_in
from herald.direct_writes import Transaction, WriteChain, Writer, execute_in, execute_many_in
from herald.sql_lists import one_of

log = logging.getLogger("herald.delivery.engine")

# Users claimed at once by `dispatch`, at least (a window larger than that is claimed whole; a
# dispatch's first batch is one window, so that its first messages need not wait for this). On
# PostgreSQL a claim is a dozen round trips and a commit during which nothing is on the wire: for
# 20,000 users one message per POST, claims of 200 took 2.5 s of the 27 s, claims of 1,000 1.4 s
# of 23 s. SQLite's claim costs CPU, not waiting, whatever its size, and holds the one writer's
# lock that the API's writes queue behind: it stays at 200 there. A worker killed leaves at most
# twice this many users claimed (the batch in hand, and the next one, claimed ahead) until their
# lease passes; then another worker takes them over.
BATCH = {"postgresql": 1000, "sqlite": 200}
# Windows whose rows are written ahead of the two on the wire (`_Flight`): one. A worker on
# PostgreSQL, one message per POST, 30,000 users, was idle 10-26 % of a send with none ahead;
# with one ahead it sent 1,723-2,166 msg/s against 1,612-1,832 without, runs alternated
# (benchmarks/README.md, the nineteenth pass). On SQLite, whose one process is busy throughout,
# it changed nothing measurable. The price: when a worker dies, one window more may go out twice
# (each message under its one id); a STOP answers after one window more is handed over.
AHEAD = 1
# Messages per lane in a window when a request carries one message (a webhook one per POST, SMTP):
# each window's two transactions are then shared by four times as many messages. Windows of one
# message per lane cost the worker about 245 µs of CPU per message over 100,000 users on
# PostgreSQL, of four 210-220 µs (the database's share 37 → 24 µs), 3,600-3,700 → 3,900-4,300
# msg/s (benchmarks/README.md, the twenty-third pass); of eight, no less. The price is the one of
# `AHEAD`, four times over: a worker killed may leave four times as many messages to be sent again
# (each under its one id), and a STOP answers after at most three windows more are handed over.
# Through one lane, one message per window still (see `_Flight`).
ROUNDS = 4
# Users claimed at once per EVENT execution by `dispatch_lanes`: a round's messages go out as one
# window, so a larger round would hold the next events' messages back behind it.
ROUND = 200


# A push user with a token for none of the campaign's platforms (its tokens went since the audience
# was resolved): suppressed, as the resolution leaves out users without an address.
NO_TOKEN = controls.Reason.NO_ADDRESS


class UserState:
    PENDING = "PENDING"
    CLAIMED = "CLAIMED"
    RETRY = "RETRY"
    SENT = "SENT"
    FAILED = "FAILED"
    HELD_OUT = "HELD_OUT"
    SUPPRESSED = "SUPPRESSED"


# Built once, and run on the driver (`rows_in`): through the ORM session, this read of a claimed
# batch's users (a statement rendered anew for each list, rows through its loading) was a sixth of
# the engine's CPU in batched mode.
_USERS_OF = select(*USER_COLUMNS).where(
    User.workspace_id == bindparam("workspace_id"), one_of(User.customer_id, "ids")
)


async def _users_of(session: AsyncSession, workspace_id: str, ids: list[str]) -> dict[str, UserRow]:
    rows = await rows_in(await session.connection(), _USERS_OF, {"workspace_id": workspace_id, "ids": ids})
    return {row[0]: UserRow(*row) for row in rows}


@dataclass(slots=True)
class _Claimed:
    customer_id: str
    user: UserValues
    rank: int  # the user's execution rank: `rank_of(campaign, customer_id)`
    firing: str = ""  # the event of an EVENT execution's firing
    event: dict[str, Any] | None = None  # its attributes: `event.*` in personalization
    resumed: bool = False  # claimed before (a retry, or taken over): its messages may have rows
    token: str = ""  # the claim's (`_claim_in`): every user of a batch shares it


@dataclass(frozen=True)
class _Result:
    """How a user's messages went: all sent, one to try again at `retry_at`, or failed."""

    sent: bool
    reason: str | None = None
    retry_at: datetime | None = None
    variation: str | None = None  # of the user's messages (their attribution window's)
    suppressed: bool = False  # nothing to send it (its `reason` a `controls.Reason`)


def delivery_id(
    execution_id: str, customer_id: str, platform: str, firing: str = "", rank: int | None = None
) -> str:
    """The stable id of the one message of (execution, user, platform[, firing event]): outbox key
    and webhook id. With the user's `rank` (an execution with `ordered_ids`), it rises with the
    rank, the order an execution sends its users in: 4 hex digits of the execution, the rank's top
    40 bits, then 40 bits of the hash of the message's key. The outbox rows of a window then go to
    one place of the outbox's key index instead of a random page each (migration 0028). Two
    messages share an id only if their key hashes and ranks agree on those 80 bits. Without it,
    the hash alone (an execution begun before ids were ordered; the broadcast)."""
    key = f"{execution_id}\x00{customer_id}\x00{platform}" + (f"\x00{firing}" if firing else "")
    digest = hashlib.sha256(key.encode()).hexdigest()
    if rank is None:
        return digest[:24]
    return f"{_execution_prefix(execution_id)}{rank >> (RANK_BITS - 40):010x}{digest[:10]}"


@functools.lru_cache(maxsize=256)
def _execution_prefix(execution_id: str) -> str:
    return hashlib.sha256(execution_id.encode()).hexdigest()[:4]


# The users' state updates go to the table itself: an ORM-enabled UPDATE first looks for the
# entities it would change among those the session holds (none: the claim reads rows).
_USERS = cast(Table, ExecutionUser.__table__)


# Built once (per window, building the statement cost about as much as running it); the SET
# clause is the parameters' columns, as in `outbox._SETTLE`.
_SET_USERS = update(_USERS).where(
    _USERS.c.workspace_id == bindparam("row_workspace_id"),
    _USERS.c.execution_id == bindparam("row_execution_id"),
    one_of(_USERS.c.customer_id, "row_ids"),
)

# One row of an EVENT execution (a user has one per firing), by its primary key.
_SET_USER_FIRING = update(_USERS).where(
    _USERS.c.workspace_id == bindparam("row_workspace_id"),
    _USERS.c.execution_id == bindparam("row_execution_id"),
    _USERS.c.customer_id == bindparam("row_customer_id"),
    _USERS.c.firing == bindparam("row_firing"),
)

# PostgreSQL: those rows in one statement, their keys one JSON array of [customer, firing] pairs.
# An executemany runs the statement once per row there, each with its own executor start (about
# 0.2 ms of the server's CPU): at 1,000 events/s the server's one backend became the trigger
# worker's limit. On SQLite a statement per row costs no round trip, and stays.
_KEYS = func.json_array_elements(sql_cast(bindparam("row_keys", type_=String), JSON)).table_valued("value")
_SET_USER_FIRINGS = update(_USERS).where(
    _USERS.c.workspace_id == bindparam("row_workspace_id"),
    _USERS.c.execution_id == bindparam("row_execution_id"),
    _USERS.c.customer_id == _KEYS.c.value.op("->>", return_type=String)(literal_column("0")),
    _USERS.c.firing == _KEYS.c.value.op("->>", return_type=String)(literal_column("1")),
)


# "This execution" and "its users' rows", with the execution as parameters (`workspace_id`,
# `execution_id`): the statements built once below share them.
_THE_EXECUTION = and_(
    Execution.workspace_id == bindparam("workspace_id"), Execution.id == bindparam("execution_id")
)
_ITS_USERS = and_(
    ExecutionUser.workspace_id == bindparam("workspace_id"),
    ExecutionUser.execution_id == bindparam("execution_id"),
)


class Hold(Enum):
    """Which users of the batch in hand a write may change (`_set_users`)."""

    # Each named: the claim's own writes (under its transaction's row locks), and a message's
    # delivery: SENT is what happened, whatever was written meanwhile (another claim's outcome
    # for the same message settles it again, or finds it settled).
    ANY = "any"
    # Those still held by the caller's claim only: CLAIMED under its token (a claim writes a token
    # of its own with its users; a worker that takes a user over writes another). A window's
    # failures and a release change nothing of a user settled meanwhile, or taken over by another
    # worker (its outcome is that worker's to write): before, a worker whose users were taken over
    # while it sent them wrote them RETRY after the other worker had settled them SENT and ended
    # the execution, which stayed DONE with users waiting for ever.
    HELD = "held"


_HELD = and_(_USERS.c.state == UserState.CLAIMED, _USERS.c.claim_token == bindparam("held_token"))
# Per hold: the statement for users by id, for one (user, firing) row, for many such rows.
_SET_STATEMENTS = {
    Hold.ANY: (_SET_USERS, _SET_USER_FIRING, _SET_USER_FIRINGS),
    Hold.HELD: tuple(
        statement.where(_HELD) for statement in (_SET_USERS, _SET_USER_FIRING, _SET_USER_FIRINGS)
    ),
}


async def _set_users(
    connection: Writer,
    execution: Execution,
    ids: list[str],
    state: str,
    reason: str | None = None,
    firings: dict[str, str] | None = None,
    *,
    hold: Hold = Hold.ANY,
    token: str = "",
    count: bool = False,
    **more: object,
) -> int:
    """Set the state of users of the batch in hand (`hold`: which of them, `token` the caller's
    claim's); `firings` names the one row of each user an EVENT execution's batch holds (a user has
    one row per event there). The rows changed, when counted (0 in a `WriteChain`, and on SQLite's
    executemany unless `count`)."""
    if not ids:
        return 0
    by_ids, by_key, by_keys = _SET_STATEMENTS[hold]
    mine = {"row_workspace_id": execution.workspace_id, "row_execution_id": execution.id}
    if hold is not Hold.ANY:
        mine["held_token"] = token
    if not (firings and any(firings[c] for c in ids)):
        values = {**mine, "row_ids": ids, "state": state, "reason": reason, **more}
        return await execute_in(connection, by_ids, values)
    # One row per (user, firing), each found by its primary key: all in one statement on
    # PostgreSQL (`by_keys`), an executemany on SQLite. A user's rows grow with every event that
    # fires the campaign: picking them by customer id and then testing the pairs read all of
    # them, and at 1,000 events/s the worker fell behind within minutes.
    values = {"state": state, "reason": reason, **more}
    if connection.dialect.name == "postgresql":
        keys = orjson.dumps([(c, firings[c]) for c in ids]).decode()
        return await execute_in(connection, by_keys, {**mine, "row_keys": keys, **values})
    rows = [{**mine, "row_customer_id": c, "row_firing": firings[c], **values} for c in ids]
    assert not isinstance(connection, WriteChain), "writes are chained on PostgreSQL only"
    if count:  # rare (a stopped dispatch's batch): counted row by row
        return sum([await execute_in(connection, by_key, row) for row in rows])
    await execute_many_in(connection, by_key, rows)
    return 0


# The campaign's delivery controls read again (`controls.load`) in a claim's session.
Reload = Callable[[AsyncSession], Awaitable[controls.Rules]]


async def _claim(
    database: Database,
    plan: SendPlan,
    rules: controls.Rules,
    execution: Execution,
    now: datetime,
    lease: timedelta,
    size: int,
    reload: Reload | None = None,
) -> list[_Claimed] | None:
    """The next batch to send (maybe empty after hold-outs); None when no user can be claimed now.
    `reload`: the delivery controls read again as the claim begins, so the batch is decided with
    the workspace's settings as they are now (quiet hours or a cap set while a long send goes on
    apply from its next batch, not from its next tick: a send that lasts to its end has none)."""
    known: dict[str, UserRow] = {}
    if database.engine.dialect.name == "sqlite":
        # Read before the claim's write transaction, which holds the file's one writer (the other
        # engine processes and the API's writes wait for it): the workspace's settings and the
        # users the claim will most likely take. On PostgreSQL, where a claim holds only its own
        # rows, the reads twice over cost more than they saved (2 workers, 100,000 users, one
        # message per POST: 7,819 → 6,512 msg/s; batched 11,562 → 8,568).
        async with database.reader() as session:
            if reload is not None:
                rules, reload = await reload(session), None
            known = await _read_ahead(session, execution, now, size)
    async with database.writer() as session:
        if reload is not None:
            rules = await reload(session)
        found = await _claim_in(session, plan, rules, execution, now, lease, size, known)
        if found is None:
            await session.rollback()
            return None
        await conversions.open_windows(await session.connection(), found.windows)
        await session.commit()
    return found.users


# Built once: every claimed batch runs them (building them per claim was about 7 % of the trigger
# worker's samples at 1,000 events/s).
_EXECUTION_LOCKED = select(Execution).where(_THE_EXECUTION).with_for_update()
# A claim's users counted as dispatched, as a statement: through the execution's entity, the
# session's flush at the commit cost more than the claim's own updates of its users.
_DISPATCHED = (
    update(cast(Table, Execution.__table__))
    .where(
        Execution.workspace_id == bindparam("row_workspace_id"),
        Execution.id == bindparam("row_execution_id"),
    )
    .values(
        dispatched=Execution.dispatched + bindparam("more"), updated_at=bindparam("now", type_=UTCDateTime)
    )
)


def _claimable_in(
    order: Any, never_claimed: ColumnElement[bool] | TextClause
) -> tuple[Select[Any], Select[Any], Select[Any]]:
    """The users claimable in `order`: taken over (claimed before `lease_cutoff`), due retries, and
    never claimed (`never_claimed`, due), each locked (skipping users another worker holds)."""
    claimable = (
        select(
            ExecutionUser.customer_id,
            ExecutionUser.rank,
            ExecutionUser.state,
            ExecutionUser.firing,
            ExecutionUser.event,
        )
        .where(_ITS_USERS)
        .order_by(order)
        .limit(bindparam("size", type_=Integer))
        .with_for_update(skip_locked=True)
    )
    return (
        claimable.where(
            ExecutionUser.state == UserState.CLAIMED, ExecutionUser.claimed_at < bindparam("lease_cutoff")
        ),
        claimable.where(ExecutionUser.state == UserState.RETRY, ExecutionUser.not_before <= bindparam("now")),
        claimable.where(_never_claimed(never_claimed)),
    )


def _never_claimed(never_claimed: ColumnElement[bool] | TextClause) -> ColumnElement[bool]:
    """Users never claimed (`never_claimed`) whose moment has come."""
    return and_(
        never_claimed, or_(ExecutionUser.not_before.is_(None), ExecutionUser.not_before <= bindparam("now"))
    )


# An EVENT execution's firings never claimed, through the partial index of exactly those
# (`PENDING_FIRINGS`): the oldest first, however many wait.
_CLAIMABLE_IN_EVENT_ORDER = _claimable_in(ExecutionUser.firing, text(PENDING_FIRINGS))
_CLAIMABLE_IN_RANK_ORDER = _claimable_in(ExecutionUser.rank, ExecutionUser.state == UserState.PENDING)
# The users a claim in rank order will most likely take (`_read_ahead`), locking nothing: those
# never claimed, whose moment has come, first in rank order.
_LIKELY_CLAIMED = (
    select(*USER_COLUMNS)
    .join(
        ExecutionUser,
        and_(User.workspace_id == ExecutionUser.workspace_id, User.customer_id == ExecutionUser.customer_id),
    )
    .where(_ITS_USERS, _never_claimed(ExecutionUser.state == UserState.PENDING))
    .order_by(ExecutionUser.rank)
    .limit(bindparam("size", type_=Integer))
)


async def _read_ahead(
    session: AsyncSession, execution: Execution, now: datetime, size: int
) -> dict[str, UserRow]:
    """The rows of the users a claim at `now` will most likely take (`_claim_in`), read before its
    write transaction begins: reading them was half of a claim's time in it (on SQLite it holds the
    file's one writer, which every other writer waits for). The claim still decides which users
    it takes; a user read here and changed before the claim's transaction began is as it would be
    had the change committed just after the claim. Nobody for an EVENT execution (its firings come
    in the order of their events, a few at a time)."""
    if execution.trigger == "EVENT":
        return {}
    values = {"workspace_id": execution.workspace_id, "execution_id": execution.id, "now": now, "size": size}
    rows = await rows_in(await session.connection(), _LIKELY_CLAIMED, values)
    return {row[0]: UserRow(*row) for row in rows}


@dataclass(slots=True)
class _Claim:
    """What `_claim_in` took: the users to send to, whether every user claimable now was read for
    them (`drained`: none is left for another batch at this instant), and the attribution windows of
    the users it held out, for the caller to open last (`conversions.open_windows`)."""

    users: list[_Claimed]
    drained: bool
    windows: list[conversions.Opening]


async def _claim_in(
    session: AsyncSession,
    plan: SendPlan,
    rules: controls.Rules,
    execution: Execution,
    now: datetime,
    lease: timedelta,
    size: int,
    known: dict[str, UserRow] | None = None,
) -> _Claim | None:
    """`_claim` in the caller's write transaction (left for the caller to end, opening the held-out
    users' windows last: None, nothing changed, when no user can be claimed now). `known`: users'
    rows read before it (`_read_ahead`); the others it reads."""
    if controls.reads_history(rules):
        await controls.history_turn(session, execution.workspace_id)
    current = await session.scalar(
        _EXECUTION_LOCKED, {"workspace_id": execution.workspace_id, "execution_id": execution.id}
    )
    assert current is not None
    # One state per statement, so each walks the (state, execution, rank) index from its first
    # claimable user: a single statement over the three states walks the rank index through
    # every user settled so far (each claim slower than the last: 1 s at 30,000 sent).
    # Taken-over and due retries first (decided before: only their sends are left), then users
    # never claimed, in rank order (an EVENT execution's firings in the order of their events).
    in_order = _CLAIMABLE_IN_EVENT_ORDER if execution.trigger == "EVENT" else _CLAIMABLE_IN_RANK_ORDER
    taken_over, retries, fresh_ones = in_order
    values = {"workspace_id": execution.workspace_id, "execution_id": execution.id, "now": now}
    connection = await session.connection()
    rows = list(await rows_in(connection, taken_over, {**values, "lease_cutoff": now - lease, "size": size}))
    if len(rows) < size:
        rows += await rows_in(connection, retries, {**values, "size": size - len(rows)})
    if len(rows) < size:
        rows += await rows_in(connection, fresh_ones, {**values, "size": size - len(rows)})
    if not rows:
        return None
    # One row per user in a batch: the controls decide per user (a second firing of the same
    # user waits for the next batch, which sees this one's message for the minimum delay).
    firings: dict[str, str] = {}
    events: dict[str, dict[str, Any] | None] = {}
    ranks: dict[str, int] = {}
    unique = []
    for customer_id, rank, state, firing, event in rows:
        if customer_id not in firings:
            firings[customer_id], events[customer_id], ranks[customer_id] = firing, event, rank
            unique.append((customer_id, rank, state))
    users = {c: known[c] for c in firings if c in known} if known else {}
    if len(users) < len(firings):
        unknown = [c for c in firings if c not in users]
        users.update(await _users_of(session, execution.workspace_id, unknown))
    # Users CLAIMED or RETRY were decided and counted before (by this worker, or by one that
    # died): only their unsettled sends are left.
    taken = (UserState.CLAIMED, UserState.RETRY)
    claimed = [
        _Claimed(c, users[c], rank, firings[c], events[c], resumed=True)
        for c, rank, state in unique
        if state in taken and c in users
    ]
    if rules.throttle_rpm is not None and claimed:
        # Retries and users taken over go out again: they take from the throttle's budget first
        # (those beyond it stay as they are, claimable again), and fresh users get what is left.
        granted = await rules.store.take(
            session, execution.workspace_id, execution.campaign_id, now, len(claimed), rules.throttle_rpm
        )
        claimed = claimed[:granted]
    reclaimed = len(claimed)
    fresh = [(c, rank, users.get(c)) for c, rank, state in unique if not (state in taken and c in users)]
    decision = await controls.decide(session, rules, plan, current, fresh, now)
    windows: list[conversions.Opening] = []
    for reason, ids in decision.held.items():
        await _set_users(connection, execution, ids, UserState.HELD_OUT, reason, firings)
        if plan.goals is not None:  # their conversions count from when they would have been sent
            held = [(c, None, reason, firings[c]) for c in ids]
            windows.append(conversions.Opening(current, plan.goals, held, now))
    for reason, ids in decision.suppressed.items():
        await _set_users(connection, execution, ids, UserState.SUPPRESSED, reason, firings)
    for (due, why), ids in decision.deferred_by_time().items():
        # `why` kept with them: a change of the quiet hours releases those it deferred.
        await _set_users(connection, execution, ids, UserState.PENDING, why, firings, not_before=due)
    claimed += [_Claimed(c, user, ranks[c], firings[c], events[c]) for c, user in decision.send]
    # The claim's token, written with its users: whoever holds them is known by it, not by the
    # moment of the claim (a clock held still gives two claims the same moment).
    token = secrets.token_hex(8)
    for item in claimed:
        item.token = token
    await _set_users(
        connection,
        execution,
        [c.customer_id for c in claimed],
        UserState.CLAIMED,
        None,
        firings,
        claimed_at=now,
        claim_token=token,
    )
    if not claimed and not decision.progressed:
        return None  # everyone left waits for a later tick (throttle, deferral, limit)
    counted = {"row_workspace_id": execution.workspace_id, "row_execution_id": execution.id, "now": now}
    more = len(claimed) - reclaimed  # a reclaimed user was counted already
    await execute_in(connection, _DISPATCHED, {**counted, "more": more})
    # Fewer rows than asked for, each a user of its own: nobody else is claimable now.
    return _Claim(claimed, len(rows) < size and len(unique) == len(rows), windows)


async def still_sending(database: Database, execution: Execution, now: datetime) -> bool:
    """The campaign is live at `now` (a one-time one SENDING; a periodic or triggered one ACTIVE: not
    stopped or paused; its `expiry_time` not reached) and the execution DISPATCHING (not paused)."""
    async with database.reader() as session:
        return await _sending_in(session, execution, now)


async def _sending_in(session: AsyncSession, execution: Execution, now: datetime) -> bool:
    return (await _sending_at(await session.connection(), execution, now))[0]


# Built once: every window of messages asks it (building it per call cost a tenth of the engine's
# time in one-message-per-POST mode).
_SENDING = select(
    Campaign.status,
    Campaign.id,
    Campaign.revision,
    select(Execution.status).where(_THE_EXECUTION).scalar_subquery(),
    Campaign.expiry_at,
).where(
    Campaign.workspace_id == bindparam("workspace_id"),
    Campaign.campaign_id == bindparam("campaign_id"),
    Campaign.is_latest,
)
_SENDING_HELD = _SENDING.with_for_update(read=True, of=Campaign)

# The plan's connector is still there: one removed (`herald connectors remove --force`) while its
# campaign sends ends the sends through it (the plan is made again, without it: the remaining
# messages fail, naming it), and one removed and added again under its name is the new one.
_CONNECTOR_KEPT = select(Connector.id).where(
    Connector.workspace_id == bindparam("workspace_id"), Connector.id == bindparam("connector_id")
)

# `_sending_at(hold=True)` said yes and the version is the plan's, as one condition: PostgreSQL
# writes a window's rows in one statement under it (`outbox.Guard`), the campaign's row
# share-locked by that statement as the check locks it in its transaction.
_STILL_AS_PLANNED = exists(
    select(Campaign.id)
    .where(
        Campaign.workspace_id == bindparam("workspace_id"),
        Campaign.campaign_id == bindparam("campaign_id"),
        Campaign.is_latest,
        Campaign.id == bindparam("version_id"),
        Campaign.revision == bindparam("version_revision"),
        # Two comparisons, not an IN list: an expanding list would not compile for the driver.
        or_(Campaign.status == CampaignStatus.SENDING.value, Campaign.status == CampaignStatus.ACTIVE.value),
        or_(Campaign.expiry_at.is_(None), Campaign.expiry_at > bindparam("checked_at", type_=UTCDateTime)),
        select(Execution.status).where(_THE_EXECUTION).scalar_subquery() == "DISPATCHING",
        exists(_CONNECTOR_KEPT),
    )
    .with_for_update(read=True, of=Campaign)
)


async def _connector_kept(connection: Transaction, workspace_id: str, connector: Connector) -> bool:
    found = await rows_in(
        connection, _CONNECTOR_KEPT, {"workspace_id": workspace_id, "connector_id": connector.id}
    )
    return bool(found)


def _still_as_planned(execution: Execution, plan: SendPlan, now: datetime) -> outbox.Guard | None:
    if plan.version is None or plan.connector is None:
        return None
    values = {
        "workspace_id": execution.workspace_id,
        "execution_id": execution.id,
        "campaign_id": execution.campaign_id,
        "version_id": plan.version[0],
        "version_revision": plan.version[1],
        "connector_id": plan.connector.id,
        "checked_at": now,
    }
    return outbox.Guard(_STILL_AS_PLANNED, values)


async def _sending_at(
    connection: Transaction, execution: Execution, now: datetime, *, hold: bool = False
) -> tuple[bool, Version | None]:
    """Whether the campaign is live at `now` and the execution DISPATCHING (`still_sending`), and
    the version the campaign is at (`live_version`), in one read. `now` is the moment of the check,
    not of the tick: a long send reaching the campaign's `expiry_time` stops there, as at a STOP
    (the worker's next tick marks the campaign SENT and the execution STOPPED). `hold`: the
    campaign's row is read share-locked until the caller's transaction ends (PostgreSQL; SQLite has
    one writer anyway), so a STOP (which locks and updates that row) either came first and is seen,
    or waits until the caller's outbox rows are committed and answers after them."""
    query = _SENDING_HELD if hold else _SENDING
    values = {
        "workspace_id": execution.workspace_id,
        "execution_id": execution.id,
        "campaign_id": execution.campaign_id,
    }
    rows = await rows_in(connection, query, values)
    found = rows[0] if rows else None
    if found is None:
        return False, None
    # A one-time campaign sends while SENDING; periodic and triggered ones while ACTIVE (PAUSE stops
    # them); neither once its expiry is reached.
    expiry = found[4]
    live = (
        found[0] in (CampaignStatus.SENDING.value, CampaignStatus.ACTIVE.value)
        and found[3] == "DISPATCHING"
        and (expiry is None or utc(expiry) > now)
    )
    return live, (str(found[1]), int(found[2]))


async def users_waiting(database: Database, execution: Execution) -> bool:
    """Whether users are still CLAIMED (by another worker, or one that died within its lease) or
    waiting to be attempted again, or PENDING (deferred, or beyond the throttle's budget)."""
    async with database.reader() as session:
        found = await session.execute(
            _IN_FLIGHT, {"workspace_id": execution.workspace_id, "execution_id": execution.id}
        )
        return found.first() is not None


_IN_FLIGHT = (
    select(ExecutionUser.customer_id)
    .where(_ITS_USERS, ExecutionUser.state.in_([UserState.CLAIMED, UserState.RETRY, UserState.PENDING]))
    .limit(1)
)


def _token_of(users: list[_Claimed]) -> str:
    """The token of the claim that holds `users` (users of one batch: one claim)."""
    tokens = {item.token for item in users}
    assert len(tokens) <= 1, "users of one claim"
    return tokens.pop() if tokens else ""


def _firings(users: list[_Claimed]) -> dict[str, str] | None:
    """The row of each user in hand, for an EVENT execution (None: one row per user)."""
    found = {item.customer_id: item.firing for item in users}
    return found if any(found.values()) else None


def _grant_of(
    rules: controls.Rules | None, database: Database, execution: Execution, claimed_at: datetime
) -> Regrant | None:
    """The throttle's grant of a batch claimed at `claimed_at`, if its campaign is throttled."""
    if rules is None or rules.throttle_rpm is None:
        return None
    return Regrant(rules.store, database, execution.workspace_id, execution.campaign_id, claimed_at)


async def _release(
    database: Database,
    execution: Execution,
    users: list[_Claimed],
    now: datetime,
    grant: Regrant | None = None,
) -> None:
    """Users claimed but not handed over when the campaign stopped or the execution paused: those
    decided by this claim pending again, uncounted (a later claim decides and counts them again);
    those decided before (`resumed`: a retry, or taken over) waiting for their next attempt again,
    as they were (still counted: the stats show them retrying, and a later claim sends them as
    decided). Only those this claim still holds: one settled meanwhile (its message was on the wire
    from an earlier window, and another batch took it over when the clock passed its lease) stays
    settled, and one taken over stays with the claim that took it. `grant`: the throttle's, given
    back for those released."""
    if not users:
        return
    fresh = [item.customer_id for item in users if not item.resumed]
    decided = [item.customer_id for item in users if item.resumed]
    firings, token = _firings(users), _token_of(users)
    async with database.writer() as session:
        connection = await session.connection()
        released = await _set_users(
            connection,
            execution,
            fresh,
            UserState.PENDING,
            None,
            firings,
            hold=Hold.HELD,
            token=token,
            count=True,
            claimed_at=None,
            not_before=None,
        )
        if released:
            await session.execute(
                update(Execution)
                .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
                .values(dispatched=Execution.dispatched - released)
            )
        released += await _set_users(
            connection,
            execution,
            decided,
            UserState.RETRY,
            None,
            firings,
            hold=Hold.HELD,
            token=token,
            count=True,
            claimed_at=None,
            not_before=now,
        )
        await session.commit()
    if released and grant is not None:
        await grant.give_back(released)


async def _release_after_failure(
    database: Database,
    execution: Execution,
    users: list[_Claimed],
    now: datetime,
    grant: Regrant | None = None,
) -> None:
    """`_release` of users a failed dispatch did not hand over, once the database answers
    (`db_errors.retry_unavailable`); when it cannot be written, they wait for their lease as a dead
    worker's would. A window whose rows were committed without the answer saying so is among them:
    nothing of it was handed over, and the claim that takes its users again attempts its messages
    once (`outbox.begin_attempt`, on the rows found)."""
    try:
        await retry_unavailable(
            lambda: _release(database, execution, users, now, grant), f"releasing {len(users)} users"
        )
    except Exception:
        log.exception("could not release %d users of execution %s", len(users), execution.id)


# A claim held longer than this share of the lease is renewed before the next window of its batch
# goes out (`_Renewal`): a batch sent slower than the lease (a slow receiver, a throttled campaign)
# is then never taken over by another worker while this one still sends it.
RENEW_AFTER = 3  # a third of the lease

_RENEW = (
    update(_USERS)
    .where(
        _USERS.c.workspace_id == bindparam("row_workspace_id"),
        _USERS.c.execution_id == bindparam("row_execution_id"),
        one_of(_USERS.c.customer_id, "row_ids"),
        _HELD,
    )
    .values(claimed_at=bindparam("renewed_at", type_=UTCDateTime))
)
_STILL_HELD = select(_USERS.c.customer_id).where(
    _USERS.c.workspace_id == bindparam("workspace_id"),
    _USERS.c.execution_id == bindparam("execution_id"),
    one_of(_USERS.c.customer_id, "ids"),
    _HELD,
)


@dataclass(slots=True)
class _Renewal:
    """The claim a dispatch holds on a batch's users: `since`, the `claimed_at` it wrote for them
    (their lease counts from it). `renew` moves it to now once it is a third of the lease old, for
    every user of the batch still held under the claim's token (those on the wire included: a
    worker that takes a user over writes a token of its own), and tells which of `waiting` (not
    yet handed over) are no longer held: taken over by another worker, they are not sent from
    here."""

    execution: Execution
    lease: timedelta
    since: datetime

    def due(self, now: datetime) -> bool:
        return now - self.since >= self.lease / RENEW_AFTER

    async def renew(
        self, database: Database, users: list[_Claimed], waiting: list[_Claimed], now: datetime
    ) -> set[str]:
        execution = self.execution
        ids = [item.customer_id for item in users]
        token = _token_of(users)
        values = {
            "row_workspace_id": execution.workspace_id,
            "row_execution_id": execution.id,
            "row_ids": ids,
            "held_token": token,
            "renewed_at": now,
        }
        async with database.writes.transaction() as connection:
            await execute_in(connection, _RENEW, values)
            held = {
                row[0]
                for row in await rows_in(
                    connection,
                    _STILL_HELD,
                    {
                        "workspace_id": execution.workspace_id,
                        "execution_id": execution.id,
                        "ids": [item.customer_id for item in waiting],
                        "held_token": token,
                    },
                )
            }
        self.since = now
        return {item.customer_id for item in waiting} - held


async def _unsent_again(
    database: Database, workspace_id: str, outbox_id: str, why: str, now: datetime
) -> Outcome:
    """A message attempted before that cannot be sent now (`why`: its connector was removed, its
    content cannot be rendered): its row, if waiting for a retry that would never come, FAILED
    with `why`; else (an attempt begun by a worker that died: outcome unknown) as it stands."""
    if await outbox.settle_waiting(database, workspace_id, outbox_id, why, now):
        return Outcome(False, why)
    return await _existing(database, workspace_id, outbox_id)


async def _existing(database: Database, workspace_id: str, outbox_id: str) -> Outcome:
    async with database.reader() as session:
        row = await session.get(OutboxEntry, {"workspace_id": workspace_id, "id": outbox_id})
    if row is not None and row.status == "SENT":
        return Outcome(True)
    reason = row.failure_reason if row is not None and row.failure_reason else None
    return Outcome(False, reason or "The message could not be sent.")


# Each user with its messages, each message with the reason it cannot be sent (else None).
_Messages = list[tuple[_Claimed, list[tuple[Envelope, str | None]]]]


async def _envelopes(
    database: Database,
    plan: SendPlan,
    execution: Execution,
    users: list[_Claimed],
    now: datetime,
) -> _Messages:
    """Each user's messages, rendered (see `_envelopes_of`)."""
    async with database.reader() as session:
        return (await _envelopes_of(session, [(plan, execution, users)], now))[0]


async def _envelopes_of(
    session: AsyncSession, batches: list[tuple[SendPlan, Execution, list[_Claimed]]], now: datetime
) -> list[_Messages]:
    """Each user's messages, rendered, for batches of several executions: the users' push tokens
    read in one query per batch, every user of every batch rendered in one worker-thread hop (a
    claimed batch at once: none of that between windows)."""
    parts = []
    for plan, execution, users in batches:
        recipients = [recipient_for(item.user, item.customer_id, plan.channel) for item in users]
        if plan.groups and any("push_id" in recipient.contact for recipient in recipients):
            recipients = await with_push_tokens(
                await session.connection(), execution.workspace_id, recipients
            )
        wanted: list[tuple[Group, dict[str, Any], list[tuple[SlotMessage, Recipient]]]] = []
        for item, recipient in zip(users, recipients, strict=True) if plan.groups else ():
            profile = recipient.profile or {}
            group = plan.group_for(item.customer_id, item.rank, profile)
            # None left: the user's tokens changed since the audience was resolved (`_results`).
            wanted.append((group, profile, plan.deliveries(group, recipient)))
        # Each firing of an EVENT execution with its own event; else no event, or a business
        # event's attributes for every user.
        if execution.trigger == "EVENT":
            events = [item.event for item in users]
        else:
            events = [execution.event] * len(users)
        parts.append((plan, wanted, events if plan.groups else []))
    renders = [
        (
            plan,
            [(group, profile, [message for message, _ in found]) for group, profile, found in wanted],
            events,
        )
        for plan, wanted, events in parts
    ]
    bodies_of = await render_plans(renders)
    found_of: list[_Messages] = []
    for (plan, execution, users), (_, wanted, _), bodies in zip(batches, parts, bodies_of, strict=True):
        if not plan.groups:
            found_of.append([(item, []) for item in users])  # nothing to send (`_send_window` says why)
            continue
        reason = plan.problem if plan.connector is not None else plan.problem or "No connector."
        # Per batch, not per message: what every message of a slot shares (the push options are
        # shared like the bodies: nothing writes to a message once built), and the execution's
        # columns (attribute reads through the ORM's instrumentation).
        execution_id, workspace_id = execution.id, execution.workspace_id
        ordered = execution.ordered_ids is not False  # None: not flushed yet, True once it is
        campaign_id = plan.campaign.campaign_id
        shared: dict[int, tuple[str, dict[str, Any] | None]] = {}  # per slot: platform, push options
        messages: _Messages = []
        # The messages of users claimed before (a retry, a user taken over): made anew below, each
        # keeps the moment it was first made (`_made_first`).
        again: list[tuple[list[tuple[Envelope, str | None]], int, SlotMessage]] = []
        for item, (_, _, found), rendered in zip(users, wanted, bodies, strict=True):
            envelopes: list[tuple[Envelope, str | None]] = []
            rank = item.rank if ordered else None
            for (message, reached), body in zip(found, rendered, strict=True):
                of_slot = shared.get(id(message))
                if of_slot is None:
                    named = message.slot.platform.value if message.slot.platform else plan.channel.value
                    of_slot = shared[id(message)] = (named, plan.advanced_for(message, now))
                platform, advanced = of_slot
                why = reason
                if isinstance(body, RenderError):
                    body, why = message.message(), f"Personalization failed: {body}"
                envelope = Envelope(
                    delivery_id(execution_id, item.customer_id, platform, item.firing, rank),
                    workspace_id,
                    campaign_id,
                    False,
                    message.slot,
                    reached,
                    body,
                    now,
                    advanced,
                )
                if item.resumed:
                    again.append((envelopes, len(envelopes), message))
                envelopes.append((envelope, why))
            messages.append((item, envelopes))
        if again:
            await _made_first(session, plan, workspace_id, again)
        found_of.append(messages)
    return found_of


_MADE_AT = select(OutboxEntry.id, OutboxEntry.created_at).where(
    OutboxEntry.workspace_id == bindparam("workspace_id"), one_of(OutboxEntry.id, "ids")
)


async def _made_first(
    session: AsyncSession,
    plan: SendPlan,
    workspace_id: str,
    again: list[tuple[list[tuple[Envelope, str | None]], int, SlotMessage]],
) -> None:
    """The messages of `again` (each: its user's list, its place there, its slot's message) that
    have an outbox row from an earlier attempt: their `created_at` (the webhook's) and push expiry
    from the row's moment, not from this attempt's."""
    ids = [found[place][0].delivery_id for found, place, _ in again]
    rows = await rows_in(await session.connection(), _MADE_AT, {"workspace_id": workspace_id, "ids": ids})
    made = {row[0]: utc(row[1]) for row in rows}
    for found, place, message in again:
        envelope, why = found[place]
        first = made.get(envelope.delivery_id)
        if first is not None and first < envelope.now:
            advanced = plan.advanced_for(message, first)
            found[place] = (dataclasses.replace(envelope, created_at=first, advanced=advanced), why)


class _Went(Enum):
    """What became of a window of users (`_Flight.start`)."""

    HANDED = "handed"  # its messages handed over (or recorded as unsendable)
    STOPPED = "stopped"  # nothing handed over: the campaign is no longer sending
    CHANGED = "changed"  # nothing handed over: the content changed (replan, render again)
    FAILING = "failing"  # nothing handed over: the connector reached its error threshold


class _Flight:
    """The windows of one `dispatch` on the wire. A window's outbox rows are written
    (`Dispatcher.begin_window`, which checks in the same transaction that the campaign is still
    sending) only once it holds a ticket: the rows are the messages handed over, so STOP stays
    exact (a STOP answers after the rows it did not see are committed, and those messages go out;
    none after them). A ticket is given back as soon as the window's answers are in: its outcomes
    are recorded while the next window goes out, and the next batch is claimed and rendered while
    the last windows of a batch are out. No window begins while one is still being recorded behind
    those holding tickets, so a worker killed leaves at most the windows holding tickets and one
    more answered but unrecorded (sent again, under the same ids, by whoever takes over).

    A window takes half the requests the connector may have in flight, and two are out at once:
    while one window's requests are out, the next one's rows are written and its requests follow,
    so the wire is not idle while the database works. (With one window of every lane, the worker
    waited on each window's rows about a third of the time; two half windows of 4 requests cost
    more CPU per message than that wait, as each window's two transactions are shared by fewer
    messages; of 16, less: 482 → 339 µs per message, 1,851 → 2,369 msg/s.) A window's requests
    go out through its share of the lanes, several per lane when each carries one message
    (`ROUNDS`). One window more is written `AHEAD` of those two: its rows are committed while they
    are answered, and its requests take the first lanes that free, instead of waiting for that
    window's round trip to the database."""

    def __init__(
        self,
        database: Database,
        dispatcher: Dispatcher,
        connector: Connector | None,
        watch: halting.Watch | None = None,
        rules: controls.Rules | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        # A throttled campaign's: its grants move to the moment a late window goes out (`Regrant`).
        self._throttle = rules.store if rules is not None and rules.throttle_rpm is not None else None
        # Asked before each request of a window (`halting`): a STOP or a content change halts the
        # windows already begun too.
        self._watch = watch
        self._count = 2 if dispatcher.requests(connector) >= 2 else 1
        # Through one lane, nothing ahead: one message at a time is handed over, as an operator
        # who sets one request in flight asks.
        holding = self._count + (AHEAD if self._count > 1 else 0)
        self._tickets = asyncio.Semaphore(holding)
        # Windows begun and not yet recorded: those holding tickets and one being recorded, at
        # most. Without this bound a database slow to commit let answered windows pile up
        # unrecorded, and a worker killed then left all of them to be sent again (not just the
        # ones in flight).
        self._unrecorded = asyncio.Semaphore(holding + 1)
        self._tasks: list[asyncio.Task[None]] = []
        # SQLite has one writer: the windows' transactions (and the claims) take turns here rather
        # than in the driver, which retries a refused BEGIN after a sleep (up to 50 ms each).
        single = database.engine.dialect.name == "sqlite"
        self._write_turn: asyncio.Lock | None = asyncio.Lock() if single else None

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """A turn to write (see `__init__`)."""
        if self._write_turn is None:
            yield
            return
        async with self._write_turn:
            yield

    def share(self, connector: Connector | None) -> int:
        """The requests a window may have in flight: its share of the connector's."""
        return max(1, self._dispatcher.requests(connector) // self._count)

    def size(self, connector: Connector | None) -> int:
        """Users per window: the messages of its share of the requests, `ROUNDS` of them per lane
        when a request carries one message."""
        per_request = self._dispatcher.per_request(connector)
        rounds = ROUNDS if per_request == 1 and self._count > 1 else 1
        return self.share(connector) * per_request * rounds

    @property
    def busy(self) -> bool:
        """Windows handed over and not yet drained."""
        return bool(self._tasks)

    async def drain(self) -> None:
        """Every window handed over answered and recorded."""
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*tasks)

    async def settle(self) -> None:
        """Every window handed over answered and recorded, whatever became of the others (the
        dispatch failed: see `dispatch`); a window that could not be recorded is logged."""
        tasks, self._tasks = self._tasks, []
        for failed in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(failed, Exception):
                log.error("a window of messages could not be settled", exc_info=failed)

    async def abandon(self) -> None:
        """The windows on the wire cut short, as if the worker died (the dispatch failed or was
        cancelled): their rows stay PENDING, their users CLAIMED until the lease passes."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def start(
        self,
        database: Database,
        plan: SendPlan,
        execution: Execution,
        messages: _Messages,
        now: datetime,
    ) -> _Went:
        """Hand over the messages of a window of users (rendered by `_envelopes`): their outbox
        rows written, then (in a task of their own) sent side by side and recorded with where each
        user stands. Nothing is handed over when the campaign is no longer sending (or the
        execution no longer DISPATCHING), its content changed, or its connector is failing, at the
        moment the window's rows would be written."""
        dispatcher = self._dispatcher
        users = [item for item, _ in messages]
        firings = _firings(users)
        if not plan.groups:
            reason = plan.problem or "The campaign has nothing to send."
            results = {item.customer_id: _Result(False, reason) for item in users}
            async with self.writing():
                await _record_users(database, execution, results, firings, plan, now, _token_of(users))
            return _Went.HANDED
        ready = [envelope for _, found in messages for envelope, reason in found if reason is None]
        if not ready:
            async with database.reader() as session:
                sending, version = await _sending_at(await session.connection(), execution, dispatcher.now())
            if not sending:
                return _Went.STOPPED
            if version != plan.version:
                return _Went.CHANGED
            async with self.writing():
                await _finish(database, dispatcher, plan, execution, messages, firings, {}, now)
            return _Went.HANDED
        assert plan.connector is not None
        connector = plan.connector
        await self._unrecorded.acquire()
        await self._tickets.acquire()

        def give_back() -> None:
            self._tickets.release()
            self._unrecorded.release()

        if dispatcher.failing(connector) is not None:
            give_back()
            return _Went.FAILING
        went = _Went.STOPPED

        async def allowed(connection: Transaction) -> bool:
            nonlocal went
            sending, version = await _sending_at(connection, execution, checked_at, hold=True)
            if sending and (
                version != plan.version
                or not await _connector_kept(connection, execution.workspace_id, connector)
            ):
                went = _Went.CHANGED
                return False
            return sending

        try:
            async with self.writing():
                checked_at = dispatcher.now()  # the window's moment: its campaign may have expired
                first = not any(item.resumed for item in users)
                guard = _still_as_planned(execution, plan, checked_at)
                window = await dispatcher.begin_window(connector, ready, allowed, first, guard)
        except BaseException:
            give_back()
            raise
        if window is None:
            give_back()
            return went
        unsendable = len(ready) < sum(len(found) for _, found in messages)
        halt = self._watch.halt(plan.version) if self._watch is not None else None
        if self._throttle is not None:
            # The users were granted their sends at `now`, the moment of their claim.
            regrant = Regrant(self._throttle, database, execution.workspace_id, execution.campaign_id, now)
            halt = regrant.on_wire(halt, len(users), dispatcher.now)

        def users_too(delivered: list[Outcome]) -> Callable[[Writer], Awaitable[None]]:
            # The users' states in the outbox's own transaction, when every message was attempted;
            # where each stands is worked out before it (on SQLite it holds the file's one writer).
            results = None
            if not unsendable:
                found = dict(zip((envelope.delivery_id for envelope in ready), delivered, strict=True))
                results = _results(messages, found)

            async def write(connection: Writer) -> None:
                if results is not None:
                    written = await _write_users(
                        connection, execution, results, firings, plan, now, _token_of(users)
                    )
                    await _open(connection, written)

            return write

        async def out() -> None:
            try:
                try:
                    await dispatcher.send_window(window, self.share(connector), halt)
                finally:
                    self._tickets.release()
                await asyncio.sleep(0)  # the next window's rows first: then its requests go out
                async with self.writing():
                    delivered = await dispatcher.record_window(
                        window, users_too, engine=plan.goals is not None
                    )
                    if self._watch is not None and self._watch.stopped:
                        # The window's messages left waiting for an attempt the stopped run will
                        # never make: those halted (and any its connector, down, never took).
                        unsent = [
                            envelope.delivery_id
                            for envelope, outcome in zip(ready, delivered, strict=True)
                            if not outcome.attempted and outcome.retry_at is not None
                        ]
                        await halting.settle_halted(database, execution, unsent, dispatcher.now())
                    if unsendable:
                        outcomes = {
                            envelope.delivery_id: outcome
                            for envelope, outcome in zip(ready, delivered, strict=True)
                        }
                        await _finish(database, dispatcher, plan, execution, messages, firings, outcomes, now)
            finally:
                self._unrecorded.release()

        self._tasks.append(asyncio.create_task(out()))
        return _Went.HANDED


async def _finish(
    database: Database,
    dispatcher: Dispatcher,
    plan: SendPlan,
    execution: Execution,
    messages: _Messages,
    firings: dict[str, str] | None,
    outcomes: dict[str, Outcome],
    now: datetime,
) -> None:
    """Record the messages of a window that cannot be sent (`outcomes`: those of the others), then
    where each user stands."""
    for _, found in messages:
        for envelope, why in found:
            if why is not None:
                try:
                    outcomes[envelope.delivery_id] = await dispatcher.unsent(plan.connector, envelope, why)
                except IntegrityError:  # attempted before: waiting for a retry, or taken over
                    outcomes[envelope.delivery_id] = await _unsent_again(
                        database, execution.workspace_id, envelope.delivery_id, why, now
                    )
    held = _token_of([item for item, _ in messages])
    await _record_users(database, execution, _results(messages, outcomes), firings, plan, now, held)


def _results(
    messages: list[tuple[_Claimed, list[tuple[Envelope, str | None]]]], outcomes: dict[str, Outcome]
) -> dict[str, _Result]:
    """Where each user stands after its messages' outcomes."""
    results: dict[str, _Result] = {}
    for item, found in messages:
        if not found:
            results[item.customer_id] = _Result(False, NO_TOKEN, suppressed=True)
            continue
        failures: list[str] = []
        retry_at: datetime | None = None
        for envelope, _ in found:
            outcome = outcomes[envelope.delivery_id]
            if outcome.retry_at is not None:
                retry_at = max(retry_at or outcome.retry_at, outcome.retry_at)
            if not outcome.sent:
                failures.append(outcome.reason or "The send failed.")
        # Each reason once: a user whose two platforms failed alike is counted under that reason
        # in the stats' `failures`, not under the reason twice.
        joined = "; ".join(dict.fromkeys(failures)) or None
        variation = found[0][0].slot.variation
        results[item.customer_id] = (
            _Result(False, joined, retry_at, variation)
            if retry_at is not None
            else _Result(not failures, joined, variation=variation)
        )
    return results


async def _record_users(
    database: Database,
    execution: Execution,
    results: dict[str, _Result],
    firings: dict[str, str] | None,
    plan: SendPlan,
    now: datetime,
    held: str,
) -> None:
    async with database.writes.transaction(engine=plan.goals is not None) as connection:
        await _open(connection, await _write_users(connection, execution, results, firings, plan, now, held))


async def _open(connection: Writer, windows: list[conversions.Opening]) -> None:
    """The attribution windows of the users a transaction settled, opened last in it (see
    `conversions.open_windows`), in the engine's transaction (`DirectWrites.transaction(engine=True)`)."""
    if windows:
        assert isinstance(connection, AsyncConnection), "conversions are written in the engine's transaction"
        await conversions.open_windows(connection, windows)


async def _write_users(
    connection: Writer,
    execution: Execution,
    results: dict[str, _Result],
    firings: dict[str, str] | None,
    plan: SendPlan,
    now: datetime,
    held: str,
) -> list[conversions.Opening]:
    """Each user's state after its messages (one statement per distinct end): SENT whatever was
    written meanwhile, any other end only for the users the claim of token `held` still holds
    (`Hold`); for a campaign with conversion goals, the attribution windows of the users SENT, for
    the caller to open (`_open`)."""
    ends: dict[tuple[str, str | None, datetime | None], list[str]] = {}
    for customer_id, result in results.items():
        if result.retry_at is not None:
            state = UserState.RETRY
        elif result.suppressed:
            state = UserState.SUPPRESSED
        else:
            state = UserState.SENT if result.sent else UserState.FAILED
        ends.setdefault((state, result.reason, result.retry_at), []).append(customer_id)
    for (state, reason, retry_at), ids in ends.items():
        if retry_at is not None:  # due again then: no longer held by this worker
            await _set_users(
                connection,
                execution,
                ids,
                state,
                reason,
                firings,
                hold=Hold.HELD,
                token=held,
                not_before=retry_at,
                claimed_at=None,
            )
        else:
            hold = Hold.ANY if state == UserState.SENT else Hold.HELD
            await _set_users(connection, execution, ids, state, reason, firings, hold=hold, token=held)
    sent = [
        (c, result.variation, None, firings.get(c, "") if firings else "")
        for c, result in results.items()
        if result.sent and not result.retry_at
    ]
    return [conversions.Opening(execution, plan.goals, sent, now)] if plan.goals is not None and sent else []


async def dispatch(
    database: Database,
    dispatcher: Dispatcher,
    plan: SendPlan,
    execution: Execution,
    lease: timedelta,
    rules: controls.Rules,
    reload: Reload | None = None,
) -> bool:
    """Send batch after batch while the campaign is SENDING and the execution DISPATCHING; True
    when every user is settled. A batch goes out in windows of users whose messages are handed
    over side by side, two windows on the wire at once (`_Flight`); a window's outbox rows are
    written only if the campaign is still SENDING, and before each window the connector's error
    threshold is checked. The next batch is claimed and rendered while this one goes out (on
    PostgreSQL a claim is round trips during which the wire would be idle); it is released,
    pending again, when sending stops before its turn. Each batch is claimed, decided and sent at
    the moment the dispatcher's clock gives when it is claimed, not when the tick began: a send
    lasting longer than the lease would otherwise claim users already past it, which another
    worker then takes over while this one still sends them."""

    async def read() -> tuple[bool, Version | None]:
        async with database.reader() as session:
            return await _sending_at(await session.connection(), execution, dispatcher.now())

    watch = halting.Watch(read)
    flight = _Flight(database, dispatcher, plan.connector, watch, rules)
    ahead: asyncio.Task[_Batch | None] | None = None

    async def next_batch(plan: SendPlan, first: bool = False) -> _Batch | None:
        size = max(BATCH[database.engine.dialect.name], dispatcher.window(plan.connector))
        if first:
            # The dispatch's first batch is one window of users: its messages go out while the
            # next batch, full-size, is claimed and rendered. Claimed and rendered whole first, a
            # publish's first message waited for 1,000 users' claim and render on PostgreSQL
            # (about 200 ms of 500 on a 2-core machine, benchmarks/README.md twenty-ninth pass).
            size = flight.size(plan.connector)
        async with flight.writing():
            at = dispatcher.now()
            claimed = await _claim(database, plan, rules, execution, at, lease, size, reload)
        if claimed is None:
            return None
        return _Batch(plan, claimed, await _envelopes(database, plan, execution, claimed, at), at)

    sent_any = False
    try:
        while True:
            await asyncio.sleep(0)  # between batches, the requests of an embedding server (see resolve)
            # SIGTERM, or the campaign's turn is over (after one batch at least, so that a stream of
            # wake-ups cannot hold it back for ever; `_send_batch` gives way between the windows
            # of the batches after it): the rest waits for the next tick.
            if dispatcher.stopping:
                return False
            if sent_any and dispatcher.yielding:
                dispatcher.give_way()
                return False
            if plan.connector is not None and dispatcher.failing(plan.connector) is not None:
                await flight.drain()  # the reason then counts the answers of the windows out
                if not await users_waiting(database, execution):
                    # Its last users' failures reached the threshold: nobody is left to spare,
                    # and a pause would keep the campaign SENDING until someone resumes it.
                    return True
                reason = dispatcher.failing(plan.connector) or ""
                await pause(database, execution, plan.connector, reason, dispatcher.now())
                return False
            if not await still_sending(database, execution, dispatcher.now()):
                return False
            # A long dispatch fills the outbox and settles its users between two ticks: their
            # statistics are kept fresh here too (checked at most every second, in a task of its
            # own: the sends do not wait for it; see `planner_statistics`).
            planner_statistics.refresh_in_background(database)
            if ahead is not None:
                batch, ahead = await ahead, None
                if batch is None:
                    # Nobody could be claimed while the batch before was in hand (an audience
                    # limit's room held by its users, say): once it is settled (which may also
                    # have reached the connector's error threshold), checked and claimed again.
                    await flight.drain()
                    continue
            else:
                batch = await next_batch(plan, first=not sent_any)
            if batch is None:
                if flight.busy:
                    # Its windows' outcomes may free room (audience limit) or pause the execution.
                    await flight.drain()
                    continue
                return not await users_waiting(database, execution)
            # Rendered with the content of its claim: if that changed since, rendered again.
            rendered = batch.rendered if batch.plan is plan else None
            ahead = asyncio.create_task(next_batch(plan))
            renewal = _Renewal(execution, lease, batch.at)
            plan, going = await _send_batch(
                database,
                dispatcher,
                plan,
                execution,
                batch.claimed,
                batch.at,
                rendered,
                flight,
                renewal,
                rules,
            )
            sent_any = True
            if not going:
                return False
    except Exception:
        # The dispatch failed (the database dropped its connections, say) in a live worker: the
        # windows on the wire are answered and recorded (`outbox.record_settled` waits for the
        # database), and the batch claimed ahead is released, instead of leaving all of them
        # CLAIMED, their rows PENDING, until the lease passed and every message went out again.
        await flight.settle()
        if ahead is not None:
            found = (await asyncio.gather(ahead, return_exceptions=True))[0]
            ahead = None
            if isinstance(found, _Batch):
                await _release_after_failure(
                    database,
                    execution,
                    found.claimed,
                    found.at,
                    _grant_of(rules, database, execution, found.at),
                )
        raise
    except BaseException:
        if ahead is not None:  # its users stay claimed until their lease passes, as a dead worker's
            ahead.cancel()
            await asyncio.gather(ahead, return_exceptions=True)
            ahead = None
        await flight.abandon()
        raise
    finally:
        await flight.drain()
        await watch.close()
        # Sending stopped before the batch claimed ahead had its turn: its users pending again.
        if ahead is not None and (unsent := await ahead) is not None:
            await _release(
                database,
                execution,
                unsent.claimed,
                unsent.at,
                _grant_of(rules, database, execution, unsent.at),
            )


@dataclass(slots=True)
class _Batch:
    """A claimed batch (`dispatch`), rendered with the content of `plan`."""

    plan: SendPlan
    claimed: list[_Claimed]
    rendered: _Messages
    at: datetime  # the moment it was claimed at: its messages' too


async def _send_batch(
    database: Database,
    dispatcher: Dispatcher,
    plan: SendPlan,
    execution: Execution,
    claimed: list[_Claimed],
    now: datetime,
    rendered: _Messages | None = None,
    flight: _Flight | None = None,
    renewal: _Renewal | None = None,
    rules: controls.Rules | None = None,
) -> tuple[SendPlan, bool]:
    """Send a claimed batch window by window (`rendered`: its messages, when the caller has them
    already; `flight`: the caller's windows on the wire, else the batch's own, answered before
    this returns; `renewal`: the claim, renewed before a window once due; `rules`: the campaign's
    delivery controls, whose throttle's grants the users released give back); the plan (replanned
    if the content changed meanwhile) and False when sending stopped (the campaign no longer
    SENDING, or its connector failing: the execution is paused) or gave way (its turn over, one
    window handed over at least), the users not handed over released."""
    own = flight is None
    flight = flight or _Flight(database, dispatcher, plan.connector, rules=rules)
    try:
        offset = 0  # the position in `claimed` of the first user of `rendered`
        start = 0
        while start < len(claimed):
            if start > 0 and dispatcher.yielding:
                # The campaign's turn is over (`Dispatcher.yielding`): the rest of the batch waits
                # for its next turn, pending again. At a slow receiver a batch is many seconds on
                # the wire, and the work woken meanwhile (another workspace's publish, say) would
                # wait for all of it.
                await _release(
                    database, execution, claimed[start:], now, _grant_of(rules, database, execution, now)
                )
                dispatcher.give_way()
                return plan, False
            if renewal is not None and renewal.due(dispatcher.now()):
                async with flight.writing():
                    lost = await renewal.renew(database, claimed, claimed[start:], dispatcher.now())
                if lost:  # taken over meanwhile: sent by the worker that holds them now
                    claimed = claimed[:start] + [c for c in claimed[start:] if c.customer_id not in lost]
                    rendered = None
                    continue
            if rendered is None:
                rendered = await _envelopes(database, plan, execution, claimed[start:], now)
                offset = start
            size = flight.size(plan.connector)
            messages = rendered[start - offset : start - offset + size]
            went = await flight.start(database, plan, execution, messages, now)
            if went is _Went.CHANGED:  # changed while SENDING: the rest get the new content
                plan = await replan(database, plan, execution)
                rendered = None
                continue
            if went is not _Went.HANDED:
                if went is _Went.FAILING:
                    assert plan.connector is not None
                    await flight.drain()  # the reason then counts the answers of the windows out
                    reason = dispatcher.failing(plan.connector) or ""
                    await pause(database, execution, plan.connector, reason, now)
                await _release(
                    database, execution, claimed[start:], now, _grant_of(rules, database, execution, now)
                )
                return plan, False
            start += len(messages)
    except Exception:
        # Failed (the database lost, say) in a live worker: the windows handed over are answered
        # and recorded, the users not handed over pending again (see `dispatch`).
        if own:
            await flight.settle()
        await _release_after_failure(
            database, execution, claimed[start:], now, _grant_of(rules, database, execution, now)
        )
        raise
    except BaseException:
        if own:
            await flight.abandon()
        raise
    finally:
        if own:
            await flight.drain()
    if own and plan.connector is not None:
        failing = dispatcher.failing(plan.connector)
        if failing is not None:
            await pause(database, execution, plan.connector, failing, now)
            return plan, False
    return plan, True


@dataclass
class Lane:
    """An EVENT execution dispatched together with the other EVENT executions of its workspace
    (`dispatch_lanes`): its content and its delivery controls."""

    plan: SendPlan
    execution: Execution
    rules: controls.Rules


async def dispatch_lanes(
    database: Database, dispatcher: Dispatcher, lanes: list[Lane], lease: timedelta
) -> None:
    """`dispatch` for the EVENT executions of a workspace at once, round after round: every lane's
    next batch claimed in one write transaction, and the messages of all of them handed over in one
    window (their outbox rows begun in one transaction, their outcomes and the users' states
    recorded in one more). A lane's claim, controls and outbox ids are those of `dispatch`; only
    the transactions are shared, so that on SQLite (one writer, queued behind the API's
    writes) a round costs three write transactions whatever the number of campaigns, not three per
    campaign. A lane whose claim took every user it could is not claimed again in the next round:
    a round of claims that find nobody cost as much as one that finds a few hundred (users fired
    since are the next tick's, which their ingestion wakes)."""
    while lanes:
        await asyncio.sleep(0)  # between rounds, the requests of an embedding server
        if dispatcher.stopping:  # SIGTERM: the round in hand is done; the rest waits for a tick
            return
        async with database.reader() as session:
            lanes = [lane for lane in lanes if await _sending_in(session, lane.execution, dispatcher.now())]
        if not lanes:
            return
        claimed: list[tuple[Lane, list[_Claimed]]] = []
        more: list[Lane] = []
        at = dispatcher.now()  # the round's moment (see `dispatch`)
        async with database.writer() as session:
            # Before any lane's execution is locked (see `controls.history_turn`).
            if any(controls.reads_history(lane.rules) for lane in lanes):
                await controls.history_turn(session, lanes[0].execution.workspace_id)
            windows: list[conversions.Opening] = []
            for lane in lanes:
                window = dispatcher.window(lane.plan.connector)
                size = max(ROUND, window)
                found = await _claim_in(session, lane.plan, lane.rules, lane.execution, at, lease, size)
                if found is not None:
                    claimed.append((lane, found.users))
                    windows += found.windows
                    if not found.drained:
                        more.append(lane)
            # Every lane's at once, last (see `conversions.open_windows`).
            await conversions.open_windows(await session.connection(), windows)
            await session.commit()
        if not claimed:
            return
        lanes = more
        await _send_lanes(database, dispatcher, claimed, at)


async def _send_lanes(
    database: Database, dispatcher: Dispatcher, claimed: list[tuple[Lane, list[_Claimed]]], now: datetime
) -> None:
    """The claimed batches of several lanes: those through one connector whose every message can be
    sent go out in one window; the others (nothing to send, a user without a token, content
    changed meanwhile) lane by lane as `dispatch` sends them."""
    shared: dict[str, list[tuple[Lane, _Messages]]] = {}
    alone: list[tuple[Lane, list[_Claimed], _Messages | None]] = []
    workspace_id = claimed[0][0].execution.workspace_id
    async with database.reader() as session:  # one session for every lane (see `dispatch_lanes`)
        versions = await live_versions(
            session, workspace_id, [lane.execution.campaign_id for lane, _ in claimed]
        )
        ready: list[tuple[Lane, list[_Claimed]]] = []
        for lane, users in claimed:
            plan = lane.plan
            version = versions.get(lane.execution.campaign_id)
            if version != plan.version or plan.connector is None or not plan.groups or not users:
                alone.append((lane, users, None))
            else:
                ready.append((lane, users))
        batches = [(lane.plan, lane.execution, users) for lane, users in ready]
        rendered_of = await _envelopes_of(session, batches, now)
    for (lane, users), messages in zip(ready, rendered_of, strict=True):
        if any(not found or any(why is not None for _, why in found) for _, found in messages):
            alone.append((lane, users, messages))
            continue
        assert lane.plan.connector is not None
        shared.setdefault(lane.plan.connector.id, []).append((lane, messages))
    for group in shared.values():
        if not await _send_shared(database, dispatcher, group, now):
            alone += [(lane, [item for item, _ in messages], messages) for lane, messages in group]
    for lane, users, rendered in alone:
        lane.plan, _ = await _send_batch(
            database, dispatcher, lane.plan, lane.execution, users, now, rendered, rules=lane.rules
        )


async def _send_shared(
    database: Database, dispatcher: Dispatcher, group: list[tuple[Lane, _Messages]], now: datetime
) -> bool:
    """One window for the lanes of one connector, every message sendable; False, with nothing
    written or handed over, when one of the campaigns is no longer sending or the connector was
    removed (each lane is then sent on its own, which releases the users of a stopped one and
    plans again without the connector)."""
    connector = group[0][0].plan.connector
    assert connector is not None
    ready = [envelope for _, messages in group for _, found in messages for envelope, _ in found]

    async def allowed(connection: Transaction) -> bool:
        # Share-locked until the window's rows commit, as a one-time window's check is: a PAUSE or
        # STOP either came first and is seen here, or answers after these messages are handed over.
        checked_at = dispatcher.now()
        sending = [
            (await _sending_at(connection, lane.execution, checked_at, hold=True))[0] for lane, _ in group
        ]
        return all(sending) and await _connector_kept(
            connection, group[0][0].execution.workspace_id, connector
        )

    def users_too(delivered: list[Outcome]) -> Callable[[Writer], Awaitable[None]]:
        # Where each user stands, worked out before the transaction (as `_Flight.start`'s).
        found = dict(zip((envelope.delivery_id for envelope in ready), delivered, strict=True))
        lanes = []
        for lane, messages in group:
            users = [item for item, _ in messages]
            lanes.append((lane, _results(messages, found), _firings(users), _token_of(users)))

        async def write(connection: Writer) -> None:
            windows: list[conversions.Opening] = []
            for lane, results, firings, held in lanes:
                windows += await _write_users(
                    connection, lane.execution, results, firings, lane.plan, now, held
                )
            await _open(connection, windows)  # every lane's at once, last

        return write

    goals = any(lane.plan.goals is not None for lane, _ in group)
    if await dispatcher.deliver_many(connector, ready, allowed, users_too, engine=goals) is None:
        return False
    failing = dispatcher.failing(connector)
    if failing is not None:
        for lane, _ in group:
            await pause(database, lane.execution, connector, failing, now)
    return True
