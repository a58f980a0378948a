"""Workspace delivery settings (CLI-managed): the global control group, frequency caps, the quiet
(DND) window and the default timezone the engine reads at each tick.

Stored as one JSON object on the workspace row (`Workspace.delivery`), written with the row locked
like feature flags and rate limits, so two concurrent `workspaces set` of different keys both land.
Parsing is pure and shared by the CLI and the engine: what the engine reads was valid when written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import time
from typing import TYPE_CHECKING, Any

from herald.timezones import is_timezone
from herald.workspaces.errors import AdminError

# The services (and SQLAlchemy) only where a setting is written: the command line's `workspaces`
# group reads `SETTINGS` for its help, and `herald workspaces list` must not import them.
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from herald.workspaces.models import Workspace

# CLI key -> what the value is, for help texts and errors.
SETTINGS: dict[str, str] = {
    "global-control": "percentage of users (0-100, decimals allowed) held out of every campaign "
    "with is_global_control_group_enabled",
    "frequency-cap-day": "at most N messages per user in any 24 hours, across capping campaigns",
    "frequency-cap-week": "at most N messages per user in any 7 days, across capping campaigns",
    "dnd": "quiet window HH:MM-HH:MM in the user's timezone, e.g. 22:00-08:00",
    "timezone": "IANA timezone for users without one (default UTC)",
    "minimum-delay": "at least N hours between two messages of event-triggered campaigns to a user "
    "(campaigns with ignore_global_minimum_delay are exempt)",
}
OFF = ("off", "none", "default")
# ASCII digits only: `\d`, `str.isdigit`, `int` and `float` also take '²' or '١٢' (some then fail).
_CLOCK = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
_WHOLE = re.compile(r"[0-9]{1,9}")
_DECIMAL = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")
# The ranges of the whole-number settings (beyond them the engine's date arithmetic overflows, and
# no workspace means them): minimum-delay in hours (a year at most), the caps in messages.
BOUNDS: dict[str, tuple[int, int]] = {
    "minimum-delay": (1, 24 * 365),
    "frequency-cap-day": (1, 1000),
    "frequency-cap-week": (1, 7000),
}
_UNITS = {"minimum-delay": "hours", "frequency-cap-day": "messages", "frequency-cap-week": "messages"}


@dataclass(frozen=True)
class DeliverySettings:
    global_control: float | None = None  # percentage
    cap_day: int | None = None
    cap_week: int | None = None
    dnd_start: time | None = None
    dnd_end: time | None = None
    timezone: str = "UTC"
    min_delay_hours: int | None = None  # between two event-triggered messages to a user

    @property
    def dnd(self) -> tuple[time, time] | None:
        if self.dnd_start is None or self.dnd_end is None:
            return None
        return self.dnd_start, self.dnd_end


def _clock(text: str) -> time:
    found = _CLOCK.fullmatch(text.strip())
    if found is None:
        raise AdminError("dnd must be a window HH:MM-HH:MM of times 00:00-23:59, e.g. 22:00-08:00 (or 'off')")
    return time(int(found.group(1)), int(found.group(2)))


def parse_value(key: str, value: str) -> Any:
    """The stored form of a CLI value (None removes the setting); AdminError when invalid.

    The errors do not repeat the value: it may hold what a terminal shows badly (controls, other
    scripts' digits)."""
    if key not in SETTINGS:
        raise AdminError(f"unknown setting {key!r}; known: {', '.join(SETTINGS)}")
    text = value.strip()
    if text.lower() in OFF:
        return None
    if key == "global-control":
        if not _DECIMAL.fullmatch(text) or not 0 <= float(text) <= 100:
            raise AdminError("global-control must be a percentage from 0 to 100, e.g. 5 or 2.5 (or 'off')")
        return float(text)
    if key in BOUNDS:
        low, high = BOUNDS[key]
        if not _WHOLE.fullmatch(text) or not low <= int(text) <= high:
            raise AdminError(f"{key} must be a whole number of {_UNITS[key]} from {low} to {high} (or 'off')")
        return int(text)
    if key == "dnd":
        start, sep, end = text.partition("-")
        if not sep:
            raise AdminError("dnd must be a window HH:MM-HH:MM, e.g. 22:00-08:00 (or 'off')")
        if _clock(start) == _clock(end):
            raise AdminError("dnd must not start and end at the same time")
        return f"{_clock(start):%H:%M}-{_clock(end):%H:%M}"
    if not is_timezone(text):
        raise AdminError("unknown timezone (use an IANA name such as Europe/Paris or UTC)")
    return text


def shown(key: str, stored: dict[str, Any] | None) -> str:
    """The value of one setting as `settings` lists it (`off`, or UTC for the timezone, when unset)."""
    value = (stored or {}).get(key)
    if value is None:
        return "UTC" if key == "timezone" else "off"
    if isinstance(value, float):
        # As it was set: a percentage of 1 is "1", not "1.0"; 99.999999 is not rounded to 100.
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def settings_of(stored: dict[str, Any] | None) -> DeliverySettings:
    """The settings a workspace's stored object describes (unset keys: off)."""
    stored = stored or {}
    dnd = stored.get("dnd")
    start = end = None
    if isinstance(dnd, str) and "-" in dnd:
        first, _, last = dnd.partition("-")
        start, end = _clock(first), _clock(last)
    return DeliverySettings(
        global_control=stored.get("global-control"),
        cap_day=stored.get("frequency-cap-day"),
        cap_week=stored.get("frequency-cap-week"),
        dnd_start=start,
        dnd_end=end,
        timezone=stored.get("timezone") or "UTC",
        min_delay_hours=stored.get("minimum-delay"),
    )


async def set_delivery_setting(session: AsyncSession, workspace_id: str, key: str, value: str) -> Workspace:
    from herald.workspaces.service import get_workspace

    parsed = parse_value(key, value)
    workspace = await get_workspace(session, workspace_id, for_update=True)
    stored = dict(workspace.delivery or {})
    if parsed is None:
        stored.pop(key, None)
    else:
        stored[key] = parsed
    workspace.delivery = stored
    await session.flush()
    return workspace


def describe(stored: dict[str, Any] | None) -> list[str]:
    """One `key<TAB>value` line per setting, `off` for those not set."""
    stored = stored or {}
    return [f"{key}\t{shown(key, stored)}" for key in SETTINGS]
