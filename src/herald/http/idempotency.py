"""Idempotency-Key handling (contract §7).

A key is claimed by inserting a row in its own short transaction; the unique primary key, not a
check-then-insert, decides which of several concurrent duplicates proceeds. The winner's response is
written into that row *in the same transaction as its effect*, so a crash can never leave an effect
without its record or a record without its effect. A claim whose process died is taken over once its
lease runs out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Index, Integer, LargeBinary, String, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime
from herald.errors import DuplicateIdempotencyKey, HeraldError, IdempotencyConflict

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


class Replay(HeraldError):
    """Not an error: the stored response of an earlier identical request, sent again."""

    status, code = 200, "REPLAY"

    def __init__(self, status_code: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__("replay")
        self.status_code = status_code
        self.stored_headers = headers
        self.body = body


def fingerprint(method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method.encode(), b"\0", path.encode(), b"\0", body):
        digest.update(part)
    return digest.hexdigest()


def is_stored_status(status: int) -> bool:
    return 200 <= status < 300 or status in (409, 422)


async def claim(sessions: async_sessionmaker[AsyncSession], claim: Claim, now: datetime) -> None:
    """Claim the key for this request, or raise Replay / 409 as contract §7 says."""
    for _ in range(3):
        async with sessions() as session:
            session.add(
                IdempotencyRecord(
                    workspace_id=claim.workspace_id,
                    api_key_id=claim.api_key_id,
                    key=claim.key,
                    fingerprint=claim.fingerprint,
                    state=IN_FLIGHT,
                    locked_until=now + LEASE,
                    expires_at=now + RETENTION,
                    created_at=now,
                )
            )
            try:
                await session.commit()
                return
            except IntegrityError:
                await session.rollback()
            if await _resolve_existing(session, claim, now):
                return
    raise DuplicateIdempotencyKey()


async def _resolve_existing(session: AsyncSession, claim: Claim, now: datetime) -> bool:
    """Decide about an existing record. True when this request now holds the claim."""
    pk = (
        (IdempotencyRecord.workspace_id == claim.workspace_id)
        & (IdempotencyRecord.api_key_id == claim.api_key_id)
        & (IdempotencyRecord.key == claim.key)
    )
    record = (await session.scalars(select(IdempotencyRecord).where(pk))).first()
    if record is None:
        return False  # it expired and was removed meanwhile; insert again
    if record.expires_at <= now:
        await session.execute(delete(IdempotencyRecord).where(pk, IdempotencyRecord.expires_at <= now))
        await session.commit()
        return False
    if record.fingerprint != claim.fingerprint:
        raise IdempotencyConflict(target="Idempotency-Key")
    if record.state == COMPLETED and record.status_code is not None:
        raise Replay(record.status_code, dict(record.headers or {}), record.body or b"")
    if record.locked_until > now:
        raise DuplicateIdempotencyKey(target="Idempotency-Key")
    # The first holder died mid-request (its effect, if any, was rolled back with it): take over,
    # compare-and-set on the lease so only one of several waiting requests wins.
    taken = await session.execute(
        update(IdempotencyRecord)
        .where(
            pk, IdempotencyRecord.state == IN_FLIGHT, IdempotencyRecord.locked_until == record.locked_until
        )
        .values(locked_until=now + LEASE)
    )
    await session.commit()
    if getattr(taken, "rowcount", 0) != 1:
        raise DuplicateIdempotencyKey(target="Idempotency-Key")
    return True


def _completion(claim: Claim, status: int, headers: dict[str, str], body: bytes) -> Any:
    stored = {name: value for name, value in headers.items() if name.lower() in STORED_HEADERS}
    return (
        update(IdempotencyRecord)
        .where(
            IdempotencyRecord.workspace_id == claim.workspace_id,
            IdempotencyRecord.api_key_id == claim.api_key_id,
            IdempotencyRecord.key == claim.key,
            IdempotencyRecord.fingerprint == claim.fingerprint,
        )
        .values(state=COMPLETED, status_code=status, headers=stored, body=body)
    )


async def complete_in(
    session: AsyncSession, claim: Claim, status: int, headers: dict[str, str], body: bytes
) -> None:
    """Record the response inside the request's own transaction (committed with its effect)."""
    await session.execute(_completion(claim, status, headers, body))


async def finish_failed(
    sessions: async_sessionmaker[AsyncSession],
    claim: Claim,
    status: int,
    headers: dict[str, str],
    body: bytes,
    *,
    keep: bool = True,
) -> None:
    """After a rolled-back request: keep 409/422 answers, free the key for every other failure."""
    async with sessions() as session:
        if keep and is_stored_status(status):
            await session.execute(_completion(claim, status, headers, body))
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
