"""Periods of time that datetime filters select, and how request dates and date-times are read.

All instants are aware UTC datetimes. Relative windows (`inTheLast`, `inTheNext`, `today`) are kept
as such until `resolve_period` is given the injected clock's `now`. Arithmetic that would leave the
years 1-9999 is clamped to the representable range (a window reaching past it is simply open).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from herald.timefmt import EARLIEST, LATEST, day_end, day_start, parse_iso_datetime

UNITS = ("minutes", "hours", "days", "weeks", "months")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True)
class Period:
    """Instants between `start` and `end` (None: unbounded), each end inclusive or not."""

    start: datetime | None
    end: datetime | None
    start_inclusive: bool = True
    end_inclusive: bool = False


@dataclass(frozen=True, slots=True)
class RelativeWindow:
    """`inTheLast` (now - amount units .. now) or `inTheNext` (now .. now + amount units)."""

    amount: int
    unit: str
    future: bool


@dataclass(frozen=True, slots=True)
class Today:
    """The current UTC day."""


def parse_date(value: str) -> date | None:
    if not _DATE.fullmatch(value):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def parse_instant(value: str) -> datetime | None:
    """An ISO 8601 date-time (a time of day is required; no zone means UTC), as UTC."""
    parsed = parse_iso_datetime(value)
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return None


def period_on(moment: tuple[datetime, bool]) -> Period:
    day = moment[0].date()
    return Period(day_start(day), day_end(day))


def period_before(moment: tuple[datetime, bool]) -> Period:
    return Period(None, moment[0], end_inclusive=False)


def period_after(moment: tuple[datetime, bool]) -> Period:
    instant, is_date = moment
    if not is_date:
        return Period(instant, None, start_inclusive=False)
    following = day_end(instant.date())
    # after the last representable day: nothing is later
    return Period(following, None) if following else Period(LATEST, None, start_inclusive=False)


def period_between(low: tuple[datetime, bool], high: tuple[datetime, bool]) -> Period | None:
    """From `low` to `high`, both inclusive (a date `high` includes its whole day); None if reversed."""
    if low[0] > high[0]:
        return None
    if high[1]:
        return Period(low[0], day_end(high[0].date()), end_inclusive=False)
    return Period(low[0], high[0], end_inclusive=True)


def add_months(moment: datetime, months: int) -> datetime:
    """Calendar months later (or earlier); the day is clamped to the target month's length."""
    years, month_index = divmod(moment.month - 1 + months, 12)
    year = moment.year + years
    if year < 1:
        return EARLIEST
    if year > 9999:
        return LATEST
    day = min(moment.day, calendar.monthrange(year, month_index + 1)[1])
    return moment.replace(year=year, month=month_index + 1, day=day)


def shift(moment: datetime, amount: int, unit: str) -> datetime:
    """`moment` moved by `amount` units (negative: earlier), clamped to the representable range."""
    if unit == "months":
        return add_months(moment, amount)
    delta = timedelta(**{unit: abs(amount)})
    try:
        return moment + delta if amount >= 0 else moment - delta
    except OverflowError:
        return LATEST if amount >= 0 else EARLIEST


def resolve_period(condition: Period | RelativeWindow | Today, now: datetime) -> Period:
    """The absolute period a datetime condition selects at `now`."""
    if isinstance(condition, Period):
        return condition
    now = now.astimezone(UTC)
    if isinstance(condition, Today):
        return Period(day_start(now.date()), day_end(now.date()))
    if condition.future:
        return Period(now, shift(now, condition.amount, condition.unit), end_inclusive=True)
    return Period(shift(now, -condition.amount, condition.unit), now, end_inclusive=True)
