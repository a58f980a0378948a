"""IANA timezone names: the one check of every surface that takes one (an offer's `scheduling`, a
campaign's schedule, a user's `timezone` attribute, a workspace's default timezone), and the zone
a stored name stands for when Herald acts on it (`zone_named`)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

# What the OpenAPI document says of a field holding one (no enum: the names are the host's time zone
# database's, which a deployment updates with its system).
IANA_NAME_DESCRIPTION = (
    "An IANA time zone name as the time zone database spells it, e.g. `Europe/Paris` or `UTC` "
    "(not an offset, not `localtime`)."
)

# Files of the host's time zone database that `ZoneInfo` opens but that are no IANA name: the
# host's own zone (`localtime`), the rules file, and the placeholder zone.
_NOT_IANA = frozenset({"localtime", "posixrules", "Factory"})


def is_timezone(name: str) -> bool:
    """Whether `name` is a timezone name of the IANA database, as spelled there (`ZoneInfo` alone
    also opens `europe/paris` on a case-insensitive file system, `posix/UTC` and `localtime`)."""
    return name in _names()


def zone_named(name: object, default: str | None = None) -> ZoneInfo:
    """The timezone `name` names (a campaign's, a user's), else the one `default` names (the
    workspace's), else UTC."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # see `_names`

    for candidate in (name, default):
        if isinstance(candidate, str) and candidate:
            try:
                return ZoneInfo(candidate)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return ZoneInfo("UTC")


@cache
def _names() -> frozenset[str]:
    # Imported here: zoneinfo finds its search path through sysconfig, a cost every command that
    # loads a module naming this one (`herald keys list`) would otherwise pay for nothing.
    from zoneinfo import available_timezones

    return frozenset(available_timezones()) - _NOT_IANA
