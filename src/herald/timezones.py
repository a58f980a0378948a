"""IANA timezone names: the one check of every surface that takes one (an offer's `scheduling`, a
campaign's schedule, a user's `timezone` attribute, a workspace's default timezone)."""

from __future__ import annotations

from functools import cache

# Files of the host's time zone database that `ZoneInfo` opens but that are no IANA name: the
# host's own zone (`localtime`), the rules file, and the placeholder zone.
_NOT_IANA = frozenset({"localtime", "posixrules", "Factory"})


def is_timezone(name: str) -> bool:
    """Whether `name` is a timezone name of the IANA database, as spelled there (`ZoneInfo` alone
    also opens `europe/paris` on a case-insensitive file system, `posix/UTC` and `localtime`)."""
    return name in _names()


@cache
def _names() -> frozenset[str]:
    # Imported here: zoneinfo finds its search path through sysconfig, a cost every command that
    # loads a module naming this one (`herald keys list`) would otherwise pay for nothing.
    from zoneinfo import available_timezones

    return frozenset(available_timezones()) - _NOT_IANA
