"""Multi-window rolling rate limits, checked atomically: a request refused by one window takes no
slot in any other. In-process store for one worker, Redis store for many processes and hosts."""

from __future__ import annotations

from redis.asyncio import Redis

from herald.http.ratelimit.core import Decision, RateLimitStore, Window, parse_windows
from herald.http.ratelimit.memory import MemoryRateLimitStore
from herald.http.ratelimit.redis import RedisRateLimitStore

__all__ = [
    "Decision",
    "MemoryRateLimitStore",
    "RateLimitStore",
    "RedisRateLimitStore",
    "Window",
    "make_store",
    "parse_windows",
]


def make_store(redis_url: str | None, prefix: str = "herald:rl:") -> RateLimitStore:
    """Redis when a URL is configured (limits hold across processes), otherwise in-process."""
    if redis_url:
        return RedisRateLimitStore(Redis.from_url(redis_url), prefix=prefix)
    return MemoryRateLimitStore()
