"""The workspace outbox: one row per message, test or real, each written in its own transaction.

Why its own transaction: a send cannot be rolled back, so its record must not depend on the fate
of the request that caused it. The row is committed PENDING before the attempt (if that fails,
nothing is sent) and committed SENT or FAILED right after. A row left PENDING means the process
stopped between the two: the outcome is unknown, and the row says so instead of lying.

Campaign messages (`begin_attempt`) may be attempted more than once under the same id: after a
transient failure (`record_retry`), or when the worker that held the user died mid-send (the row
was left PENDING). Each attempt first bumps `attempts` with a compare-and-set, so two workers
never both start the same attempt; the id stays the same, so a receiver can drop a repeat.

The engine records a window of campaign messages at once (`begin_attempts`, `record_settled`): the
rule is the same — every row committed PENDING before its message is handed to a connector, its
outcome committed after — with one transaction per window instead of two per message, which is
what lets delivery keep up with the transport.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Insert,
    Integer,
    String,
    Table,
    TextClause,
    Update,
    and_,
    bindparam,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.db import Database, UTCDateTime
from herald.db_errors import retry_unavailable
from herald.delivery.messages import Envelope, Outcome, summary_of
from herald.delivery.models import WAITING_RETRY, Connector, OutboxEntry
from herald.direct_reads import rows_in
from herald.direct_writes import Transaction, WriteChain, Writer, execute_in
from herald.joined_writes import Joined, execute_with, one_statement
from herald.ops import metrics
from herald.sql_lists import one_of
from herald.timefmt import rfc3339

log = logging.getLogger("herald.delivery")

MAX_LIST_LIMIT = 1000
# The engine's window writes go to the table itself: the ORM's bulk paths (per-row bookkeeping for
# entities nobody loads) cost more than the statements.
_TABLE = cast(Table, OutboxEntry.__table__)
# So do a single message's (a test send's), as statements built once.
_INSERT = insert(_TABLE)
# The SET clause is the parameters' columns.
_SETTLE = update(_TABLE).where(
    _TABLE.c.workspace_id == bindparam("row_workspace_id"), _TABLE.c.id == bindparam("row_id")
)
# A window's failed or halted messages: only rows still PENDING. Another worker may have taken
# the message over and sent it meanwhile (its users' lease passed while this one still held the
# window): a SENT row keeps its outcome, instead of this window's reason or a FAILED over it.
_SETTLE_UNSENT = _SETTLE.where(_TABLE.c.status == "PENDING")


class OutboxStatus(StrEnum):
    PENDING = "PENDING"
    SENT = "SENT"
    FAILED = "FAILED"


# A window's PENDING rows in one statement with one parameter for all of them: what differs per
# row goes as a JSON array of arrays (`_window_row`, in this order), taken apart by the database's
# own JSON functions; what every row shares is bound once. SQLAlchemy's executemany built and
# processed a parameter set per row instead (19 values, two datetimes and a JSON document each).
_PER_ROW = (
    "id",
    "customer_id",
    "recipient",
    "campaign_id",
    "channel",
    "platform",
    "locale",
    "variation",
    "is_test",
    "summary",
)
_SHARED = ("workspace_id", "status", "connector_id", "connector_name", "attempts", "created_at", "updated_at")


def _sqlite_window_insert() -> TextClause:
    pending = f"'{OutboxStatus.PENDING.value}'"
    shared = [":workspace_id", pending, ":connector_id", ":connector_name", "1", ":now", ":now"]
    each = [f"item.value ->> {index}" for index in range(len(_PER_ROW) - 1)]
    each.append(f"item.value -> {len(_PER_ROW) - 1}")  # the summary, as JSON text
    columns = ", ".join(_SHARED + _PER_ROW)
    statement = f"INSERT INTO {_TABLE.name} ({columns}) SELECT {', '.join(shared + each)} FROM json_each(:rows) AS item"
    return text(statement).bindparams(bindparam("now", type_=UTCDateTime), bindparam("rows", type_=String))


_SQLITE_WINDOW_INSERT = _sqlite_window_insert()
# PostgreSQL's insert of a window's rows with no condition (`_postgresql_window_insert`).
_ALWAYS = true()


def _window_row(envelope: Envelope) -> tuple[Any, ...]:
    slot, recipient = envelope.slot, envelope.recipient
    return (
        envelope.delivery_id,
        recipient.customer_id,
        (recipient.address or recipient.identifier_value)[:500],
        envelope.campaign_id,
        slot.channel.value,
        slot.platform.value if slot.platform else None,
        slot.locale,
        slot.variation,
        envelope.is_test,
        summary_of(envelope),
    )


def _window_values(
    envelopes: Sequence[Envelope], connector: Connector, now: datetime, rows: dict[str, tuple[Any, ...]]
) -> dict[str, Any]:
    """The parameters of a window insert for `envelopes`, all built at `now`, from their
    `_window_rows` (built before the transaction)."""
    import orjson  # as `herald.db` does: a command line on SQLite does not load it

    return {
        "workspace_id": envelopes[0].workspace_id,
        "connector_id": connector.id,
        "connector_name": connector.name,
        "now": now,
        "rows": orjson.dumps([rows[envelope.delivery_id] for envelope in envelopes]).decode(),
    }


def _window_rows(envelopes: Sequence[Envelope]) -> dict[str, tuple[Any, ...]]:
    """Each envelope's `_window_row`, by delivery id."""
    return {envelope.delivery_id: _window_row(envelope) for envelope in envelopes}


