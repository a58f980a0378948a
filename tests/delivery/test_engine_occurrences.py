"""The occurrence arithmetic of PERIODIC campaigns (`delivery.engine.occurrences`), pure: examples for
the calendar's corners and properties under hypothesis (wall clock kept across DST, only days the
pattern names, numbering, expiry bounds)."""

from __future__ import annotations

import calendar
import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.campaigns.schemas.common import resolve_datetime
from herald.campaigns.schemas.scheduling import SchedulingDetails, SendingFrequency
from herald.delivery.engine.occurrences import Recurrence, following, latest, occurrences, recurrence_of

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
ZONES = [PARIS, NEW_YORK, ZoneInfo("UTC"), ZoneInfo("Australia/Sydney"), ZoneInfo("Asia/Kolkata")]
FAR = datetime(2031, 1, 1, tzinfo=UTC)
D, W, M = SendingFrequency.DAILY, SendingFrequency.WEEKLY, SendingFrequency.MONTHLY


def local(at: datetime, zone: ZoneInfo) -> datetime:
    return at.astimezone(zone)


def all_of(rec: Recurrence, until: datetime = FAR) -> list[datetime]:
    return [o.at for o in occurrences(rec, until)]


def first(rec: Recurrence, count: int) -> list[datetime]:
    return [o.at for o in itertools.islice(occurrences(rec, FAR), count)]


class TestExamples:
    def test_daily_keeps_the_wall_clock_across_spring_forward_and_fall_back(self) -> None:
        start = datetime(2026, 3, 27, 9, 0, tzinfo=PARIS)  # DST starts 29 March, ends 25 October
        rec = Recurrence(D, start.astimezone(UTC), PARIS)
        found = first(rec, 4)
        assert [local(a, PARIS).replace(tzinfo=None) for a in found] == [
            datetime(2026, 3, d, 9, 0) for d in (27, 28, 29, 30)
        ]
        assert [a.hour for a in found] == [8, 8, 7, 7]  # UTC+1, then UTC+2
        autumn = Recurrence(D, datetime(2026, 10, 24, 7, 0, tzinfo=UTC), PARIS)
        assert [a.hour for a in first(autumn, 2)] == [7, 8]

    def test_a_wall_clock_missing_at_spring_forward_is_read_with_the_offset_before(self) -> None:
        start = datetime(2026, 3, 28, 2, 30, tzinfo=PARIS)
        rec = Recurrence(D, start.astimezone(UTC), PARIS)
        second = first(rec, 3)[1]
        assert local(second, PARIS).replace(tzinfo=None) == datetime(2026, 3, 29, 3, 30)

    def test_a_start_time_written_in_the_spring_gap_moves_its_first_run_only(self) -> None:
        # 02:30 does not exist in Berlin on 28 March 2027: that run is at 03:30 (the offset before
        # the change, as the stored start reads it), and the next ones at 02:30, as written.
        details = SchedulingDetails.model_validate(
            {
                "delivery_type": "AT_FIXED_TIME",
                "start_time": "2027-03-28T02:30:00",
                "timezone": "Europe/Berlin",
                "periodic_details": {"sending_frequency": "DAILY", "no_of_occurences": 3},
            }
        )
        start = resolve_datetime("2027-03-28T02:30:00", "Europe/Berlin")
        rec = recurrence_of(details, start, None)
        assert rec is not None
        berlin = ZoneInfo("Europe/Berlin")
        assert [local(a, berlin).replace(tzinfo=None) for a in first(rec, 3)] == [
            datetime(2027, 3, 28, 3, 30),
            datetime(2027, 3, 29, 2, 30),
            datetime(2027, 3, 30, 2, 30),
        ]

    def test_a_start_in_the_second_of_a_repeated_hour_is_the_first_run(self) -> None:
        # New York repeats 01:00-02:00 on 7 November 2027; the start names the second 01:30 (EST).
        # Its day's run is at the start itself (it was skipped: the first 01:30 came before it), and
        # later days keep 01:30.
        start = datetime(2027, 11, 7, 6, 30, tzinfo=UTC)
        assert local(start, NEW_YORK).utcoffset() == timedelta(hours=-5)
        rec = Recurrence(D, start, NEW_YORK)
        assert first(rec, 2) == [start, datetime(2027, 11, 8, 6, 30, tzinfo=UTC)]
        weekly = Recurrence(W, start, NEW_YORK, days_of_week=frozenset({6}))  # Sundays
        assert first(weekly, 2) == [start, datetime(2027, 11, 14, 6, 30, tzinfo=UTC)]

    def test_the_31st_runs_only_in_months_that_have_one(self) -> None:
        start = datetime(2026, 1, 31, 10, 0, tzinfo=UTC)
        rec = Recurrence(M, start, ZoneInfo("UTC"), dates_of_month=frozenset({31}))
        assert [a.date() for a in first(rec, 4)] == [
            date(2026, 1, 31),
            date(2026, 3, 31),
            date(2026, 5, 31),
            date(2026, 7, 31),
        ]

    def test_last_and_first_weekdays_of_the_month(self) -> None:
        start = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
        last_friday = Recurrence(M, start, ZoneInfo("UTC"), nth_weekdays=frozenset({(-1, 4)}))
        assert [a.date() for a in first(last_friday, 3)] == [
            date(2026, 1, 30),
            date(2026, 2, 27),
            date(2026, 3, 27),
        ]
        first_monday = Recurrence(M, start, ZoneInfo("UTC"), nth_weekdays=frozenset({(1, 0)}))
        assert [a.date() for a in first(first_monday, 2)] == [date(2026, 1, 5), date(2026, 2, 2)]

    def test_weekly_every_second_week_on_two_days(self) -> None:
        start = datetime(2026, 3, 4, 8, 0, tzinfo=UTC)  # a Wednesday
        rec = Recurrence(W, start, ZoneInfo("UTC"), every=2, days_of_week=frozenset({0, 4}))
        # Monday 2 March is before the start; Friday 6, then the week of the 16th, then the 30th.
        assert [a.date() for a in first(rec, 4)] == [
            date(2026, 3, 6),
            date(2026, 3, 16),
            date(2026, 3, 20),
            date(2026, 3, 30),
        ]

    def test_latest_and_following(self) -> None:
        start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        rec = Recurrence(D, start, ZoneInfo("UTC"), count=3)
        assert latest(rec, start - timedelta(seconds=1)) is None
        now = start + timedelta(days=1, hours=1)
        found = latest(rec, now)
        assert found is not None
        assert found.run == 2
        after = following(rec, now)
        assert after is not None
        assert (after.run, after.at) == (3, start + timedelta(days=2))
        # The count is of runs, not dates (`periodic.py`): the dates go on past it.
        later = following(rec, start + timedelta(days=2))
        assert later is not None
        assert later.run == 4

    def test_an_occurrence_at_the_expiry_does_not_run(self) -> None:
        # The expiry ends dispatch at that instant (nothing is handed to a connector from then on),
        # so a run there would send nothing: there is none.
        start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        rec = Recurrence(D, start, ZoneInfo("UTC"), expiry=start + timedelta(days=2))
        assert all_of(rec) == [start, start + timedelta(days=1)]
        assert following(rec, start + timedelta(days=1)) is None
        just_after = Recurrence(D, start, ZoneInfo("UTC"), expiry=start + timedelta(days=2, seconds=1))
        assert len(all_of(just_after)) == 3

    def test_a_frequency_past_the_calendar_runs_once(self) -> None:
        # The next run would fall after the year 9999: there is none (before, each tick's
        # arithmetic overflowed and the campaign never ran at all).
        start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        for frequency, every in ((D, 10**12), (D, 3_000_000), (W, 10**8), (M, 10**6), (M, 96_000)):
            rec = Recurrence(frequency, start, ZoneInfo("Pacific/Kiritimati"), every=every)
            end = datetime(9999, 12, 30, tzinfo=UTC)
            assert [o.run for o in occurrences(rec, end)] == [1]
            found = latest(rec, end)
            assert found is not None
            assert found.run == 1
            assert following(rec, start - timedelta(hours=1)) == found
            assert following(rec, start) is None
            assert following(rec, end) is None


