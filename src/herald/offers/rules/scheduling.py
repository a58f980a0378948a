"""`scheduling`: ISO 8601 instants with `Z`, an IANA timezone, and a window that makes sense now."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from herald.offers.requests import Scheduling
from herald.problems import Problem
from herald.timefmt import ZULU_DATE_TIME_PATTERN
from herald.timezones import is_timezone

# Contract §4: date-times carry `Z`; offsets and zone-less values are refused rather than guessed.
# The pattern the OpenAPI document states: a calendar date and a time of day that exist.
_ZULU = re.compile(ZULU_DATE_TIME_PATTERN)
MIN_RUNTIME = timedelta(minutes=10)
# A client that means "start now" computes the instant before sending it; it arrives a little in
# the past. Starts up to this far back are taken as "now" instead of being refused.
START_GRACE = timedelta(minutes=1)

START, EXPIRY, TIMEZONE = "scheduling.start_datetime", "scheduling.expiry_datetime", "scheduling.timezone"


def parse_zulu(value: str) -> datetime | None:
    """The UTC instant of `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, or None for anything else."""
    if not _ZULU.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value).astimezone(UTC)
    except ValueError:  # e.g. February 30th
        return None


def zulu(value: datetime) -> str:
    """An instant in the form `parse_zulu` reads (microseconds kept, so nothing is lost)."""
    text = value.astimezone(UTC).isoformat(timespec="microseconds" if value.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def check_scheduling(
    scheduling: Scheduling,
    *,
    now: datetime,
    start_changed: bool,
    expiry_changed: bool,
    check_time: bool,
) -> list[Problem]:
    """Format problems for every value sent; window problems only for the ends that changed.

    `check_time` is off for imports, which carry offers that started or ended long ago.
    """
    problems: list[Problem] = []
    start = _instant(scheduling.start_datetime, START, problems)
    expiry = _instant(scheduling.expiry_datetime, EXPIRY, problems)
    if scheduling.timezone is not None and not is_timezone(scheduling.timezone):
        problems.append(
            Problem("INVALID_TIMEZONE", TIMEZONE, f"'{scheduling.timezone}' is not an IANA timezone name.")
        )
    if check_time and start_changed and start is not None and start < now - START_GRACE:
        problems.append(Problem("INVALID_SCHEDULING", START, "start_datetime must not be in the past."))
    if (start_changed or expiry_changed) and start is not None and expiry is not None and expiry <= start:
        problems.append(
            Problem("INVALID_SCHEDULING", EXPIRY, "expiry_datetime must be after start_datetime.")
        )
    elif check_time and expiry_changed and expiry is not None and expiry < now + MIN_RUNTIME:
        problems.append(
            Problem("INVALID_SCHEDULING", EXPIRY, "expiry_datetime must be at least 10 minutes from now.")
        )
    return problems


def _instant(value: str | None, target: str, problems: list[Problem]) -> datetime | None:
    if value is None:
        return None
    parsed = parse_zulu(value)
    if parsed is None:
        problems.append(
            Problem(
                "INVALID_TYPE", target, "Expected an ISO 8601 UTC date-time such as 2026-03-01T09:30:00Z."
            )
        )
    return parsed
