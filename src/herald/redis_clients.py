"""Redis clients whose every exchange is bounded: the rate limiter's and the delivery throttle's.

A Redis that accepts connections and never answers (stopped, swapping, a full network buffer) must
fail the calls that wait on it, not hold them: a request then answers 503, and a worker's claim
fails and is tried again at its next tick. Without a bound, one worker waited on the throttle for
as long as Redis was stopped, holding its campaign's row, and every other worker waited on that row.
"""

from __future__ import annotations

from redis.asyncio import Redis

# The longest a call waits on Redis (to connect, or for a reply it is due) unless the URL says
# otherwise (`?socket_timeout=2.5`, `socket_connect_timeout`): a healthy Redis answers in well under
# a millisecond. A second proved too short on a loaded machine (a CI run's two test suites on two
# cores): three.
TIMEOUT_SECONDS = 3.0


def bounded_client(url: str) -> Redis:
    """A client of `url`, each exchange bounded by `TIMEOUT_SECONDS` (or the URL's own bounds)."""
    return Redis.from_url(url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS)
