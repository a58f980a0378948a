"""The request date-time pattern: what it admits parses, and it is the same rule the API states."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.timefmt import (
    DATE_OR_DATE_TIME_PATTERN,
    DATE_TIME_PATTERN,
    EARLIEST,
    LATEST,
    as_utc,
    campaign_timestamp,
    day_end,
    day_start,
    meta_timestamp,
    parse_iso_datetime,
    rfc3339,
)


@settings(max_examples=500, deadline=None)
@given(st.from_regex(DATE_TIME_PATTERN, fullmatch=True))
def test_every_text_the_pattern_admits_is_a_date_time(text: str) -> None:
    assert parse_iso_datetime(text) is not None


@settings(max_examples=300, deadline=None)
@given(st.datetimes())
def test_common_spellings_of_any_date_time_are_admitted(value: datetime) -> None:
    for text in (
        value.isoformat(),
        value.isoformat(sep=" ", timespec="minutes"),
        value.isoformat(timespec="seconds") + "Z",
        value.isoformat(timespec="milliseconds") + "+05:30",
    ):
        assert parse_iso_datetime(text) == datetime.fromisoformat(text), text


@pytest.mark.parametrize(
    "text",
    [
        "2025-02-29T00:00",  # not a leap year
        "2026-04-31T00:00",
        "0000-01-01T00:00",
        "2026-01-01T24:00",
        "2026-01-01T09:30:00.1234567",
        "2026-01-01T09:30+0530",
        "2026-01-01",  # a date-time needs a time of day
        "2026-01-01T09:30\n",
        "\uff12\uff10\uff12\uff16-01-01T09:30",  # digits are ASCII (these are full-width)
    ],
)
def test_what_the_pattern_refuses(text: str) -> None:
    assert parse_iso_datetime(text) is None


def test_leap_days_follow_the_gregorian_rule() -> None:
    admitted = re.compile(DATE_OR_DATE_TIME_PATTERN)
    assert [year for year in (1900, 2000, 2024, 2100, 2400) if admitted.fullmatch(f"{year}-02-29")] == [
        2000,
        2024,
        2400,
    ]


def test_as_utc_keeps_an_instant_and_clamps_one_beyond_the_calendar() -> None:
    assert as_utc(datetime.fromisoformat("2026-03-01T09:30:00+05:30")) == datetime(
        2026, 3, 1, 4, 0, tzinfo=UTC
    )
    assert as_utc(datetime.fromisoformat("9999-12-31T23:59:00-05:00")) == LATEST
    assert as_utc(datetime.fromisoformat("0001-01-01T00:00:00+05:00")) == EARLIEST


@given(st.dates())
def test_a_day_is_the_utc_instants_from_its_start_until_the_next_days(day: date) -> None:
    start, end = day_start(day), day_end(day)
    assert start == datetime(day.year, day.month, day.day, tzinfo=UTC)
    if day == date.max:
        assert end is None  # no date-time holds the next day's start: the last day bounds nothing
    else:
        assert end == start + timedelta(days=1)
        assert end.date() == day + timedelta(days=1)


@pytest.mark.parametrize(
    ("value", "offers", "campaign", "meta"),
    [
        (
            datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC),
            "2026-03-01T09:30:00.123Z",
            "2026-03-01 09:30:00.123456",
            "2026-03-01T09:30:00",
        ),
        (
            datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
            "2026-03-01T09:30:00Z",
            "2026-03-01 09:30:00.000000",
            "2026-03-01T09:30:00",
        ),
        (
            datetime(1, 1, 1, tzinfo=UTC),
            "0001-01-01T00:00:00Z",
            "0001-01-01 00:00:00.000000",
            "0001-01-01T00:00:00",
        ),
    ],
)
def test_wire_formats_write_four_digit_years(value: datetime, offers: str, campaign: str, meta: str) -> None:
    assert (rfc3339(value), campaign_timestamp(value), meta_timestamp(value)) == (offers, campaign, meta)
