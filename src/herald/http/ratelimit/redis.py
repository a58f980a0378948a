"""Redis rate-limit store: limits shared by every worker process and host.

One Lua script per acquire prunes, checks every window, and only then adds the entry to all of
them; Redis runs scripts one at a time, so concurrent clients cannot both take the last slot and
a refused request consumes nothing. Each window is a sorted set (score = admission time from the
caller's clock, never the server's) that expires after one window of inactivity.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from redis.asyncio import Redis

from herald.http.ratelimit.core import Decision, Window, check_windows, decide

# KEYS[i]: the log of window i. ARGV: token, now, then per window: cutoff, limit, ttl.
# Cutoffs are computed by the caller: Lua would format numbers with 14 digits and lose the
# sub-millisecond part of an epoch timestamp. Returns: allowed, then per window: count, pivot score.
_ACQUIRE = """
local token, now = ARGV[1], ARGV[2]
local counts, allowed = {}, 1
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[3 * i])
  counts[i] = redis.call('ZCARD', KEYS[i])
  if counts[i] >= tonumber(ARGV[3 * i + 1]) then allowed = 0 end
end
if allowed == 1 then
  for i = 1, #KEYS do
    redis.call('ZADD', KEYS[i], now, token)
    redis.call('EXPIRE', KEYS[i], ARGV[3 * i + 2])
    counts[i] = counts[i] + 1
  end
end
local out = {allowed}
for i = 1, #KEYS do
  local pivot = ''
  if counts[i] > 0 then
    local at = math.max(0, counts[i] - tonumber(ARGV[3 * i + 1]))
    pivot = redis.call('ZRANGE', KEYS[i], at, at, 'WITHSCORES')[2]
  end
  out[#out + 1] = counts[i]
  out[#out + 1] = pivot
end
return out
"""


class RedisRateLimitStore:
    """Owns `client` and closes it in `aclose`. Keys are `<prefix>{<key>}:<window seconds>`."""

    def __init__(self, client: Redis, prefix: str = "herald:rl:") -> None:
        self._client = client
        self._prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)

    def _keys(self, key: str, windows: Sequence[Window]) -> list[str]:
        # The hash tag keeps every window of a key in one Redis Cluster slot, as a script requires.
        return [f"{self._prefix}{{{key}}}:{w.seconds}" for w in windows]

    async def acquire(self, key: str, windows: Sequence[Window], now: float) -> Decision:
        windows = check_windows(windows)
        token, args = self._arguments(windows, now)
        reply = await self._acquire(keys=self._keys(key, windows), args=args)
        return self._decision(windows, now, token, reply)

    async def acquire_each(
        self, requests: Sequence[tuple[str, Sequence[Window]]], now: float
    ) -> list[Decision]:
        checked = [(key, check_windows(windows)) for key, windows in requests]
        tokens: list[str] = []
        async with self._client.pipeline(transaction=False) as pipe:  # one round trip, scripts apart
            for key, windows in checked:
                token, args = self._arguments(windows, now)
                tokens.append(token)
                await self._acquire(keys=self._keys(key, windows), args=args, client=pipe)
            replies = await pipe.execute()
        return [
            self._decision(windows, now, token, reply)
            for (_, windows), token, reply in zip(checked, tokens, replies, strict=True)
        ]

    @staticmethod
    def _arguments(windows: Sequence[Window], now: float) -> tuple[str, list[str | int]]:
        token = uuid4().hex
        args: list[str | int] = [token, repr(now)]
        for w in windows:
            args += [repr(now - w.seconds), w.limit, w.seconds]
        return token, args

    @staticmethod
    def _decision(windows: Sequence[Window], now: float, token: str, reply: Sequence[Any]) -> Decision:
        allowed, *rest = reply
        counts = [int(n) for n in rest[0::2]]
        pivots = [float(p) if p else None for p in rest[1::2]]
        return decide(windows, now, token if allowed else None, counts, pivots)

    async def release(self, key: str, windows: Sequence[Window], token: str) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            for name in self._keys(key, windows):
                pipe.zrem(name, token)
            await pipe.execute()

    async def reset(self) -> None:
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self._prefix) + "*"
        batch: list[bytes | str] = []
        async for name in self._client.scan_iter(match=pattern, count=500):
            batch.append(name)
            if len(batch) >= 500:
                await self._client.unlink(*batch)
                batch.clear()
        if batch:
            await self._client.unlink(*batch)

    async def aclose(self) -> None:
        await self._client.aclose()
