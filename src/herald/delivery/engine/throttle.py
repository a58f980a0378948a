"""`campaign_throttle_rpm`: at most that many sends to a campaign in any 60 seconds, all workers
together.

A worker asks for the sends of its batch and gets at most what the grants of the last minute left
of the budget (a sliding window: a grant counts until `WINDOW`, 61 s, after it was made); the users
beyond it stay PENDING. A budget per clock minute let a campaign published at 10:00:40 send its
rpm then and again at 10:01:00: twice the rate within 20 seconds. The window is the injected
clock's, so a test that moves the clock by a minute sees a whole budget come back.

A grant is made when its users are claimed, and their messages go out in the moments after. When
they go out later (a receiver that stalled, the windows ahead of them slow to be answered), the
sends are moved to the moment they go out (`Regrant`): a receiver counting arrivals in any 60
seconds otherwise saw a minute's grant arrive after a stall, and the next minute's 60 seconds after
the grant, within the same minute (548 arrivals in 60 s at 300 rpm after a 2.5 s stall).

A batch's users released unsent (their campaign's turn over, a stop, a failed dispatch) give their
sends back (`give_back`): held until they left the window, they kept the users who could have gone
out instead waiting (a window of 600 at 600 rpm handed over 192).

A refused share wakes this process's workers when the oldest grant leaves the window (`_wake_at`),
so a throttled campaign goes on at its rate instead of at the worker's poll interval.

With Redis configured the grants live there (one Lua script: drop the expired grants, read the
rest, grant, record, atomically across processes and hosts); otherwise in
`delivery_throttle_grants`, read and written under the campaign's advisory lock (PostgreSQL; SQLite
has one writer already). A user counts as one send whatever the number of its messages (one per
push platform); a retry or a takeover counts as a send again (`run._claim_in`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from herald.advisory_locks import lock_key
from herald.clock import AHEAD
from herald.config import Settings
from herald.db import Database
from herald.delivery.engine.models import ThrottleGrant
from herald.redis_clients import bounded_client
from herald.wake import wake_here

log = logging.getLogger("herald.delivery.engine")

# A grant counts for a minute and a second: the sends of a batch are handed over in the moments
# after their grant (render, the windows ahead of them), so a receiver that counts arrivals in any
# 60 seconds saw two grants a minute apart overlap by that much (776 in 60.0 s at 600 rpm). The
# second keeps them apart, at 1.6 % under the rpm.
WINDOW = timedelta(seconds=61)

# KEYS[1]: the campaign's grants, a sorted set of "<sends>:<nonce>" scored by the grant's instant in
# milliseconds. ARGV: now (ms), wanted, rpm, nonce, ttl (s), window (ms), ahead (ms: grants later than
# now by more are from a clock since moved back, `herald.clock.AHEAD`). Returns the sends granted and the
# instant of the oldest grant left in the window (false when none).
_TAKE = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[6]))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. (now + tonumber(ARGV[7])), '+inf')
local used = 0
local grants = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #grants do used = used + tonumber(string.match(grants[i], '^(%d+):')) end
local grant = math.min(tonumber(ARGV[2]), tonumber(ARGV[3]) - used)
if grant < 0 then grant = 0 end
if grant > 0 then redis.call('ZADD', KEYS[1], now, grant .. ':' .. ARGV[4]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {grant, oldest[2] or false}
"""


