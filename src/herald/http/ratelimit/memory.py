"""In-process rate-limit store: one worker, zero setup.

Each (key, window length) holds a time-ordered log of admitted entries. `acquire` never awaits,
so under asyncio the check-all-then-add-all step cannot interleave with another request.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from operator import itemgetter

from herald.http.ratelimit.core import AHEAD, Decision, Window, check_windows, decide, longest_wait

_Log = list[tuple[float, str]]  # (admitted at, token), sorted
_at = itemgetter(0)


class MemoryRateLimitStore:
    def __init__(self, sweep_every: float = 60.0) -> None:
        self._logs: dict[tuple[str, int], _Log] = {}
        # Idle keys are dropped by a sweep over all logs at most once per `sweep_every` seconds of
        # caller time, which keeps memory bounded by the keys active within the longest window.
        self._sweep_every = sweep_every
        self._next_sweep = -math.inf
        self._tokens = itertools.count(1)

    def __len__(self) -> int:
        """Number of logs held (for tests and metrics)."""
        return len(self._logs)

    async def acquire(self, key: str, windows: Sequence[Window], now: float) -> Decision:
        windows = check_windows(windows)
        self._sweep(now)
        logs = [self._live_log(key, w, now) for w in windows]
        token = None
        if all(len(log) < w.limit for log, w in zip(logs, windows, strict=True)):
            token = str(next(self._tokens))  # unique within this store, which is this process's
            for log in logs:
                bisect.insort(log, (now, token))
        counts = [len(log) for log in logs]
        pivots = [_pivot(log, w) for log, w in zip(logs, windows, strict=True)]
        return decide(windows, now, token, counts, pivots)

    async def wait(self, key: str, windows: Sequence[Window], now: float) -> int:
        windows = check_windows(windows)
        logs = [self._live_log(key, w, now) for w in windows]
        counts = [len(log) for log in logs]
        pivots = [_pivot(log, w) for log, w in zip(logs, windows, strict=True)]
        return longest_wait(windows, now, counts, pivots)

    async def release(self, key: str, windows: Sequence[Window], token: str) -> None:
        for w in windows:
            log = self._logs.get((key, w.seconds), [])
            for i, (_, entry) in enumerate(log):
                if entry == token:
                    del log[i]
                    break

    async def reset(self) -> None:
        self._logs.clear()
        self._next_sweep = -math.inf

    async def aclose(self) -> None:
        self._logs.clear()

    def _live_log(self, key: str, window: Window, now: float) -> _Log:
        log = self._logs.setdefault((key, window.seconds), [])
        del log[bisect.bisect_right(log, now + AHEAD, key=_at) :]
        del log[: bisect.bisect_right(log, now - window.seconds, key=_at)]
        return log

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._sweep_every
        for (key, seconds), log in list(self._logs.items()):
            if not log or log[-1][0] <= now - seconds:
                del self._logs[key, seconds]


def _pivot(log: _Log, window: Window) -> float | None:
    """The admission time whose expiry frees the window's next slot (see `core.decide`)."""
    return log[max(0, len(log) - window.limit)][0] if log else None
