"""Pure attribute rules: names, value types, the stored form of date-times, standard attributes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.audience.attributes import (
    normalise_attributes,
    normalise_customer_attributes,
    normalise_value,
    parse_datetime_text,
    utc_text,
)
from herald.audience.ingest import FUTURE_TOLERANCE, parse_event_time, parse_time

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("text", "text"),
        ("", ""),
        (3, 3),
        (-2.5, -2.5),
        (True, True),
        (None, None),
        ("2026-01-15T12:00:00Z", "2026-01-15T12:00:00Z"),
        ("2026-01-15T12:00:00z", "2026-01-15T12:00:00Z"),
        ("2026-01-15T13:30:00+01:30", "2026-01-15T12:00:00Z"),
        ("2026-01-15T07:00:00-0500", "2026-01-15T12:00:00Z"),
        ("2026-01-15 12:00", "2026-01-15T12:00:00Z"),
        ("2026-01-15T12:00:00.987654Z", "2026-01-15T12:00:00Z"),
        ("2026-01-15T12:00:00,5Z", "2026-01-15T12:00:00Z"),
        ("2026-01-01T00:30:00+01:00", "2025-12-31T23:30:00Z"),
        ("2026-01-15", "2026-01-15"),  # no time of day: text
        ("2026-01-15T12:00:00Z trailing", "2026-01-15T12:00:00Z trailing"),  # not a date-time: text
        (["b", 1, False, "2026-01-15T13:00:00+01:00"], ["b", 1, False, "2026-01-15T12:00:00Z"]),
        ([], []),
    ],
)
def test_values_are_stored_in_normal_form(value: Any, stored: Any) -> None:
    assert normalise_value(value, ("x",)) == (stored, [])


@pytest.mark.parametrize(
    ("value", "code", "target"),
    [
        ({"a": 1}, "INVALID_TYPE", "x"),
        ([None], "INVALID_TYPE", "x.0"),
        (["a", {"b": 1}], "INVALID_TYPE", "x.1"),
        ([[1]], "INVALID_TYPE", "x.0"),
        (2**63, "OUT_OF_RANGE", "x"),
        (-(2**63) - 1, "OUT_OF_RANGE", "x"),
        (["ok", "y" * 10_001], "OUT_OF_RANGE", "x.1"),
        ("2026-13-01T00:00:00Z", "INVALID_TYPE", "x"),
        ("2026-02-29T00:00:00Z", "INVALID_TYPE", "x"),
        ("2026-01-01T25:00:00Z", "INVALID_TYPE", "x"),
    ],
)
def test_bad_values_have_a_problem_at_their_path(value: Any, code: str, target: str) -> None:
    _, problems = normalise_value(value, ("x",))
    assert [(p.code, p.target) for p in problems] == [(code, target)]


def test_largest_integers_are_kept() -> None:
    # A signed 64-bit whole number: its least one is one further from 0 than its greatest.
    assert normalise_value(2**63 - 1, ("x",)) == (2**63 - 1, [])
    assert normalise_value(-(2**63), ("x",)) == (-(2**63), [])


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("plan", True),
        ("a.b", True),
        ("Ünïcode ✓", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("  ", False),
        ("line\nbreak", False),
        ("del\x7f", False),
        ("customer_id", False),
    ],
)
def test_attribute_names(name: str, ok: bool) -> None:
    stored, problems = normalise_attributes({name: 1}, ("attributes",))
    assert (not problems) is ok
    assert (name in stored) is ok


def test_standard_attributes_are_split_from_custom_ones() -> None:
    normalised, problems = normalise_customer_attributes(
        {"email": "a@example.com", "sms_opt_out": None, "timezone": None, "plan": "gold", "gone": None},
        ("attributes",),
    )
    assert problems == []
    assert normalised.columns == {"email": "a@example.com", "sms_opt_out": False, "timezone": None}
    assert normalised.patch == {"plan": "gold", "gone": None}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("email", "no-at-sign"),
        ("email", "two@@example.com"),
        ("email", "x@" + "e" * 320),
        ("mobile", "+"),
        ("mobile", "12a"),
        ("first_name", 5),
        ("first_name", "tab\there"),
        ("gaid", "g" * 65),
        ("push_id", ["token"]),
        ("timezone", "UTC+2"),
        ("timezone", ""),
        ("push_opt_out", "false"),
        ("email_opt_out", 0),
    ],
)
def test_bad_standard_attributes(name: str, value: Any) -> None:
    _, problems = normalise_customer_attributes({name: value}, ("attributes",))
    assert [p.target for p in problems] == [f"attributes.{name}"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-15T12:00:00Z", datetime(2026, 1, 15, 12, tzinfo=UTC)),
        ("2026-01-15T12:00:00", datetime(2026, 1, 15, 12, tzinfo=UTC)),
        ("2026-01-15T14:00:00+02:00", datetime(2026, 1, 15, 12, tzinfo=UTC)),
        ("0001-01-01T00:00:00+01:00", None),  # before the first representable instant
        ("yesterday", None),
        ("2026-01-15", None),
    ],
)
def test_parse_datetime_text(text: str, expected: datetime | None) -> None:
    assert parse_datetime_text(text) == expected


@given(st.datetimes(timezones=st.just(UTC)))
def test_a_stored_date_time_reads_back_as_the_same_instant(value: datetime) -> None:
    # Years before 1000 were stored without their leading zeros (`999-05-05T...`), which nothing
    # then read as a date-time: no datetime filter matched such a user, not even `exists`.
    stored = utc_text(value)
    assert stored[4] == "-"
    assert parse_datetime_text(stored) == value.replace(microsecond=0)


def test_a_date_time_of_a_year_before_1000_is_stored_with_four_digits() -> None:
    normalised, problems = normalise_customer_attributes({"born": "0999-05-05T00:00:00Z"}, ("attributes",))
    assert problems == []
    assert normalised.patch == {"born": "0999-05-05T00:00:00Z"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, datetime(1970, 1, 1, tzinfo=UTC)),
        (1_768_478_400, NOW),
        (1_768_478_400.25, NOW + timedelta(milliseconds=250)),
        ("2026-01-15T12:00:00Z", NOW),
    ],
)
def test_event_times(value: Any, expected: datetime) -> None:
    assert parse_time(value, ("t",)) == (expected, [])


def test_event_time_defaults_to_now_and_allows_the_tolerance() -> None:
    assert parse_event_time(None, ("t",), NOW) == (NOW, [])
    edge = NOW + FUTURE_TOLERANCE
    assert parse_event_time(edge.isoformat(), ("t",), NOW) == (edge, [])
    late, problems = parse_event_time((edge + timedelta(seconds=1)).timestamp(), ("t",), NOW)
    assert late is None
    assert [(p.code, p.target) for p in problems] == [("OUT_OF_RANGE", "t")]
