"""`campaign_throttle_rpm`: sends granted per clock minute to a campaign, shared by every worker.

A worker asks for the sends of its batch and gets at most what is left of the minute's budget; the
users beyond it stay PENDING for a later tick. The minute is the injected clock's, so a test (or a
worker tick) at 10:00:30 takes from the 10:00 budget and one at 10:01:00 from a fresh one. With
Redis configured the count lives there (one Lua script: read, grant, add, atomically across
processes and hosts); otherwise in `delivery_throttle_windows`, the row locked for the grant.
A user counts as one send whatever the number of its messages (one per push platform); a retry or a
takeover counts as a send again (`run._claim_in`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Protocol

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from herald.config import Settings
from herald.delivery.engine.models import ThrottleWindow

# KEYS[1]: the minute's counter. ARGV: wanted, limit, ttl. Returns the sends granted.
_TAKE = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local grant = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used)
if grant < 0 then grant = 0 end
if grant > 0 then redis.call('INCRBY', KEYS[1], grant) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return grant
"""


def minute_of(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0)


class ThrottleStore(Protocol):
    async def take(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> int:
        """How many of `wanted` sends the campaign may make in the minute of `now`."""


class DatabaseThrottle:
    async def take(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> int:
        minute = minute_of(now)
        key = (ThrottleWindow.workspace_id == workspace_id, ThrottleWindow.campaign_id == campaign_id)
        # Past minutes are of no use any more; keep the table to one row per throttled campaign.
        await session.execute(delete(ThrottleWindow).where(*key, ThrottleWindow.minute < minute))
        values = {"workspace_id": workspace_id, "campaign_id": campaign_id, "minute": minute, "used": 0}
        dialect = session.bind.dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        await session.execute(insert(ThrottleWindow).values(**values).on_conflict_do_nothing())
        used = int(
            await session.scalar(
                select(ThrottleWindow.used).where(*key, ThrottleWindow.minute == minute).with_for_update()
            )
            or 0
        )
        grant = max(0, min(wanted, rpm - used))
        if grant:
            await session.execute(
                update(ThrottleWindow)
                .where(*key, ThrottleWindow.minute == minute)
                .values(used=ThrottleWindow.used + grant)
            )
        return grant


class RedisThrottle:
    def __init__(self, url: str, prefix: str = "herald:throttle:") -> None:
        from redis.asyncio import Redis

        self._client = Redis.from_url(url)
        self._prefix = prefix
        self._take = self._client.register_script(_TAKE)

    async def take(
        self, session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime, wanted: int, rpm: int
    ) -> int:
        stamp = int(minute_of(now).timestamp())
        granted = await self._take(
            keys=[f"{self._prefix}{{{workspace_id}:{campaign_id}}}:{stamp}"], args=[wanted, rpm, 180]
        )
        return int(granted)

    async def aclose(self) -> None:
        await self._client.aclose()


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