starts = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2029, 12, 31), timezones=st.just(UTC)
)
weekday_sets = st.frozensets(st.integers(0, 6), max_size=3)
recurrences = st.builds(
    Recurrence,
    frequency=st.sampled_from([D, W, M]),
    start=starts,
    zone=st.sampled_from(ZONES),
    every=st.integers(1, 4),
    expiry=st.none(),
    days_of_week=weekday_sets,
    dates_of_month=st.frozensets(st.integers(1, 31), max_size=3),
    nth_weekdays=st.frozensets(st.tuples(st.sampled_from([1, 2, 3, 4, -1]), st.integers(0, 6)), max_size=2),
)


def _on_pattern(rec: Recurrence, day: date) -> bool:
    first = rec.start_date
    if rec.frequency is D:
        return (day - first).days % rec.every == 0
    if rec.frequency is W:
        weeks = ((day - timedelta(days=day.weekday())) - (first - timedelta(days=first.weekday()))).days // 7
        return weeks % rec.every == 0 and day.weekday() in (rec.days_of_week or {first.weekday()})
    months = (day.year - first.year) * 12 + day.month - first.month
    if months % rec.every:
        return False
    length = calendar.monthrange(day.year, day.month)[1]
    week = (day.day - 1) // 7 + 1
    named = (
        day.day in rec.dates_of_month
        or day.weekday() in rec.days_of_week
        or (week, day.weekday()) in rec.nth_weekdays
        or (day.day + 7 > length and (-1, day.weekday()) in rec.nth_weekdays)
    )
    if not (rec.dates_of_month or rec.days_of_week or rec.nth_weekdays):
        named = day.day == first.day
    return named