# KEYS[1]: the campaign's grants (`_TAKE`). ARGV: from (ms), to (ms, or '' to give them back),
# sends, nonce, ttl (s). Moves up to `sends` of the grants at `from` to one grant of `sends` at `to`
# (all of them: those that left the window since were sent all the same).
_MOVE = """
local left = tonumber(ARGV[3])
local grants = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1])
for i = 1, #grants do
  if left <= 0 then break end
  local sends, nonce = string.match(grants[i], '^(%d+):(.*)$')
  sends = tonumber(sends)
  local taken = math.min(sends, left)
  redis.call('ZREM', KEYS[1], grants[i])
  if sends > taken then redis.call('ZADD', KEYS[1], ARGV[1], (sends - taken) .. ':' .. nonce) end
  left = left - taken
end
if ARGV[2] ~= '' then redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3] .. ':' .. ARGV[4]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
# A batch's sends that go out this long after their grant are moved to that moment (`Regrant`):
# the second `WINDOW` adds to the minute covers those that go out sooner.
LATE = timedelta(seconds=1)


class Grant(NamedTuple):
    sends: int  # granted
    frees_at: datetime | None  # when the oldest grant in the window leaves it (None: no grant in it)


class ThrottleStore(Protocol):
    async def take(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> int:
        """How many of `wanted` sends the campaign may make at `now`."""

    async def move(
        self,
        database: Database,
        workspace_id: str,
        campaign_id: str,
        granted_at: datetime,
        now: datetime,
        sends: int,
    ) -> None:
        """`sends` granted at `granted_at` go out at `now`: counted from then (see `Regrant`)."""

    async def give_back(
        self, database: Database, workspace_id: str, campaign_id: str, granted_at: datetime, sends: int
    ) -> None:
        """`sends` granted at `granted_at` will not go out (their users released unsent, pending
        again): they no longer count against the budget."""


class _Granting:
    """`take` as every store answers it: its `grant`, and the wake-up when a share was refused."""

    async def grant(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> Grant:
        raise NotImplementedError

    async def take(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> int:
        grant = await self.grant(session, workspace_id, campaign_id, now, wanted, rpm)
        _wake_at(workspace_id, campaign_id, now, grant, wanted)
        return grant.sends


class DatabaseThrottle(_Granting):
    async def grant(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> Grant:
        key = await _campaigns_grants(session, workspace_id, campaign_id)
        # Those that left the window, and those of a clock since moved back (`AHEAD`).
        gone = or_(ThrottleGrant.granted_at <= now - WINDOW, ThrottleGrant.granted_at > now + AHEAD)
        await session.execute(delete(ThrottleGrant).where(*key, gone))
        used, oldest = (
            await session.execute(
                select(
                    func.coalesce(func.sum(ThrottleGrant.sends), 0), func.min(ThrottleGrant.granted_at)
                ).where(*key)
            )
        ).one()
        sends = max(0, min(wanted, rpm - int(used)))
        if sends:
            await _add_grant(session, workspace_id, campaign_id, now, sends)
            oldest = now if oldest is None else oldest
        return Grant(sends, None if oldest is None else oldest + WINDOW)

    async def move(
        self,
        database: Database,
        workspace_id: str,
        campaign_id: str,
        granted_at: datetime,
        now: datetime,
        sends: int,
    ) -> None:
        async with database.writer() as session:
            await _take_back(session, workspace_id, campaign_id, granted_at, sends)
            await _add_grant(session, workspace_id, campaign_id, now, sends)
            await session.commit()

    async def give_back(
        self, database: Database, workspace_id: str, campaign_id: str, granted_at: datetime, sends: int
    ) -> None:
        async with database.writer() as session:
            await _take_back(session, workspace_id, campaign_id, granted_at, sends)
            await session.commit()


async def _take_back(
    session: AsyncSession, workspace_id: str, campaign_id: str, granted_at: datetime, sends: int
) -> None:
    """Up to `sends` of the grants made at `granted_at` removed."""
    key = await _campaigns_grants(session, workspace_id, campaign_id)
    at = (*key, ThrottleGrant.granted_at == granted_at)
    before = await session.scalar(select(ThrottleGrant.sends).where(*at))
    if before is not None:
        left = before - min(before, sends)
        if left:
            await session.execute(update(ThrottleGrant).where(*at).values(sends=left))
        else:
            await session.execute(delete(ThrottleGrant).where(*at))


async def _campaigns_grants(session: AsyncSession, workspace_id: str, campaign_id: str) -> tuple[Any, ...]:
    """The terms naming the campaign's grant rows, once the transaction holds them (PostgreSQL: the
    campaign's advisory lock; SQLite has one writer already)."""
    if session.bind.dialect.name == "postgresql":
        await session.execute(
            select(func.pg_advisory_xact_lock(lock_key("throttle", workspace_id, campaign_id)))
        )
    return (ThrottleGrant.workspace_id == workspace_id, ThrottleGrant.campaign_id == campaign_id)


async def _add_grant(
    session: AsyncSession, workspace_id: str, campaign_id: str, at: datetime, sends: int
) -> None:
    """`sends` more granted to the campaign at `at`."""
    insert = postgresql.insert if session.bind.dialect.name == "postgresql" else sqlite.insert
    statement = insert(ThrottleGrant).values(
        workspace_id=workspace_id, campaign_id=campaign_id, granted_at=at, sends=sends
    )
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=["workspace_id", "campaign_id", "granted_at"],
            set_={"sends": ThrottleGrant.sends + statement.excluded.sends},
        )
    )


