"""When a PERIODIC campaign runs: its occurrences as instants, from `scheduling_details`. Pure: no
I/O, no clock (callers pass `now`).

Every occurrence is at `start_time`'s wall clock in the campaign timezone (`scheduling_details.timezone`,
else UTC), on the days `periodic_details` names, so a daily 09:00 stays 09:00 across DST changes. A
wall clock that does not exist that day (spring forward) is read with the offset before the change
(02:30 becomes 03:30); one that exists twice (fall back) is the first of the two, except on the
start's own day when `start_time` names the second (01:30 at -05:00 in New York that day):
the first run is then at the start instant, not skipped for coming before it.

- DAILY: every `repeat_frequency` days from the start date.
- WEEKLY: in every `repeat_frequency`-th week (Monday-based, counted from the start's week), on each
  of `repeat_on_days_of_week` (default: the start's weekday).
- MONTHLY: in every `repeat_frequency`-th month from the start's month, on each of
  `repeat_on_date_of_month` (a month without that date has no run: no 31st in April), each weekday of
  `repeat_on_days_of_week`, each `{week_granularity, repeat_on_days_of_week}` (FIRST ... FOURTH, LAST);
  with none of them, on the start's date of month.

Occurrences before the start instant are not counted; they are numbered 1, 2, ... from there and end
at `expiry_time` (an occurrence at the expiry instant itself does not run: the expiry ends dispatch at
that instant, as it ends a one-time send). `no_of_occurences` counts runs, not dates (`periodic.py`):
a date skipped while the campaign was PAUSED leaves its send to a later one.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from herald.campaigns.schemas.scheduling import SchedulingDetails, SendingFrequency
from herald.timefmt import parse_iso_datetime
from herald.timezones import zone_named

WEEKDAYS = ("MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY")
WEEKS = {"FIRST": 1, "SECOND": 2, "THIRD": 3, "FOURTH": 4, "LAST": -1}


@dataclass(frozen=True)
class Recurrence:
    frequency: SendingFrequency
    start: datetime  # aware: the first possible occurrence
    zone: ZoneInfo
    every: int = 1
    count: int | None = None  # runs in all (`no_of_occurences`): the dates do not end with it
    expiry: datetime | None = None
    days_of_week: frozenset[int] = frozenset()  # 0 = Monday
    dates_of_month: frozenset[int] = frozenset()
    # (week of the month: 1-4, or -1 for the last, weekday)
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()
    # The wall clock `start_time` names when it has no offset: a time the spring change skips on
    # the start's day (02:30) starts an hour later that day only, and every later run keeps 02:30.
    named_wall_clock: time | None = None

    @property
    def wall_clock(self) -> time:
        if self.named_wall_clock is not None:
            return self.named_wall_clock
        return _wall_of(self.start, self.zone)

    @property
    def start_date(self) -> date:
        return self.start.astimezone(self.zone).date()


@dataclass(frozen=True)
class Occurrence:
    run: int  # 1, 2, ...
    at: datetime  # UTC


def recurrence_of(details: SchedulingDetails, start: datetime, expiry: datetime | None) -> Recurrence | None:
    """The recurrence a PERIODIC campaign's `scheduling_details` describe (start and expiry as the
    stored instants); None without `periodic_details`."""
    periodic = details.periodic_details
    if periodic is None:
        return None
    return Recurrence(
        frequency=periodic.sending_frequency,
        start=start,
        zone=zone_named(details.timezone),
        every=max(1, int(periodic.repeat_frequency or 1)),
        count=int(periodic.no_of_occurences) if periodic.no_of_occurences else None,
        expiry=expiry,
        days_of_week=frozenset(WEEKDAYS.index(d.value) for d in periodic.repeat_on_days_of_week or []),
        dates_of_month=frozenset(int(d) for d in periodic.repeat_on_date_of_month or []),
        nth_weekdays=frozenset(
            (WEEKS[item.week_granularity.value], WEEKDAYS.index(day.value))
            for item in periodic.repeat_on_days_of_week_for_month or []
            for day in item.repeat_on_days_of_week
        ),
        named_wall_clock=_named_wall_clock(details.start_time),
    )


def _named_wall_clock(start_time: str | None) -> time | None:
    """The time of day `start_time` is written with, when it is written without an offset (then it
    is a wall clock of the campaign timezone); None otherwise (its instant gives the wall clock)."""
    parsed = parse_iso_datetime(start_time) if start_time else None
    if parsed is None or parsed.tzinfo is not None:
        return None
    return parsed.time().replace(fold=0)


def local_instant(day: date, wall: time, zone: ZoneInfo) -> datetime:
    """`wall` on `day` in `zone`, as a UTC instant (see the module's note on DST)."""
    return datetime.combine(day, wall, tzinfo=zone).astimezone(UTC)


def _wall_of(instant: datetime, zone: ZoneInfo) -> time:
    """The wall clock of `instant` in `zone`, without which of a repeated hour it is."""
    return instant.astimezone(zone).time().replace(tzinfo=None, fold=0)


def _month_days(rec: Recurrence, year: int, month: int) -> list[date]:
    length = calendar.monthrange(year, month)[1]
    days: set[int] = {d for d in rec.dates_of_month if d <= length}
    first_weekday = date(year, month, 1).weekday()
    for weekday in rec.days_of_week:
        days.update(range(1 + (weekday - first_weekday) % 7, length + 1, 7))
    for week, weekday in rec.nth_weekdays:
        first = 1 + (weekday - first_weekday) % 7
        if week == -1:
            days.add(first + 7 * ((length - first) // 7))
        elif first + 7 * (week - 1) <= length:
            days.add(first + 7 * (week - 1))
    if not (rec.dates_of_month or rec.days_of_week or rec.nth_weekdays) and rec.start_date.day <= length:
        days.add(rec.start_date.day)
    return [date(year, month, d) for d in sorted(days)]


def _days(rec: Recurrence, until: date) -> Iterator[date]:
    """Candidate local dates in order, from the start date through `until`."""
    first = rec.start_date
    if rec.frequency is SendingFrequency.DAILY:
        day = first
        while day <= until:
            yield day
            if (until - day).days < rec.every:
                return  # the next is after `until` (and perhaps past the calendar's last day)
            day += timedelta(days=rec.every)
    elif rec.frequency is SendingFrequency.WEEKLY:
        weekdays = sorted(rec.days_of_week or {first.weekday()})
        monday = first - timedelta(days=first.weekday())
        while monday <= until:
            for weekday in weekdays:
                day = monday + timedelta(days=weekday)
                if first <= day <= until:
                    yield day
            if (until - monday).days < 7 * rec.every:
                return
            monday += timedelta(weeks=rec.every)
    else:
        year, month = first.year, first.month
        while (year, month) <= (until.year, until.month):
            for day in _month_days(rec, year, month):
                if first <= day <= until:
                    yield day
            month += rec.every
            year, month = year + (month - 1) // 12, (month - 1) % 12 + 1


def occurrences(rec: Recurrence, until: datetime) -> Iterator[Occurrence]:
    """The occurrences at or before `until`, in order (bounded however the schedule is set)."""
    wall = rec.wall_clock
    last_day = until.astimezone(rec.zone).date() + timedelta(days=1)
    run = 0
    start_day, start_wall = rec.start_date, _wall_of(rec.start, rec.zone)
    for day in _days(rec, last_day):
        at = local_instant(day, wall, rec.zone)
        if day == start_day and at < rec.start and start_wall == wall:
            at = rec.start  # the second of a repeated hour, named by the start itself
        if at < rec.start:
            continue
        if at > until or (rec.expiry is not None and at >= rec.expiry):
            return
        run += 1
        yield Occurrence(run, at)


def latest(rec: Recurrence, now: datetime) -> Occurrence | None:
    """The last occurrence at or before `now`, if any."""
    found = None
    for found in occurrences(rec, now):  # noqa: B007 - the last one is the answer
        pass
    return found


def following(rec: Recurrence, now: datetime) -> Occurrence | None:
    """The first occurrence after `now`, if any: None once the expiry ends the schedule, or when
    the pattern has no date left (a 31st of every twelfth month from April; a run after the
    year 9999). Searched far enough ahead for any pattern: a date of month comes back within
    twelve of its steps (a 29 February every twelve months within four), the rest every step."""
    # Within the calendar (a `repeat_frequency` of a million months has one run, then none).
    room = max(0, (datetime.max.replace(tzinfo=UTC) - now).days - 2)
    horizon = timedelta(days=min(4 * 366 + 12 * 31 * rec.every, room))
    for occurrence in occurrences(rec, now + horizon):
        if occurrence.at > now:
            return occurrence
    return None
