"""`herald.campaigns.durations`: one reading of a campaign's delays, windows and periods, bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from herald.campaigns import durations
from herald.campaigns.schemas.common import Granularity


def test_a_value_of_its_unit() -> None:
    assert durations.duration("90", Granularity.MINUTES) == timedelta(minutes=90)
    assert durations.duration(2, Granularity.DAYS) == timedelta(days=2)
    assert durations.duration(3, None) == timedelta(minutes=3)  # minutes when no unit is named
    assert durations.hours("1.5") == timedelta(minutes=90)
    assert durations.duration(None, Granularity.HOURS) == timedelta(0)


def test_the_bound_is_ten_years_in_every_unit() -> None:
    assert not durations.too_long("3650", Granularity.DAYS)
    assert durations.too_long("3651", Granularity.DAYS)
    assert not durations.too_long(87_600, Granularity.HOURS)
    assert durations.too_long(87_601, Granularity.HOURS)
    assert durations.too_long("9" * 5000, Granularity.MINUTES)  # no float holds it: still too long


@given(
    st.one_of(
        st.integers(min_value=0, max_value=10**400), st.text(alphabet="0123456789", min_size=1, max_size=400)
    ),
    st.sampled_from(list(Granularity)),
)
def test_a_stored_duration_of_any_length_keeps_a_moment_on_the_calendar(
    value: int | str, unit: Granularity
) -> None:
    # A campaign stored before the bound was checked: the engine reads its duration as at most
    # ten years, so now + it is a date (99,999,999,999 days stopped every tick of a workspace).
    length = durations.duration(value, unit)
    assert timedelta(0) <= length <= durations.LONGEST
    assert datetime(2026, 11, 29, tzinfo=UTC) + length < datetime(9999, 1, 1, tzinfo=UTC)
