"""Pure rules for user and event attributes: names, value types, and the stored (normalised) form.

Standard attributes (see `models.STANDARD_ATTRIBUTES`) go to columns of their own, with typed rules;
every other key is a custom attribute whose value is a string, a number, a boolean, a date-time or an
array of those. Date-times (ISO 8601 strings with a time of day) are stored as UTC text
`YYYY-MM-DDTHH:MM:SSZ`, so that comparing the stored text compares the instants on every engine.
`null` unsets an attribute (a custom key is removed; a standard column is cleared).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import MAXYEAR, UTC, datetime
from functools import lru_cache
from typing import Any

from herald.audience.models import PLATFORM_BITS, STANDARD_ATTRIBUTES
from herald.control_characters import CONTROL
from herald.email_address import is_recipient_address
from herald.json_numbers import INT64
from herald.problems import Problem, join_path
from herald.timefmt import meta_timestamp
from herald.timezones import is_timezone

MAX_NAME_LENGTH = 128
MAX_ATTRIBUTES = 500
MAX_STRING_LENGTH = 10_000
MAX_ARRAY_ITEMS = 1_000

# Reserved: the user's identifier is the record's key, not an attribute.
RESERVED_NAMES = frozenset({"customer_id"})

_DATETIME_SHAPE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|z|[+-]\d{2}(?::?\d{2})?)?$"
)
_MOBILE = re.compile(r"^\+?[0-9][0-9 ().-]*$")

# Standard string attributes and their longest allowed value (the column sizes).
STRING_COLUMNS: dict[str, int] = {
    "email": 320,
    "mobile": 32,
    "first_name": 200,
    "last_name": 200,
    "gaid": 64,
    "push_id": 500,
    "timezone": 64,
}
FLAG_COLUMNS = ("email_opt_out", "push_opt_out", "sms_opt_out")

_STANDARD = frozenset(STANDARD_ATTRIBUTES)

# The custom attribute naming the platform of the user's `push_id`: one a token can be stored for
# (any case; stored as sent, read upper-cased). Another value was stored, and its `push_id` then
# sent as the campaign's first platform (an Android message to a BlackBerry token).
PLATFORM = "platform"
_PLATFORM_MESSAGE = f"'{PLATFORM}' must be one of {', '.join(PLATFORM_BITS)} (or null)."
assert frozenset(STRING_COLUMNS) | frozenset(FLAG_COLUMNS) == _STANDARD

Path = tuple[str | int, ...]

# PostgreSQL's text and JSONB cannot hold U+0000 (a JSON string may spell it `\u0000`): no stored
# string may, on either engine (the HTTP layer refuses it in any body; an import line meets it here).
NUL = "\x00"
NUL_MESSAGE = "Strings must not contain NUL characters."


@dataclass
class Normalised:
    """A customer's attributes split into column values and a custom-attribute patch."""

    columns: dict[str, Any] = field(default_factory=dict)  # only the standard attributes sent
    patch: dict[str, Any] = field(default_factory=dict)  # custom attributes; None = remove the key


def utc_text(value: datetime) -> str:
    """The stored form of a date-time: UTC, whole seconds, `Z`, four-digit years (`strftime` wrote
    year 999 as `999-…`, which no datetime filter then read as a date-time)."""
    return f"{meta_timestamp(value)}Z"


OUTSIDE_THE_CALENDAR = "A date-time must fall between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z."


def parse_datetime_text(value: str) -> datetime | None:
    """An ISO 8601 date-time as an aware UTC datetime (no zone = UTC), or None if it is not one
    (`beyond_the_calendar`: or its instant is before year 1 or after 9999 in UTC)."""
    parsed = _local_datetime(value)
    if parsed is None:
        return None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return None


def beyond_the_calendar(value: str) -> str | None:
    """For a date-time whose instant falls outside years 1 to 9999 once its offset is applied
    (`0001-01-01T00:00:00+14:00`: a date-time, out of range, not text of another kind), the end
    it passes: "start" or "end"; None for anything else."""
    local = _local_datetime(value)
    if local is None or parse_datetime_text(value) is not None:
        return None
    return "end" if local.year == MAXYEAR else "start"


