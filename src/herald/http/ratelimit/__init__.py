"""Multi-window rolling rate limits, checked atomically: a request refused by one window takes no
slot in any other. In-process store for one worker, Redis store for many processes and hosts."""

from __future__ import annotations

from herald.http.ratelimit.core import Decision, RateLimitStore, Window, parse_windows
from herald.http.ratelimit.memory import MemoryRateLimitStore
from herald.http.ratelimit.redis import RedisRateLimitStore
from herald.redis_clients import bounded_client

__all__ = [
    "HELD_CLOCK_KEEP_SECONDS",
    "Decision",
    "MemoryRateLimitStore",
    "RateLimitStore",
    "RedisRateLimitStore",
    "Window",
    "make_store",
    "parse_windows",
]


# How long Redis keeps an idle log of a sandbox whose clock may stand still (real time).
HELD_CLOCK_KEEP_SECONDS = 7 * 86400


def make_store(
    redis_url: str | None, prefix: str = "herald:rl:", *, held_clock: bool = False
) -> RateLimitStore:
    """Redis when a URL is configured (limits hold across processes), otherwise in-process.
    `held_clock`: the clock may stand still (`HERALD_CLOCK_FILE`), so Redis keeps idle logs for
    `HELD_CLOCK_KEEP_SECONDS` rather than a window.

    Every exchange with Redis is bounded by `TIMEOUT_SECONDS` unless the URL says otherwise
    (`?socket_timeout=2.5`, `socket_connect_timeout`)."""
    if redis_url:
        keep = HELD_CLOCK_KEEP_SECONDS if held_clock else 0
        return RedisRateLimitStore(bounded_client(redis_url), prefix=prefix, keep_seconds=keep)
    return MemoryRateLimitStore()
