"""How long a campaign's delays, windows and periods last: one reading of a value and its unit
(`Granularity`, or hours for the `..._in_hour(s)` fields) for the rules that bound them and for the
engine that waits them out.

Every such duration is at most `LONGEST`. A campaign naming more is refused when it is created,
updated or published (`too_long`, OUT_OF_RANGE at the field); the engine reads a longer one
(stored before the bound was checked) as `LONGEST`, so that a moment it computes from now (now +
the duration) stays on the calendar: 99,999,999,999 days from now is past the year 9999, and one
such campaign stopped every tick of its workspace.
"""

from __future__ import annotations

import math
from datetime import timedelta

from herald.campaigns.schemas.common import Granularity

LONGEST = timedelta(days=3650)  # ten years: longer than any delay, window or period a campaign means
LONGEST_TEXT = "ten years"

UNITS = {
    Granularity.MINUTES: timedelta(minutes=1),
    Granularity.HOURS: timedelta(hours=1),
    Granularity.DAYS: timedelta(days=1),
}


def _amount(value: float | int | str | None) -> float:
    """The value as a number (the spec writes some as strings of digits); none or not a number: 0."""
    if value is None:
        return 0.0
    try:
        amount = float(value)
    except OverflowError:  # a whole number no float holds: longer than any bound
        return math.inf
    except ValueError:
        return 0.0
    return amount if not math.isnan(amount) else 0.0


def _seconds(value: float | int | str | None, granularity: Granularity | str | None) -> float:
    unit = UNITS[Granularity(granularity or Granularity.MINUTES)]
    return _amount(value) * unit.total_seconds()


def duration(
    value: float | int | str | None, granularity: Granularity | str | None = Granularity.MINUTES
) -> timedelta:
    """`value` of `granularity` (minutes when none is named), between none and `LONGEST`."""
    seconds = _seconds(value, granularity)
    return timedelta(seconds=min(max(seconds, 0.0), LONGEST.total_seconds()))


def hours(value: float | int | str | None) -> timedelta:
    """A `..._in_hour(s)` field's duration (see `duration`)."""
    return duration(value, Granularity.HOURS)


def too_long(value: float | int | str | None, granularity: Granularity | str | None) -> bool:
    """Whether `value` of `granularity` (minutes when none is named) is longer than `LONGEST`."""
    return _seconds(value, granularity) > LONGEST.total_seconds()