def _local_datetime(value: str) -> datetime | None:
    if not _DATETIME_SHAPE.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace(",", ".").replace("z", "Z"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def check_name(name: str, path: Path) -> Problem | None:
    # Paths are joined only when there is a problem: this runs for every attribute of every import line.
    if not name.strip():
        return Problem("INVALID_TYPE", join_path(*path), "Attribute names must not be empty.")
    if len(name) > MAX_NAME_LENGTH:
        return Problem(
            "OUT_OF_RANGE", join_path(*path), f"Attribute names are at most {MAX_NAME_LENGTH} characters."
        )
    if CONTROL.search(name):
        return Problem(
            "INVALID_TYPE", join_path(*path), "Attribute names must not contain control characters."
        )
    if name in RESERVED_NAMES:
        return Problem(
            "INVALID_TYPE", join_path(*path), f"'{name}' is the user's identifier, not an attribute."
        )
    return None


def _scalar(value: Any, path: Path) -> tuple[Any, Problem | None]:
    # Exact type checks (bool is an int subclass) and lazily joined paths: this is the import's hot loop.
    kind = type(value)
    if kind is str:
        if len(value) > MAX_STRING_LENGTH:
            return None, Problem(
                "OUT_OF_RANGE", join_path(*path), f"Text values are at most {MAX_STRING_LENGTH} characters."
            )
        if NUL in value:
            return None, Problem("INVALID_TYPE", join_path(*path), NUL_MESSAGE)
        if _DATETIME_SHAPE.match(value):
            parsed = parse_datetime_text(value)
            if parsed is None and beyond_the_calendar(value):
                return None, Problem("OUT_OF_RANGE", join_path(*path), OUTSIDE_THE_CALENDAR)
            if parsed is None:
                return None, Problem(
                    "INVALID_TYPE", join_path(*path), f"'{value}' is not a valid ISO 8601 date-time."
                )
            return utc_text(parsed), None
        return value, None
    if kind is bool or kind is float:
        return value, None
    if kind is int:
        if value not in INT64:
            return None, Problem("OUT_OF_RANGE", join_path(*path), "Whole numbers must fit in 64 bits.")
        return value, None
    return None, Problem(
        "INVALID_TYPE", join_path(*path), "Expected a string, number, boolean or ISO 8601 date-time."
    )


def normalise_value(value: Any, path: Path) -> tuple[Any, list[Problem]]:
    """The stored form of one custom attribute value (None stays None: it unsets the attribute)."""
    if value is None:
        return None, []
    if type(value) is list:
        if len(value) > MAX_ARRAY_ITEMS:
            return None, [
                Problem("OUT_OF_RANGE", join_path(*path), f"Arrays hold at most {MAX_ARRAY_ITEMS} items.")
            ]
        items: list[Any] = []
        problems: list[Problem] = []
        for index, item in enumerate(value):
            if item is None or isinstance(item, list | dict):
                problems.append(
                    Problem(
                        "INVALID_TYPE",
                        join_path(*path, index),
                        "Array items must be strings, numbers, booleans or date-times.",
                    )
                )
                continue
            stored, problem = _scalar(item, (*path, index))
            if problem is not None:
                problems.append(problem)
            items.append(stored)
        return items, problems
    stored, problem = _scalar(value, path)
    return stored, [problem] if problem else []


def is_printable_name(name: str) -> bool:
    """Not blank and without control characters: what attribute names and event action names share
    (their lengths are bounded by each)."""
    return not name.isspace() and not CONTROL.search(name)


@lru_cache(maxsize=4096)  # the same few names come back on every line of an import
def _plain_name(name: str) -> bool:
    """True for a name that passes every rule of `check_name` (checked without building problems)."""
    return 0 < len(name) <= MAX_NAME_LENGTH and is_printable_name(name) and name not in RESERVED_NAMES


def _plain_value(value: Any) -> bool:
    """True for a value stored as sent: the common case, checked without building problems."""
    kind = type(value)
    if kind is str:
        return len(value) <= MAX_STRING_LENGTH and NUL not in value and not _DATETIME_SHAPE.match(value)
    return value is None or kind is bool or kind is float or (kind is int and value in INT64)


def _custom(name: str, value: Any, path: Path, stored: dict[str, Any], problems: list[Problem]) -> None:
    if not _plain_name(name):
        problem = check_name(name, (*path, name))
        if problem is not None:
            problems.append(problem)
            return
    if _plain_value(value):
        stored[name] = value
        return
    stored[name], found = normalise_value(value, (*path, name))
    problems += found


def normalise_attributes(attributes: dict[str, Any], path: Path) -> tuple[dict[str, Any], list[Problem]]:
    """Names checked and values normalised, for custom attributes of users and events alike."""
    if len(attributes) > MAX_ATTRIBUTES:
        return {}, [_too_many(path)]
    stored: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in attributes.items():
        _custom(name, value, path, stored, problems)
    return stored, problems


def _too_many(path: Path) -> Problem:
    return Problem(
        "OUT_OF_RANGE", join_path(*path), f"At most {MAX_ATTRIBUTES} attributes may be sent at once."
    )


def _standard(name: str, value: Any, path: Path) -> tuple[Any, Problem | None]:
    if _is_valid_standard(name, value):
        return (False if value is None and name in FLAG_COLUMNS else value), None
    target = join_path(*path)
    if name in FLAG_COLUMNS:
        if value is None:
            return False, None  # unset = not opted out (the column's default)
        if not isinstance(value, bool):
            return None, Problem("INVALID_TYPE", target, f"'{name}' must be true or false.")
        return value, None
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, Problem("INVALID_TYPE", target, f"'{name}' must be a string.")
    limit = STRING_COLUMNS[name]
    if len(value) > limit:
        return None, Problem("OUT_OF_RANGE", target, f"'{name}' is at most {limit} characters.")
    if name == "email" and not is_recipient_address(value):
        return None, Problem("INVALID_TYPE", target, f"'{value}' is not an e-mail address.")
    if name == "mobile" and not _MOBILE.fullmatch(value):
        return None, Problem(
            "INVALID_TYPE", target, "'mobile' must be a phone number: digits, optionally a leading '+'."
        )
    if name == "timezone" and not is_timezone(value):
        return None, Problem("INVALID_ENUM_VALUE", target, f"'{value}' is not an IANA timezone name.")
    if name != "timezone" and CONTROL.search(value):
        return None, Problem("INVALID_TYPE", target, f"'{name}' must not contain control characters.")
    return value, None


def _is_valid_standard(name: str, value: Any) -> bool:
    """The common case, checked without building messages."""
    if value is None:
        return True
    if name in FLAG_COLUMNS:
        return type(value) is bool
    if type(value) is not str or len(value) > STRING_COLUMNS[name]:
        return False
    if name == "email":
        return is_recipient_address(value)
    if name == "mobile":
        return bool(_MOBILE.fullmatch(value))
    if name == "timezone":
        return is_timezone(value)
    return not CONTROL.search(value)


def _is_platform(value: Any) -> bool:
    # ASCII only: the database upper-cases it by its own rules, which differ from Python's beyond ASCII.
    return value is None or (type(value) is str and value.isascii() and value.upper() in PLATFORM_BITS)


def normalise_customer_attributes(attributes: dict[str, Any], path: Path) -> tuple[Normalised, list[Problem]]:
    """Split a customer's `attributes` into standard column values and a custom-attribute patch."""
    if len(attributes) > MAX_ATTRIBUTES:
        return Normalised(), [_too_many(path)]
    result = Normalised()
    problems: list[Problem] = []
    for name, value in attributes.items():
        if name not in _STANDARD:
            if name == PLATFORM and not _is_platform(value):
                problems.append(Problem("INVALID_ENUM_VALUE", join_path(*path, name), _PLATFORM_MESSAGE))
                continue
            _custom(name, value, path, result.patch, problems)
            continue
        stored, problem = _standard(name, value, (*path, name))
        if problem is not None:
            problems.append(problem)
        else:
            result.columns[name] = stored
    return result, problems