class TestProperties:
    @settings(max_examples=150, deadline=None)
    @given(recurrences)
    def test_every_occurrence_is_on_the_pattern_at_the_wall_clock_in_order(self, rec: Recurrence) -> None:
        until = rec.start + timedelta(days=400)
        found = list(occurrences(rec, until))
        assert [o.run for o in found] == list(range(1, len(found) + 1))
        assert all(a.at < b.at for a, b in itertools.pairwise(found))
        for occurrence in found:
            assert rec.start <= occurrence.at <= until
            wall = occurrence.at.astimezone(rec.zone)
            assert _on_pattern(rec, wall.date())
            # The wall clock is kept, but for a time skipped by spring forward (an hour later).
            shifted = datetime.combine(wall.date(), rec.wall_clock) + timedelta(hours=1)
            assert wall.time().replace(tzinfo=None) == rec.wall_clock or wall.replace(tzinfo=None) == shifted

    @settings(max_examples=100, deadline=None)
    @given(recurrences)
    def test_no_day_of_the_pattern_is_missed(self, rec: Recurrence) -> None:
        until = rec.start + timedelta(days=120)
        days = {o.at.astimezone(rec.zone).date() for o in occurrences(rec, until)}
        day = rec.start_date + timedelta(days=1)
        while datetime.combine(day, time(23, 59), tzinfo=rec.zone) < until - timedelta(days=1):
            if _on_pattern(rec, day):
                assert day in days
            day += timedelta(days=1)

    @settings(max_examples=100, deadline=None)
    @given(recurrences, st.integers(0, 300), st.integers(0, 300))
    def test_expiry_bounds_and_latest_agree_with_the_list(
        self, rec: Recurrence, expire: int, at: int
    ) -> None:
        expiry = rec.start + timedelta(days=expire)
        bounded = Recurrence(**{**rec.__dict__, "expiry": expiry})
        found = list(occurrences(bounded, FAR))
        assert all(o.at < expiry for o in found)
        now = rec.start + timedelta(days=at, hours=5)
        before = [o for o in found if o.at <= now]
        assert latest(bounded, now) == (before[-1] if before else None)
        after = [o for o in found if o.at > now]
        assert following(bounded, now) == (after[0] if after else None)

    @settings(max_examples=150, deadline=None)
    @given(
        st.integers(1, 130),
        st.integers(0, 47),
        st.frozensets(st.integers(29, 31), min_size=1, max_size=2),
        st.integers(0, 800),
    )
    def test_following_finds_a_date_of_month_however_rare(
        self, every: int, month: int, dates: frozenset[int], days: int
    ) -> None:
        # A 29th, 30th or 31st can come back many steps later (a 31st every 17 months from
        # January: seven years on). `following` searched two steps and ended such a campaign.
        start = datetime(2024 + month // 12, month % 12 + 1, 1, 9, tzinfo=UTC)
        rec = Recurrence(M, start, ZoneInfo("UTC"), every=every, dates_of_month=dates)
        now = start + timedelta(days=days)
        later = (o for o in occurrences(rec, datetime(2024 + 12 * 130, 1, 1, tzinfo=UTC)) if o.at > now)
        assert following(rec, now) == next(later, None)

    @settings(max_examples=60, deadline=None)
    @given(st.sampled_from(ZONES), starts, st.integers(1, 3))
    def test_daily_runs_are_one_local_day_apart(self, zone: ZoneInfo, start: datetime, every: int) -> None:
        rec = Recurrence(D, start, zone, every=every)
        days = [o.at.astimezone(zone).date() for o in itertools.islice(occurrences(rec, FAR), 30)]
        assert len(days) == 30
        assert all((b - a).days == every for a, b in itertools.pairwise(days))


def _repeated_hours(zone: ZoneInfo) -> list[datetime]:
    """The UTC instants starting the second of each repeated hour (fall back) in `zone`, 2024-2029."""
    found = []
    at = datetime(2024, 1, 1, tzinfo=UTC)
    while at.year < 2030:
        if local(at, zone).utcoffset() != local(at + timedelta(hours=1), zone).utcoffset():
            after = at + timedelta(hours=1)
            if local(after, zone).utcoffset() < local(at, zone).utcoffset():  # type: ignore[operator]
                found.append(after)
        at += timedelta(hours=1)
    return found


second_hour_starts = st.builds(
    lambda pair, seconds: (pair[0], pair[1] + timedelta(seconds=seconds)),
    st.sampled_from([(zone, at) for zone in (PARIS, NEW_YORK) for at in _repeated_hours(zone)]),
    st.integers(0, 3599),
)


class TestStartOnItsDay:
    @settings(max_examples=100, deadline=None)
    @given(recurrences)
    def test_a_start_on_its_pattern_is_the_first_run(self, rec: Recurrence) -> None:
        found = first(rec, 1)
        if _on_pattern(rec, rec.start_date):
            assert found == [rec.start]

    @settings(max_examples=100, deadline=None)
    @given(second_hour_starts, st.sampled_from([D, W, M]), st.integers(1, 3))
    def test_a_start_in_a_repeated_hour_is_the_first_run(
        self, start: tuple[ZoneInfo, datetime], frequency: SendingFrequency, every: int
    ) -> None:
        zone, at = start
        rec = Recurrence(frequency, at, zone, every=every)
        assert first(rec, 1) == [at]