class RedisThrottle(_Granting):
    def __init__(self, url: str, prefix: str = "herald:throttle:") -> None:
        self._client = bounded_client(url)  # a stalled Redis fails the claim, not the worker
        self._prefix = prefix
        self._take = self._client.register_script(_TAKE)
        self._move = self._client.register_script(_MOVE)

    def _key(self, workspace_id: str, campaign_id: str) -> str:
        return f"{self._prefix}{{{workspace_id}:{campaign_id}}}"

    async def grant(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> Grant:
        # The key outlives the window by far: a frozen test clock, or workers whose clocks differ,
        # must not see the grants vanish while their window still holds them.
        stamp = _ms(now)
        sends, oldest = await self._take(
            keys=[self._key(workspace_id, campaign_id)],
            args=[
                stamp,
                wanted,
                rpm,
                uuid.uuid4().hex,
                3600,
                int(WINDOW.total_seconds() * 1000),
                int(AHEAD.total_seconds() * 1000),
            ],
        )
        frees_at = None if oldest is None else datetime.fromtimestamp(int(oldest) / 1000, UTC) + WINDOW
        return Grant(int(sends), frees_at)

    async def move(
        self,
        database: Database,
        workspace_id: str,
        campaign_id: str,
        granted_at: datetime,
        now: datetime,
        sends: int,
    ) -> None:
        await self._move(
            keys=[self._key(workspace_id, campaign_id)],
            args=[_ms(granted_at), _ms(now), sends, uuid.uuid4().hex, 3600],
        )

    async def give_back(
        self, database: Database, workspace_id: str, campaign_id: str, granted_at: datetime, sends: int
    ) -> None:
        await self._move(
            keys=[self._key(workspace_id, campaign_id)],
            args=[_ms(granted_at), "", sends, uuid.uuid4().hex, 3600],
        )

    async def aclose(self) -> None:
        await self._client.aclose()


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass(slots=True)
class Regrant:
    """The grant of one claimed batch (made at `granted_at` for its users), as its windows go out:
    a window whose first request goes out `LATE` or later moves its users' sends to that moment
    (`on_wire`), once; the users released unsent give theirs back (`give_back`)."""

    store: ThrottleStore
    database: Database
    workspace_id: str
    campaign_id: str
    granted_at: datetime

    def on_wire(
        self,
        halt: Callable[[], Awaitable[str | None]] | None,
        users: int,
        clock: Callable[[], datetime],
    ) -> Callable[[], Awaitable[str | None]]:
        """A window's `halt` (asked as each of its requests goes out; see `halting`), which also
        moves the window's `users` sends when one goes out late (a user counts once, whatever the
        number of its messages; those of the window that went out in time are moved with them,
        which only holds the next grant back a little more)."""
        moved = False

        async def checked() -> str | None:
            nonlocal moved
            why = await halt() if halt is not None else None
            if why is None and not moved:
                now = clock()
                if now - self.granted_at >= LATE:
                    moved = True
                    try:
                        await self.store.move(
                            self.database, self.workspace_id, self.campaign_id, self.granted_at, now, users
                        )
                    except Exception:  # Redis or the database gone: the window goes out all the same
                        log.warning(
                            "could not move the throttle's grant of campaign %s",
                            self.campaign_id,
                            exc_info=True,
                        )
            return why

        return checked

    async def give_back(self, users: int) -> None:
        """`users` of the batch released unsent: their sends no longer count (`ThrottleStore.give_back`)."""
        try:
            await self.store.give_back(
                self.database, self.workspace_id, self.campaign_id, self.granted_at, users
            )
        except Exception:  # kept, they only hold the budget until they leave its window
            log.warning(
                "could not give back %d throttle grants of campaign %s",
                users,
                self.campaign_id,
                exc_info=True,
            )


# (workspace, campaign) -> the loop and timer of the wake-up already set for it, one at a time.
_wakes: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle]] = {}


def _wake_at(workspace_id: str, campaign_id: str, now: datetime, grant: Grant, wanted: int) -> None:
    """When a share was refused, wake this process's workers as the window frees room (a worker
    that is not woken finds it at its next poll, up to `HERALD_WORKER_INTERVAL_SECONDS` later, and
    the campaign falls behind its rate)."""
    if grant.sends >= wanted or grant.frees_at is None:
        return
    loop = asyncio.get_running_loop()
    delay = max(0.0, (grant.frees_at - now).total_seconds())
    key = (workspace_id, campaign_id)
    known = _wakes.get(key)
    if known is not None:
        known_loop, timer = known
        if known_loop is loop and not timer.cancelled() and timer.when() <= loop.time() + delay:
            return  # one at least as soon is set
        timer.cancel()
    _wakes[key] = (loop, loop.call_later(delay, _wake, key))


def _wake(key: tuple[str, str]) -> None:
    _wakes.pop(key, None)
    wake_here(key[0])


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[ThrottleStore]:
    """Redis when `HERALD_REDIS_URL` is set, the database otherwise; closed on exit."""
    if not settings.redis_url:
        yield DatabaseThrottle()
        return
    store = RedisThrottle(settings.redis_url)
    try:
        yield store
    finally:
        await store.aclose()
