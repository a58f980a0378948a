"""What a rolling-window limit is and how a decision is read out of the logs.

Both stores keep a sliding log per (key, window): an entry admitted at `t` counts while
`now - seconds < t <= now + AHEAD`. They report, per window, how many entries are live and the score of the
entry whose expiry frees the next slot; `decide` turns that into a `Decision`, so the header and
Retry-After arithmetic exists once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from herald.clock import AHEAD as CLOCK_AHEAD

_UNITS: dict[str, int] = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
}
_PART = re.compile(r"\s*([0-9]+)\s*/\s*([a-z]+)\s*")
# An entry admitted more than this many seconds after now is from a clock since moved back
# (`herald.clock.AHEAD`): it no longer counts (it kept a key refused for the whole jump and a
# window more).
AHEAD = int(CLOCK_AHEAD.total_seconds())


@dataclass(frozen=True)
class Window:
    """At most `limit` requests in any `seconds`-long stretch of time."""

    limit: int
    seconds: int

    def __post_init__(self) -> None:
        if self.limit < 1 or self.seconds < 1:
            raise ValueError(f"a window needs limit >= 1 and seconds >= 1, got {self.limit}/{self.seconds}s")


def parse_windows(spec: str) -> tuple[Window, ...]:
    """Read "150/minute;500/hour;1000/day" (also "10/s", "25/min", "100/h"), shortest window first.

    Parts are separated by ";" or ",". Two limits for the same period are refused: they would share
    one log, and the intent is ambiguous anyway.
    """
    windows: list[Window] = []
    for part in re.split(r"[;,]", spec):
        match = _PART.fullmatch(part.lower())
        if match is None or match.group(2) not in _UNITS:
            raise ValueError(f"not a rate limit: {part.strip()!r} (expected e.g. '100/minute')")
        windows.append(Window(int(match.group(1)), _UNITS[match.group(2)]))
    return check_windows(sorted(windows, key=lambda w: w.seconds))


def check_windows(windows: Sequence[Window]) -> tuple[Window, ...]:
    """Refuse window sets the stores cannot keep apart (they key their logs by window length)."""
    if not windows:
        raise ValueError("a rate limit needs at least one window")
    if len({w.seconds for w in windows}) != len(windows):
        raise ValueError("a rate limit cannot have two windows of the same length")
    return tuple(windows)


@dataclass(frozen=True)
class Decision:
    """The outcome of one acquire, described by the window nearest exhaustion.

    That window is the one with the fewest slots left after this request (ties go to the shorter
    window); `limit`, `remaining` and `reset_at` (epoch seconds, rounded up, when it next frees a
    slot) describe it. `retry_after` is 0 when allowed; when refused it is the whole number of
    seconds after which the same request would pass every window. `token` names the recorded
    entry, for `release`.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_at: int
    retry_after: int
    token: str | None


class RateLimitStore(Protocol):
    async def acquire(self, key: str, windows: Sequence[Window], now: float) -> Decision:
        """Record one request at `now` in every window, or in none if any window is full."""
        ...

    async def wait(self, key: str, windows: Sequence[Window], now: float) -> int:
        """Whole seconds after `now` when a request would pass every window (0: it would now),
        recording nothing."""
        ...

    async def release(self, key: str, windows: Sequence[Window], token: str) -> None:
        """Forget the entry `token` (a reserved slot whose operation failed). Unknown tokens are ignored."""
        ...

    async def reset(self) -> None:
        """Forget everything this store recorded."""
        ...

    async def aclose(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...


def seconds_until_free(pivot: float, seconds: int, now: float) -> int:
    """Smallest whole k >= 0 such that an entry at `pivot` no longer counts at `now + k`.

    The estimate is settled with the very comparison the stores prune with, so a caller that
    comes back at exactly `now + k` is never refused by float rounding.
    """
    k = max(0, math.ceil(pivot + seconds - now))
    while pivot > (now + k) - seconds:
        k += 1
    while k > 0 and pivot <= (now + (k - 1)) - seconds:
        k -= 1
    return k


def decide(
    windows: Sequence[Window],
    now: float,
    token: str | None,
    counts: Sequence[int],
    pivots: Sequence[float | None],
) -> Decision:
    """Build the decision from each window's live count and pivot.

    `counts` include this request when it was admitted (`token` set). `pivots[i]` is the score of
    the entry at index max(0, count - limit) of window i's log, in time order, or None if the log
    is empty: once it expires the window has a free slot.
    """
    remaining = [max(0, w.limit - n) for w, n in zip(windows, counts, strict=True)]
    i = min(range(len(windows)), key=lambda j: (remaining[j], windows[j].seconds))
    pivot = pivots[i]
    reset_at = seconds_until_free(pivot, windows[i].seconds, 0.0) if pivot is not None else math.ceil(now)
    if token is not None:
        return Decision(True, windows[i].limit, remaining[i], reset_at, 0, token)
    return Decision(
        False, windows[i].limit, 0, reset_at, max(1, longest_wait(windows, now, counts, pivots)), None
    )


def longest_wait(
    windows: Sequence[Window], now: float, counts: Sequence[int], pivots: Sequence[float | None]
) -> int:
    """Whole seconds until every full window (live `counts` without the request) frees a slot: the
    longest wait among the windows a request would exceed now, 0 when it exceeds none. `pivots` as
    `decide` takes them."""
    waits = [
        seconds_until_free(p, w.seconds, now)
        for w, n, p in zip(windows, counts, pivots, strict=True)
        if n >= w.limit and p is not None
    ]
    return max([0, *waits])
