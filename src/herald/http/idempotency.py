"""Idempotency-Key handling (contract §7).

A key is claimed in one of two ways; either way the response is recorded *in the same transaction as
the request's effect*, so a crash can never leave an effect without its record or a record without
its effect.

- Inside the request's transaction (`claim_in`, the usual way): the request that holds the key is the
  one whose transaction holds its lock — PostgreSQL: a transaction-scoped advisory lock, tried without
  waiting, and the key's record read after it in one round trip (the function of migrations 0018
  and 0034; when the lock is busy, a live record still answers: `_answer_busy`); SQLite: the
  database's single write lock, which every writing request holds. The record is inserted with
  the answer. Nothing is written before, so a process that dies leaves nothing to
  recover: its transaction, and with it the lock, is gone.
- In a short transaction of its own (`claim`), for operations whose work runs in sessions of their own
  (test sends, previews): the unique primary key, not a check-then-insert, decides which of several
  concurrent duplicates proceeds; the row is completed with the answer. A claim whose process died is
  taken over once its lease runs out. A handler whose work writes in transactions of its own (C8's
  outbox rows) inserts that row with its first write and completes it with its last (`claimed_with`,
  `completed_with`): the same row and rules, two transactions fewer.

A request whose effect is one write (C1's new campaign) can claim the key with it (on SQLite in a
transaction of its own that reads `RECORD_OF_KEY` first); on PostgreSQL in that
write's own statement, committed by itself (`CLAIMED`, `claim_parameters`, `record_after`): the
function's lock lasts as long as the statement's transaction, the record is inserted only when the
effect is, and a key with a record (or in flight) writes nothing; the request then claims it
inside its transaction as above, and is answered from there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, cast

import orjson
from sqlalchemy import (
    BigInteger,
    Boolean,
    Index,
    Integer,
    LargeBinary,
    Select,
    String,
    Table,
    bindparam,
    column,
    delete,
    func,
    insert,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column

from herald import direct_reads
from herald.advisory_locks import lock_key
from herald.db import Base, PortableJSON, UTCDateTime
from herald.errors import DuplicateIdempotencyKey, HeraldError, IdempotencyConflict
from herald.joined_writes import Joined

RETENTION = timedelta(hours=24)
LEASE = timedelta(seconds=60)
IN_FLIGHT, COMPLETED = "in_flight", "completed"
STORED_HEADERS = ("content-type", "etag", "location")


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_records"
    __table_args__ = (Index("ix_idempotency_records_workspace_id_expires_at", "workspace_id", "expires_at"),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    api_key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    locked_until: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    headers: Mapped[dict[str, str] | None] = mapped_column(PortableJSON, nullable=True)
    body: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


@dataclass(frozen=True)
class Claim:
    workspace_id: str
    api_key_id: str
    key: str
    fingerprint: str
    in_request_transaction: bool = False  # claimed by `claim_in` rather than `claim`
    # What the client named the key with, for the 409s' target and message: the header, or (the
    # earlier API, L1) the body's `request_id`.
    named_by: str = "Idempotency-Key"
    # When the request came by the leases' clock (`Services.lease_clock`: real time, whatever a
    # sandbox's clock says): its claim's lease runs from then, and a claim in flight is taken as
    # abandoned by it. None: the `now` the functions are given.
    lease_now: datetime | None = None

    def leased_from(self, now: datetime) -> datetime:
        return self.lease_now or now


def _in_flight(claim: Claim) -> DuplicateIdempotencyKey:
    return DuplicateIdempotencyKey(
        f"A request with this {claim.named_by} is still in progress.", target=claim.named_by
    )


def _conflict(claim: Claim) -> IdempotencyConflict:
    return IdempotencyConflict(
        f"This {claim.named_by} was used with a different request.", target=claim.named_by
    )


class Replay(HeraldError):
    """Not an error: the stored response of an earlier identical request, sent again."""

    status, code = 200, "REPLAY"

    def __init__(self, status_code: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__("replay")
        self.status_code = status_code
        self.stored_headers = headers
        self.body = body


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes a repeat "the same request": method, path and the JSON value of the body, so the
    same document written by another serializer (key order, spacing) replays rather than conflicts."""
    digest = hashlib.sha256()
    for part in (method.encode(), b"\0", path.encode(), b"\0", _canonical(body)):
        digest.update(part)
    return digest.hexdigest()