async def _insert_window(
    connection: Writer,
    envelopes: Sequence[Envelope],
    connector: Connector,
    rows: dict[str, tuple[Any, ...]],
) -> None:
    """The PENDING rows of a window's messages (one statement per instant they were built at: one),
    from their `rows` built before the transaction began."""
    if connection.dialect.name == "postgresql":
        statement: Any = _postgresql_window_insert(_ALWAYS)
    else:
        statement = _SQLITE_WINDOW_INSERT
    built: dict[datetime, list[Envelope]] = {}
    for envelope in envelopes:
        built.setdefault(envelope.now, []).append(envelope)
    for now, same_instant in built.items():
        await execute_in(connection, statement, _window_values(same_instant, connector, now, rows))


@dataclass(frozen=True)
class Guard:
    """What a window's rows are written under, as the WHERE of the one statement that writes them
    on PostgreSQL (`DirectReads.write`: no BEGIN and COMMIT round trips around it): `condition`,
    built once (e.g. an EXISTS of a row it share-locks), with its `values`. It holds exactly when
    the window's `allowed` says yes; when it does not, the window takes `allowed`'s transaction."""

    condition: ColumnElement[bool]
    values: dict[str, Any]


@functools.cache
def _postgresql_window_insert(condition: ColumnElement[bool]) -> Insert:
    """PostgreSQL's insert of a window's rows (one JSON array of `_window_row`s, taken apart by the
    database) where `condition` holds: `_ALWAYS`, or a `Guard`'s (built once per condition)."""
    from sqlalchemy.dialects.postgresql import JSONB  # PostgreSQL only

    # JSONB, not JSON: `->>` on a JSON value parses its text again for each column taken out of it
    # (ten per row); a JSONB array is parsed once. A window of 1,600 rows: 58 → 28 ms.
    item = func.jsonb_array_elements(sql_cast(bindparam("rows", type_=String), JSONB)).table_valued("value")
    value = item.c.value

    def text_at(index: int) -> ColumnElement[Any]:
        return value.op("->>", return_type=String)(literal_column(str(index)))

    shared: list[ColumnElement[Any]] = [
        bindparam("workspace_id", type_=String),
        literal(OutboxStatus.PENDING.value, String),
        bindparam("connector_id", type_=String),
        bindparam("connector_name", type_=String),
        literal(1, Integer),
        bindparam("now", type_=UTCDateTime),
        bindparam("now", type_=UTCDateTime),
    ]
    each = [text_at(index) for index in range(len(_PER_ROW) - 2)]
    each.append(sql_cast(text_at(len(_PER_ROW) - 2), Boolean))
    each.append(value.op("->", return_type=JSONB)(literal_column(str(len(_PER_ROW) - 1))))
    rows = select(*shared, *each).select_from(item).where(condition)
    return insert(_TABLE).from_select(list(_SHARED + _PER_ROW), rows)


