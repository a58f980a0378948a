"""A user's best hour to be sent a message: the hour of day their past events cluster in.

Pure. `best_hour` takes the local hours (0-23) of the user's past events; the hour with the most
events wins (ties: the earliest). With fewer than `MIN_EVENTS` events there is nothing to learn
from and the caller falls back to its default. `next_at_hour` places a send inside a window at
that hour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

MIN_EVENTS = 3


def best_hour(events_hours: Iterable[int]) -> int | None:
    """The hour of day (0-23) most of the events happened in; None with too few events."""
    counts = Counter(hour for hour in events_hours if 0 <= hour <= 23)
    if sum(counts.values()) < MIN_EVENTS:
        return None
    return min(counts, key=lambda hour: (-counts[hour], hour))


def next_at_hour(earliest: datetime, latest: datetime, hour: int | None, tz: ZoneInfo) -> datetime:
    """The first moment in [earliest, latest] whose local hour in `tz` is `hour` (the start of
    that hour, or `earliest` when it falls inside it); `earliest` when there is none or no hour."""
    if hour is None or latest < earliest:
        return earliest
    local = earliest.astimezone(tz)
    if local.hour == hour:
        return earliest
    candidate = local.replace(hour=hour, minute=0, second=0, microsecond=0)
    if candidate < local:
        candidate += timedelta(days=1)
    found = candidate.astimezone(earliest.tzinfo)
    return found if found <= latest else earliest