def _canonical(body: bytes) -> bytes:
    """`body`'s JSON value in one spelling (sorted keys, no spaces); the bytes as they are when it
    is no JSON orjson reads (e.g. an integer beyond 64 bits), where only the same bytes match. An
    empty object is no body: where a body is optional (O5's archive) they ask the same, and a retry
    of one as the other conflicted (where a body is required, neither is answered for keeps)."""
    if not body.strip():
        return b""
    try:
        canonical = orjson.dumps(orjson.loads(body), option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return body
    return b"" if canonical == b"{}" else canonical


def is_stored_status(status: int) -> bool:
    return 200 <= status < 300 or status in (409, 422)


_RECORDS = cast(Table, IdempotencyRecord.__table__)  # Core statements: no ORM work per call
_KEY_IS = (
    (_RECORDS.c.workspace_id == bindparam("workspace_id"))
    & (_RECORDS.c.api_key_id == bindparam("api_key_id"))
    & (_RECORDS.c.key == bindparam("key"))
)
# Built once: these run on every idempotent request.
_LOOKUP = select(
    _RECORDS.c.fingerprint,
    _RECORDS.c.state,
    _RECORDS.c.locked_until,
    _RECORDS.c.expires_at,
    _RECORDS.c.status_code,
    _RECORDS.c.headers,
    _RECORDS.c.body,
).where(_KEY_IS)
_FORGET = delete(_RECORDS).where(_KEY_IS)
# PostgreSQL: the key's lock, then its record, in one round trip (migrations 0018, 0034). The record's
# columns are typed as the table's, so their values read as `_LOOKUP`'s do.
_CLAIMED_RECORD = ("fingerprint", "state", "locked_until", "expires_at", "status_code", "headers", "body")
_CLAIM = text(
    "SELECT * FROM herald_claim_idempotency_key(:lock_id, :workspace_id, :api_key_id, :key)"
).columns(column("held", Boolean), *(_RECORDS.c[name] for name in _CLAIMED_RECORD))
_RECORD = insert(_RECORDS)


# The claim function's row (`held` and the key's record), for a statement that claims the key in a
# CTE of its own (`claim_parameters`): its lock lasts as long as that statement's transaction.
CLAIMED = _CLAIM
# The key's record (`claim_parameters`), for a SQLite transaction that holds the write lock.
RECORD_OF_KEY = _LOOKUP


def claim_parameters(claim: Claim) -> dict[str, Any]:
    """The parameters of `CLAIMED` for `claim`."""
    return {**_key_of(claim), "lock_id": _lock_id(claim)}


@cache
def record_after(source: Any) -> Any:
    """`RECORD_JOINED`'s row (its `record_...` parameters, `written_with`'s) inserted from `source`
    (a CTE): written only when `source` has a row. Built once per source."""
    row = select(*(bindparam(f"record_{column.name}", type_=column.type) for column in _RECORDS.c))
    return insert(_RECORDS).from_select([column.name for column in _RECORDS.c], row.select_from(source))


def _key_of(claim: Claim) -> dict[str, str]:
    return {"workspace_id": claim.workspace_id, "api_key_id": claim.api_key_id, "key": claim.key}


def _claimed_values(claim: Claim, now: datetime) -> dict[str, Any]:
    """The record of a `claim` claim in flight: its answer comes with its completion."""
    return {
        **_key_of(claim),
        "fingerprint": claim.fingerprint,
        "state": IN_FLIGHT,
        "locked_until": claim.leased_from(now) + LEASE,
        "expires_at": now + RETENTION,
        "created_at": now,
    }


async def claim(sessions: async_sessionmaker[AsyncSession], claim: Claim, now: datetime) -> None:
    """Claim the key for this request, or raise Replay / 409 as contract §7 says."""
    values = _claimed_values(claim, now)
    for _ in range(3):
        async with sessions() as session:
            try:
                await session.execute(_RECORD, values)
                await session.commit()
                return
            except IntegrityError:
                await session.rollback()
            if await _resolve_existing(session, claim, now):
                return
    raise _in_flight(claim)


def _answer_recorded(record: Any, claim: Claim) -> None:
    """A live record answers for its key: another request's → 409 conflict, a completed one → replay."""
    if record.fingerprint != claim.fingerprint:
        raise _conflict(claim)
    if record.state == COMPLETED and record.status_code is not None:
        raise Replay(record.status_code, dict(record.headers or {}), record.body or b"")


async def _resolve_existing(session: AsyncSession, claim: Claim, now: datetime) -> bool:
    """Decide about an existing record. True when this request now holds the claim."""
    pk = (
        (IdempotencyRecord.workspace_id == claim.workspace_id)
        & (IdempotencyRecord.api_key_id == claim.api_key_id)
        & (IdempotencyRecord.key == claim.key)
    )
    record = (await session.execute(_LOOKUP, _key_of(claim))).first()
    if record is None:
        return False  # it expired and was removed meanwhile; insert again
    if record.expires_at <= now:
        await session.execute(delete(IdempotencyRecord).where(pk, IdempotencyRecord.expires_at <= now))
        await session.commit()
        return False
    _answer_recorded(record, claim)
    if record.locked_until > claim.leased_from(now):
        raise _in_flight(claim)
    # The first holder died mid-request (its effect, if any, was rolled back with it): take over,
    # compare-and-set on the lease so only one of several waiting requests wins.
    taken = await session.execute(
        update(IdempotencyRecord)
        .where(
            pk, IdempotencyRecord.state == IN_FLIGHT, IdempotencyRecord.locked_until == record.locked_until
        )
        .values(locked_until=claim.leased_from(now) + LEASE)
    )
    await session.commit()
    if getattr(taken, "rowcount", 0) != 1:
        raise _in_flight(claim)
    return True


def _lock_id(claim: Claim) -> int:
    """The claim's PostgreSQL advisory lock, named by its scope and key (a collision could only
    make one of two simultaneous requests wait for a retry with 409)."""
    return lock_key("idempotency", *_key_of(claim).values())


async def _holds_key_lock(session: AsyncSession, claim: Claim) -> bool:
    """Take the key's lock for the rest of this transaction, without waiting. SQLite needs none: a
    writing transaction there already holds the only write lock."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    return bool(await session.scalar(select(func.pg_try_advisory_xact_lock(_lock_id(claim)))))


async def claim_in(session: AsyncSession, claim: Claim, now: datetime) -> None:
    """Claim the key inside the request's transaction, or raise Replay / 409 as contract §7 says.

    On SQLite a duplicate cannot be in flight: it waits for the write lock and then finds the
    first one's record, which it replays."""
    await _claim_on(await session.connection(), claim, now)  # Core statements: no ORM session work


async def _claim_on(connection: AsyncConnection, claim: Claim, now: datetime) -> None:
    """`claim_in` on the request transaction's connection."""
    if connection.dialect.name == "postgresql":
        claimed = (await connection.execute(_CLAIM, {**_key_of(claim), "lock_id": _lock_id(claim)})).one()
        if not claimed.held:
            _answer_busy(claimed, claim, now)
        record = claimed if claimed.fingerprint is not None else None  # a record's is never NULL
    else:
        found = await direct_reads.rows_in(connection, _LOOKUP, _key_of(claim))
        record = found[0] if found else None
    if record is not None:
        await _settle(connection, claim, record, now)


def _answer_busy(claimed: Any, claim: Claim, now: datetime) -> None:
    """PostgreSQL: the key's lock was busy. Its record (read after the lock was tried, migration
    0034) answers when it is live: repeats of a request completed long ago take the lock from each
    other only to read it, and each is replayed (or, with another body, 409 IDEMPOTENCY_CONFLICT).
    Without a live record the key's first request is in flight: 409 DUPLICATE_IDEMPOTENCY_KEY."""
    if claimed.fingerprint is not None and claimed.expires_at > now:  # a record's fingerprint is never NULL
        _answer_recorded(claimed, claim)
    raise _in_flight(claim)


async def _settle(connection: AsyncConnection, claim: Claim, record: Any, now: datetime) -> None:
    """A record found for a claimed key: forget it when it is over (this request's record replaces
    it), else answer with it (replay / 409)."""
    abandoned = record.state == IN_FLIGHT and record.locked_until <= claim.leased_from(now)
    if record.expires_at <= now or abandoned:
        await connection.execute(_FORGET, _key_of(claim))
        return
    _answer_recorded(record, claim)
    raise _in_flight(claim)  # claimed by `claim`, still leased


_READ_FOUND = "claim_read_found"


async def claim_in_with_read(
    session: AsyncSession, claim: Claim, now: datetime, read: Select[Any] | None, params: dict[str, Any]
) -> dict[str, Any] | None:
    """`claim_in`, then `read` (a select of at most one row, built once; typically `FOR UPDATE`)
    with `params`: the row read, or None. On PostgreSQL both go in one statement, one round trip:
    the read is a lateral subquery of the claim function's row, run only when the key was claimed
    and has no record (otherwise the claim answers, or its stale record is forgotten and the read
    runs on its own). The read's snapshot is the statement's, taken just before the key's lock is
    tried (without waiting); a `FOR UPDATE` read locks and returns the row's latest version anyway.
    Without `read`, only the claim."""
    connection = await session.connection()
    if connection.dialect.name != "postgresql" or read is None:
        await _claim_on(connection, claim, now)
        return None if read is None else _first(read, await direct_reads.rows_in(connection, read, params))
    joined = await _claimed_rows(connection, claim, now, read, params, ())
    if joined is None:
        joined = await direct_reads.rows_in(connection, read, params)
    return _first(read, joined)


def _first(read: Select[Any], rows: Sequence[Any]) -> dict[str, Any] | None:
    """The first of `rows` (named tuples of `direct_reads.rows_in`) by `read`'s column names."""
    if not rows:
        return None
    found = rows[0]._asdict()
    return {name: found[name] for name in read.selected_columns.keys()}  # noqa: SIM118 (not a dict: its iteration yields columns)


async def claim_in_with_rows(
    session: AsyncSession,
    claim: Claim,
    now: datetime,
    read: Select[Any],
    params: dict[str, Any],
    descending: tuple[str, ...] = (),
) -> Sequence[Any]:
    """`claim_in_with_read` for a select of any number of rows (a page), in one statement on
    PostgreSQL as well: its rows (`direct_reads.rows_in`: named tuples), ordered by the columns of
    `read` named in `descending`, each descending (a lateral subquery's own order does not order
    the statement around it). On PostgreSQL each row also carries the claim's columns, whose names
    `read`'s must not take."""
    connection = await session.connection()
    if connection.dialect.name != "postgresql":
        await _claim_on(connection, claim, now)
        return await direct_reads.rows_in(connection, read, params)
    joined = await _claimed_rows(connection, claim, now, read, params, descending)
    return await direct_reads.rows_in(connection, read, params) if joined is None else joined


async def _claimed_rows(
    connection: AsyncConnection,
    claim: Claim,
    now: datetime,
    read: Select[Any],
    params: dict[str, Any],
    descending: tuple[str, ...],
) -> Sequence[Any] | None:
    """PostgreSQL: the claim and `read` in one statement (`_claim_and_read`): the rows `read`
    returned, or None when the key had a stale record, forgotten since (`read` did not run: the
    caller runs it on its own). A live record answers (replay / 409)."""
    claim_params = {f"claim_{name}": value for name, value in _key_of(claim).items()}
    statement = _claim_and_read(read, descending)
    rows = await direct_reads.rows_in(
        connection, statement, {**params, **claim_params, "claim_lock_id": _lock_id(claim)}
    )
    claimed = rows[0]  # the claim function's one row, outer-joined: never none
    if not claimed.held:
        _answer_busy(claimed, claim, now)
    if claimed.fingerprint is None:  # no record (a record's is never NULL): the read ran
        return [row for row in rows if row[-1]]  # `_READ_FOUND`: NULL where the read found nothing
    await _settle(connection, claim, claimed, now)
    return None


@cache
def _claim_and_read(read: Select[Any], descending: tuple[str, ...]) -> Select[Any]:
    """PostgreSQL: the claim function's row (migration 0018) and, joined lateral to it, `read`
    when the key was claimed and has no record. Built once per read."""
    claimed = func.herald_claim_idempotency_key(
        bindparam("claim_lock_id", type_=BigInteger),
        bindparam("claim_workspace_id", type_=String),
        bindparam("claim_api_key_id", type_=String),
        bindparam("claim_key", type_=String),
    ).table_valued(
        column("held", Boolean), *(column(name, _RECORDS.c[name].type) for name in _CLAIMED_RECORD)
    )
    gated = read.add_columns(true().label(_READ_FOUND)).where(claimed.c.held, claimed.c.fingerprint.is_(None))
    joined = gated.lateral("claimed_read")
    statement = select(*claimed.c, *joined.c).select_from(claimed.outerjoin(joined, true()))
    return statement.order_by(*(joined.c[name].desc() for name in descending))


def _record_values(
    claim: Claim, status: int, headers: dict[str, str], body: bytes, now: datetime
) -> dict[str, Any]:
    return {
        **_key_of(claim),
        "fingerprint": claim.fingerprint,
        "state": COMPLETED,
        "locked_until": now,
        "expires_at": now + RETENTION,
        "created_at": now,
        "status_code": status,
        "headers": _stored(headers),
        "body": body,
    }


# The record as an insert whose values are all parameters, named apart (`record_...`) from those
# of the statement it joins (`written_with`).
RECORD_JOINED = insert(_RECORDS).values(
    {column.name: bindparam(f"record_{column.name}", type_=column.type) for column in _RECORDS.c}
)


def claimed_with(claim: Claim, now: datetime) -> Joined:
    """A `claim` claim's record in flight, as (`RECORD_JOINED`, its parameters), for the first write of
    the work it guards to carry (on PostgreSQL in one statement): committed with that write, or not at
    all. A record of the key already there fails that write (IntegrityError); `claim` then decides."""
    values = {**_claimed_values(claim, now), "status_code": None, "headers": None, "body": None}
    return RECORD_JOINED, {f"record_{name}": value for name, value in values.items()}


def written_with(claim: Claim, status: int, headers: dict[str, str], body: bytes, now: datetime) -> Joined:
    """A `claim_in` claim's record of a response known before the handler's last write, as
    (`RECORD_JOINED`, its parameters): the handler writes it with that write (on PostgreSQL in one
    statement, one round trip fewer), in the request's transaction as `record_in` would."""
    values = _record_values(claim, status, headers, body, now)
    return RECORD_JOINED, {f"record_{name}": value for name, value in values.items()}


async def record_in(
    session: AsyncSession, claim: Claim, status: int, headers: dict[str, str], body: bytes, now: datetime
) -> None:
    """Record the answer of a `claim_in` claim in the request's transaction (committed with its effect)."""
    connection = await session.connection()
    await connection.execute(_RECORD, _record_values(claim, status, headers, body, now))


async def record_refusal(
    sessions: async_sessionmaker[AsyncSession],
    claim: Claim,
    status: int,
    headers: dict[str, str],
    body: bytes,
    now: datetime,
    *,
    held: bool = False,
) -> None:
    """Keep a `claim_in` request's 409/422 answer (contract §7): after its transaction rolled back,
    unless another request with the key holds it by now (that one records its own answer); or,
    `held`, while that transaction still holds the key's lock (PostgreSQL, in a transaction of its
    own, before the request's rolls back: no other request with the key can run in between and
    answer afresh, as one did when the lock was let go first)."""
    if not is_stored_status(status):
        return
    async with sessions() as session:
        if not held and not await _holds_key_lock(session, claim):
            return
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        values = _record_values(claim, status, headers, body, now)
        # In place of a record that is over (the request forgot it, then rolled back), as the
        # request's own record would have replaced it; a live one stands.
        stale = (IdempotencyRecord.expires_at <= now) | (
            (IdempotencyRecord.state == IN_FLIGHT)
            & (IdempotencyRecord.locked_until <= claim.leased_from(now))
        )
        upsert = dialect.insert(IdempotencyRecord).values(values)
        await session.execute(
            upsert.on_conflict_do_update(
                index_elements=["workspace_id", "api_key_id", "key"],
                set_={name: upsert.excluded[name] for name in values if name not in _KEY_COLUMNS},
                where=stale,
            )
        )
        await session.commit()


_KEY_COLUMNS = frozenset({"workspace_id", "api_key_id", "key"})


async def forgotten_in(
    session: AsyncSession, sessions: async_sessionmaker[AsyncSession], claim: Claim
) -> bool:
    """Whether the request's open transaction (`session`) removed the key's record, one that was
    over (`_settle`): it has none there, while one is committed (read through `sessions`). A row
    that transaction deleted holds up any other's insert of the key until it ends."""
    if (await session.execute(_LOOKUP, _key_of(claim))).first() is not None:
        return False
    async with sessions() as other:
        return (await other.execute(_LOOKUP, _key_of(claim))).first() is not None


def _stored(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name.lower() in STORED_HEADERS}


# A `claim` claim's answer, stored (its parameters named apart, so that it can go with another write).
_COMPLETE = (
    update(_RECORDS)
    .where(
        _RECORDS.c.workspace_id == bindparam("claimed_workspace_id"),
        _RECORDS.c.api_key_id == bindparam("claimed_api_key_id"),
        _RECORDS.c.key == bindparam("claimed_key"),
        _RECORDS.c.fingerprint == bindparam("claimed_fingerprint"),
    )
    .values(
        {
            name: bindparam(f"completed_{name}", type_=_RECORDS.c[name].type)
            for name in ("state", "status_code", "headers", "body")
        }
    )
)


def completed_with(claim: Claim, status: int, headers: dict[str, str], body: bytes) -> Joined:
    """A `claim` claim's completion with its answer, as (statement, parameters): for the last write
    of the work it guards to carry (on PostgreSQL in one statement), or to run on its own."""
    values = {"state": COMPLETED, "status_code": status, "headers": _stored(headers), "body": body}
    params = {f"completed_{name}": value for name, value in values.items()}
    claimed = {f"claimed_{name}": value for name, value in _key_of(claim).items()}
    return _COMPLETE, {**params, **claimed, "claimed_fingerprint": claim.fingerprint}


async def _complete(
    session: AsyncSession, claim: Claim, status: int, headers: dict[str, str], body: bytes
) -> None:
    statement, params = completed_with(claim, status, headers, body)
    await session.execute(statement, params)


async def complete_in(
    session: AsyncSession, claim: Claim, status: int, headers: dict[str, str], body: bytes
) -> None:
    """Complete a `claim` claim inside the request's transaction (committed with its effect)."""
    await _complete(session, claim, status, headers, body)


async def finish_failed(
    sessions: async_sessionmaker[AsyncSession],
    claim: Claim,
    status: int,
    headers: dict[str, str],
    body: bytes,
    *,
    keep: bool = True,
) -> None:
    """After a `claim` request rolled back: keep 409/422 answers, free the key for every other failure."""
    async with sessions() as session:
        if keep and is_stored_status(status):
            await _complete(session, claim, status, headers, body)
        else:
            await session.execute(
                delete(IdempotencyRecord).where(
                    IdempotencyRecord.workspace_id == claim.workspace_id,
                    IdempotencyRecord.api_key_id == claim.api_key_id,
                    IdempotencyRecord.key == claim.key,
                    IdempotencyRecord.state == IN_FLIGHT,
                )
            )
        await session.commit()


async def purge_expired(session: AsyncSession, now: datetime) -> int:
    result = await session.execute(delete(IdempotencyRecord).where(IdempotencyRecord.expires_at <= now))
    return int(getattr(result, "rowcount", 0) or 0)