async def _insert_guarded(
    database: Database,
    envelopes: Sequence[Envelope],
    connector: Connector,
    guard: Guard | None,
    rows: dict[str, tuple[Any, ...]],
) -> bool:
    """The window's PENDING rows written in one statement under `guard` on PostgreSQL; False,
    nothing written, when there is no guard, it does not hold, the database is SQLite (whose
    transactions cost no round trips) or the messages were built at several instants."""
    if guard is None or database.engine.dialect.name != "postgresql":
        return False
    if any(envelope.now != envelopes[0].now for envelope in envelopes):
        return False
    values = {**guard.values, **_window_values(envelopes, connector, envelopes[0].now, rows)}
    return await database.direct.write(_postgresql_window_insert(guard.condition), values) > 0


# A window's rows are named by their delivery ids alone, which lead the table's key (an id is
# derived from its execution's, itself unique: the ids of one window are that workspace's). Beside
# `workspace_id = :w` the planner could take another index led by the workspace, and with
# statistics that did not yet count the workspace's newest rows it did, reading all of them once
# per id (migration 0026).
# Those of a window's messages that have rows already.
_EXISTING = select(_TABLE.c.id).where(one_of(_TABLE.c.id, "ids", driving=True))
# A window's rows settled alike (SENT), as one statement built once.
_SETTLE_MANY = update(_TABLE).where(one_of(_TABLE.c.id, "row_ids", driving=True))


def _values(
    envelope: Envelope, connector: Connector | None, request_id: str | None, status: OutboxStatus
) -> dict[str, Any]:
    return _values_with(envelope, _fixed(connector, request_id, status))


def _fixed(connector: Connector | None, request_id: str | None, status: OutboxStatus) -> dict[str, Any]:
    """The columns every row of one write shares (read once: the connector's through the ORM)."""
    return {
        "status": status.value,
        "failure_reason": None,
        "is_test": False,
        "connector_id": connector.id if connector else None,
        "connector_name": connector.name if connector else None,
        "request_id": request_id,
        "attempts": 1,
    }


def _values_with(envelope: Envelope, fixed: dict[str, Any]) -> dict[str, Any]:
    slot, recipient = envelope.slot, envelope.recipient
    return {
        **fixed,
        "workspace_id": envelope.workspace_id,
        "id": envelope.delivery_id,
        "is_test": envelope.is_test,
        "channel": slot.channel.value,
        "platform": slot.platform.value if slot.platform else None,
        "locale": slot.locale,
        "variation": slot.variation,
        "recipient": (recipient.address or recipient.identifier_value)[:500],
        "customer_id": recipient.customer_id,
        "campaign_id": envelope.campaign_id,
        "summary": summary_of(envelope),
        "created_at": envelope.now,
        "updated_at": envelope.now,
    }


async def record_pending(
    database: Database,
    envelope: Envelope,
    connector: Connector | None,
    request_id: str | None,
    joined: Joined | None = None,
) -> None:
    """Commit the PENDING row, with `joined` (e.g. the request's idempotency claim). Raises if it
    cannot be written: then nothing may be sent."""
    values = _values(envelope, connector, request_id, OutboxStatus.PENDING)
    await _write_alone(database, _INSERT, values, joined)


