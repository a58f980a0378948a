"""Wire formats for timestamps (contract §3)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta


def _utc_wall(value: datetime) -> datetime:
    # `isoformat`, not `strftime`: strftime writes years before 1000 without their leading zeros.
    return value.astimezone(UTC).replace(tzinfo=None)


def rfc3339(value: datetime) -> str:
    """Offers: RFC 3339 UTC with `Z` (milliseconds kept when present)."""
    timespec = "milliseconds" if value.microsecond else "seconds"
    if value.tzinfo is UTC:  # what the database layer reads back: no conversion (a page has many)
        return value.isoformat(timespec=timespec)[:-6] + "Z"
    return _utc_wall(value).isoformat(timespec=timespec) + "Z"


def campaign_timestamp(value: datetime) -> str:
    """Campaign `created_at`/`updated_at`/`sent_time`: `YYYY-MM-DD HH:MM:SS.ffffff`, UTC, no zone."""
    return _utc_wall(value).isoformat(sep=" ", timespec="microseconds")


def meta_timestamp(value: datetime) -> str:
    """Campaign meta times: `YYYY-MM-DDTHH:MM:SS`, UTC, no zone."""
    return _utc_wall(value).isoformat(timespec="seconds")


# Request date-times (contract §3: ISO 8601; no zone = the component's timezone, else UTC), spelled
# as one regular expression that the API checks and the OpenAPI description states, so the two
# cannot disagree: a calendar date (month lengths and leap years included), `T` or a space, hours and
# minutes, optional seconds with up to six decimals, and an optional `Z` or `±HH:MM`. Plain ASCII
# classes, no look-arounds: the same text is a valid Python and ECMA-262 (JSON Schema) pattern.
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_LEAP_DAY = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29"
_DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_DAY})"
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\\.[0-9]{1,6})?)?"
_OFFSET = "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"

DATE_TIME_PATTERN = f"^{_DATE}[T ]{_TIME}{_OFFSET}?$"
DATE_OR_DATE_TIME_PATTERN = f"^{_DATE}(?:[T ]{_TIME}{_OFFSET}?)?$"
_DATE_TIME = re.compile(DATE_TIME_PATTERN)

_SECONDS = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
# Offers' request date-times (contract §4): `T`, seconds, up to six decimals, and `Z` only.
ZULU_DATE_TIME_PATTERN = f"^{_DATE}T{_SECONDS}(?:\\.[0-9]{{1,6}})?Z$"

# What the answers' timestamps look like (`rfc3339`, `campaign_timestamp`, `meta_timestamp`), for
# the OpenAPI document.
RFC3339_PATTERN = f"^{_DATE}T{_SECONDS}(?:\\.[0-9]{{3}})?Z$"
CAMPAIGN_TIMESTAMP_PATTERN = f"^{_DATE} {_SECONDS}\\.[0-9]{{6}}$"
META_TIMESTAMP_PATTERN = f"^{_DATE}T{_SECONDS}$"


def parse_iso_datetime(value: str) -> datetime | None:
    """A request date-time (`DATE_TIME_PATTERN`), or None when the text is not one."""
    if not _DATE_TIME.fullmatch(value):
        return None
    return datetime.fromisoformat(value)


EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def day_start(day: date) -> datetime:
    """The instant `day` begins, in UTC (a date bound names whole UTC days)."""
    return datetime.combine(day, time(), UTC)


def day_end(day: date) -> datetime | None:
    """The instant `day` ends (exclusive: the next day's start), in UTC; None for 9999-12-31, whose
    next day no date-time holds: as a bound, the last day bounds nothing. The one home of that rule
    for every date bound (offers' `created_date_lte`, campaign search's `to_date`, segmentation's
    date conditions), so they agree on the last day a date can name."""
    return None if day == date.max else day_start(day + timedelta(days=1))


def as_utc(value: datetime) -> datetime:
    """An aware date-time in UTC; one whose UTC instant falls outside the years 1-9999 (a year-1 time
    east of UTC, a 9999-12-31 time west of it) becomes the nearest instant a date-time holds."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return EARLIEST if value.year == 1 else LATEST