async def _write_alone(
    database: Database, statement: Insert | Update, values: dict[str, Any], joined: Joined | None
) -> None:
    """`statement` and `joined`, a transaction of their own. On PostgreSQL one statement on the
    driver's pool, committed by itself: a test send's PENDING row and its outcome, each through an
    engine transaction, were three round trips and about a third of the request's CPU."""
    if database.engine.dialect.name == "postgresql":
        await database.direct.write(*one_statement(statement, _TABLE, values, joined))
        return
    async with database.writes.transaction() as connection:
        await execute_with(connection, statement, _TABLE, values, joined)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What `begin_attempt` decided: attempt number `number` may go ahead, or the message is
    already `settled` (SENT, FAILED, or being attempted by another worker)."""

    number: int = 0
    settled: Outcome | None = None


async def begin_attempt(
    database: Database, envelope: Envelope, connector: Connector, now: datetime
) -> Attempt:
    """Commit the start of an attempt of a campaign message: its first (a new PENDING row), or a
    later one on a row left PENDING (a transient failure, or a worker that died mid-send)."""
    try:
        await record_pending(database, envelope, connector, None)
        return Attempt(1)
    except IntegrityError:
        pass
    async with database.writer() as session:
        row = await session.get(
            OutboxEntry, {"workspace_id": envelope.workspace_id, "id": envelope.delivery_id}
        )
        if row is None:  # cannot happen: rows are never deleted
            return Attempt(settled=Outcome(False, "The outbox row of this message disappeared."))
        if row.status == OutboxStatus.SENT.value:
            return Attempt(settled=Outcome(True))
        if row.status == OutboxStatus.FAILED.value:
            return Attempt(settled=Outcome(False, row.failure_reason))
        seen = row.attempts
        taken = await session.execute(
            update(OutboxEntry)
            .where(
                OutboxEntry.workspace_id == envelope.workspace_id,
                OutboxEntry.id == envelope.delivery_id,
                OutboxEntry.status == OutboxStatus.PENDING.value,
                OutboxEntry.attempts == seen,
            )
            # The summary of what this attempt sends: a content changed since the first attempt
            # (`engine.halting`) is the one on record.
            .values(attempts=seen + 1, next_attempt_at=None, updated_at=now, summary=summary_of(envelope))
            .execution_options(synchronize_session=False)
        )
        await session.commit()
    if getattr(taken, "rowcount", 0) != 1:
        reason = "Another worker is attempting this message."
        return Attempt(settled=Outcome(False, reason, transient=True, retry_at=now))
    return Attempt(seen + 1)


async def begin_attempts(
    database: Database,
    envelopes: Sequence[Envelope],
    connector: Connector,
    now: datetime,
    allowed: Callable[[Transaction], Awaitable[bool]],
    first: bool = False,
    guard: Guard | None = None,
) -> list[Attempt] | None:
    """`begin_attempt` for a window of campaign messages: in one transaction, `allowed` is asked
    (e.g. "the campaign is still SENDING") and the rows of the messages seen for the first time
    are written PENDING. None, with nothing written, when `allowed` says no. A message that has a
    row already (a retry, a taken-over user) goes through `begin_attempt` on its own, and so does
    every message of the window if another worker wrote one of its rows meanwhile. `first`: the
    caller knows none of the messages was attempted before (its users were never handed over), so
    the rows are written without looking for them first (one statement less per window; a row
    found after all takes the same way as one written meanwhile). `guard`: on PostgreSQL, the rows
    of such a window are first written in one statement under it (see `Guard`)."""
    if not envelopes:
        return []
    ids = [envelope.delivery_id for envelope in envelopes]
    # Built before the transaction: on SQLite it holds the file's one writer, which the other
    # engine processes on the file wait for (a window's rows were a third of its time holding it).
    rows = _window_rows(envelopes)
    try:
        if await _insert_guarded(database, envelopes, connector, guard if first else None, rows):
            return [Attempt(1) for _ in envelopes]
        async with database.writes.transaction() as connection:
            if not await allowed(connection):
                return None
            existing: set[str] = set()
            if not first:
                found = await rows_in(connection, _EXISTING, {"ids": ids})
                existing = {row.id for row in found}
            fresh = [envelope for envelope in envelopes if envelope.delivery_id not in existing]
            if fresh:
                await _insert_window(connection, fresh, connector, rows)
    except IntegrityError:
        existing = set(ids)  # a row appeared under us: settle each message on its own
    return [
        await begin_attempt(database, envelope, connector, now)
        if envelope.delivery_id in existing
        else Attempt(1)
        for envelope in envelopes
    ]


@dataclass(frozen=True, slots=True)
class Settled:
    """How one attempted campaign message ends: `outcome` recorded (SENT or FAILED), or, with
    `retry_at`, left PENDING to be attempted again then."""

    envelope: Envelope
    outcome: Outcome
    retry_at: datetime | None = None
    # The attempts made so far, when the row's count is to be set to it: a message begun but not
    # handed over (`Dispatcher.send_window`) gives its attempt back.
    attempts: int | None = None


async def record_settled(
    database: Database,
    settled: Sequence[Settled],
    now: datetime,
    also: Callable[[Writer], Awaitable[None]] | None = None,
    *,
    engine: bool = False,
) -> None:
    """Commit the outcomes of a window of attempts at once, with `also` (the caller's own
    bookkeeping of the same window; `engine`: it takes SQLAlchemy's path, so the transaction is
    the engine's): on PostgreSQL as one statement (`WriteChain`), else in one transaction.

    The messages are gone and their outcomes are known here only: while the database cannot serve
    (its connections dropped, a restart), the write is tried again after a wait, for about half a
    minute (`db_errors.retry_unavailable`; every part of it can be written twice: the rows and
    users it settles are found by what they were before). Left unrecorded, the users stayed
    CLAIMED until their lease passed and every message was sent again. Only a failure to record
    after that, or of another kind, is logged: their rows stay PENDING (outcome unknown)."""
    sent = [item.envelope.delivery_id for item in settled if item.outcome.sent]

    async def write() -> None:
        if not engine and database.engine.dialect.name == "postgresql":
            chain = WriteChain(database.engine.dialect)
            await _record_settled(chain, settled, sent, now, also)
            if chain:
                await database.direct.execute(*chain.statement())
        else:
            async with database.writes.transaction(engine=engine) as connection:
                await _record_settled(connection, settled, sent, now, also)

    try:
        await retry_unavailable(write, f"recording the outcomes of {len(settled)} deliveries")
    except SQLAlchemyError:
        log.exception("could not record the outcomes of %d deliveries", len(settled))
        return
    retried = sum(item.retry_at is not None for item in settled)
    failed = len(settled) - len(sent) - retried
    for label, count in (("SENT", len(sent)), ("FAILED", failed), ("RETRY", retried)):
        if count:
            metrics.SENDS.labels(label).inc(count)


async def _record_settled(
    connection: Writer,
    settled: Sequence[Settled],
    sent: list[str],
    now: datetime,
    also: Callable[[Writer], Awaitable[None]] | None,
) -> None:
    workspace_id = settled[0].envelope.workspace_id if settled else ""
    if sent:
        ended = {"status": OutboxStatus.SENT.value, "failure_reason": None, "updated_at": now}
        await execute_in(connection, _SETTLE_MANY, {"row_ids": sent, **ended})
    for item in settled:
        if item.outcome.sent:
            continue
        values: dict[str, Any] = {"updated_at": now}
        if item.attempts is not None:
            values["attempts"] = item.attempts
        if not item.attempts or item.outcome.attempted:
            # A message not handed over after attempts made keeps the last one's reason (why it
            # is waiting for another); "not attempted" says nothing of what became of it.
            values["failure_reason"] = item.outcome.reason
        if item.retry_at is not None:
            values["next_attempt_at"] = item.retry_at
        else:
            values["status"] = OutboxStatus.FAILED.value
        key = {"row_workspace_id": workspace_id, "row_id": item.envelope.delivery_id}
        await execute_in(connection, _SETTLE_UNSENT, {**values, **key})
    if also is not None:
        await also(connection)


async def record_retry(
    database: Database, envelope: Envelope, reason: str, at: datetime, now: datetime
) -> None:
    """The attempt failed transiently: the row stays PENDING with the reason and the next time."""
    try:
        async with database.writer() as session:
            await session.execute(
                update(OutboxEntry)
                .where(
                    OutboxEntry.workspace_id == envelope.workspace_id, OutboxEntry.id == envelope.delivery_id
                )
                .values(failure_reason=reason, next_attempt_at=at, updated_at=now)
            )
            await session.commit()
    except SQLAlchemyError:
        log.exception("could not record the retry of delivery %s", envelope.delivery_id)
        return
    metrics.SENDS.labels("RETRY").inc()


async def settle_waiting(
    database: Database, workspace_id: str, delivery_id: str, reason: str, now: datetime
) -> bool:
    """A message waiting for its next attempt (PENDING with `next_attempt_at`) that cannot be
    attempted any more (its connector removed, say): FAILED with `reason`; whether it was. A row
    whose attempt has begun (`next_attempt_at` cleared: it may be on the wire) is left as it is."""
    async with database.writer() as session:
        result = await session.execute(
            update(OutboxEntry)
            .where(
                OutboxEntry.workspace_id == workspace_id,
                OutboxEntry.id == delivery_id,
                text(WAITING_RETRY),  # the rows `engine.abandoned` settles, in the same words
            )
            .values(
                status=OutboxStatus.FAILED.value, failure_reason=reason, next_attempt_at=None, updated_at=now
            )
            .execution_options(synchronize_session=False)
        )
        await session.commit()
    return getattr(result, "rowcount", 0) == 1


async def record_outcome(
    database: Database,
    envelope: Envelope,
    outcome: Outcome,
    now: datetime,
    joined: Joined | None = None,
) -> None:
    """Commit SENT/FAILED on the row, with `joined` (e.g. the request's idempotency record of its
    answer). The message is gone either way, so a failure to record is logged (the row stays
    PENDING: outcome unknown) rather than turned into a failed request; with `joined`, whose own
    write failed too, it is raised after that (its caller decides)."""
    status = OutboxStatus.SENT if outcome.sent else OutboxStatus.FAILED
    try:
        values = {"status": status.value, "failure_reason": outcome.reason, "updated_at": now}
        key = {"row_workspace_id": envelope.workspace_id, "row_id": envelope.delivery_id}
        await _write_alone(database, _SETTLE, {**values, **key}, joined)
    except SQLAlchemyError:
        log.exception("could not record the outcome of delivery %s", envelope.delivery_id)
        if joined is not None:
            raise
        return
    metrics.SENDS.labels(status.value).inc()


async def record_unsent(
    database: Database,
    envelope: Envelope,
    connector: Connector | None,
    request_id: str | None,
    reason: str,
    first: Joined | None = None,
    last: Joined | None = None,
) -> None:
    """A message that was never attempted (e.g. the recipient has no address), recorded FAILED, with
    `first` in its statement and `last` after it (e.g. the request's idempotency claim and answer)."""
    values = _values(envelope, connector, request_id, OutboxStatus.FAILED)
    async with database.writes.transaction() as connection:
        await execute_with(connection, _INSERT, _TABLE, {**values, "failure_reason": reason}, first)
        if last is not None:
            await execute_in(connection, *last)
    metrics.SENDS.labels(OutboxStatus.FAILED.value).inc()


async def pending_count(session: AsyncSession) -> int:
    """Rows still PENDING in every workspace: sends under way, or cut short by a stopped process."""
    query = (
        select(func.count()).select_from(OutboxEntry).where(OutboxEntry.status == OutboxStatus.PENDING.value)
    )
    return int(await session.scalar(query) or 0)


async def list_entries(
    session: AsyncSession,
    workspace_id: str,
    limit: int = 20,
    campaign_id: str | None = None,
    status: OutboxStatus | None = None,
    before: str | None = None,
) -> Sequence[OutboxEntry]:
    """Newest first; only the sends of `campaign_id` (live and test) when given, only those in
    `status` when given; with `before` (an outbox id of the workspace), only the rows after it in
    that order: the next page after a page ending with it. Raises LookupError for a `before` the
    workspace has no row of."""
    query = select(OutboxEntry).where(OutboxEntry.workspace_id == workspace_id)
    if campaign_id is not None:
        query = query.where(OutboxEntry.campaign_id == campaign_id)
    if status is not None:
        query = query.where(OutboxEntry.status == status.value)
    if before is not None:
        last = await session.get(OutboxEntry, {"workspace_id": workspace_id, "id": before})
        if last is None:
            raise LookupError(before)
        query = query.where(
            or_(
                OutboxEntry.created_at < last.created_at,
                and_(OutboxEntry.created_at == last.created_at, OutboxEntry.id < last.id),
            )
        )
    query = query.order_by(OutboxEntry.created_at.desc(), OutboxEntry.id.desc()).limit(
        max(1, min(limit, MAX_LIST_LIMIT))
    )
    return (await session.scalars(query)).all()


def entry_view(row: OutboxEntry) -> dict[str, Any]:
    return {
        "id": row.id,
        "created_at": rfc3339(row.created_at),
        "status": row.status,
        "failure_reason": row.failure_reason,
        "test": row.is_test,
        "channel": row.channel,
        "platform": row.platform,
        "locale": row.locale,
        "variation": row.variation,
        "connector": row.connector_name,
        "recipient": row.recipient,
        "customer_id": row.customer_id,
        "campaign_id": row.campaign_id,
        "summary": row.summary,
        "attempts": row.attempts,
        "next_attempt_at": rfc3339(row.next_attempt_at) if row.next_attempt_at else None,
    }
