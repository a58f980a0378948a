"""The one source of time. Production uses the system clock; tests freeze and advance it."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from typing import Protocol

from herald.config import SettingsError
from herald.ids import LATEST_SECONDS


class Clock(Protocol):
    def now(self) -> datetime:
        """Current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FrozenClock:
    """A clock that only moves when told to."""

    def __init__(self, at: datetime | None = None) -> None:
        self._now = at or datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FrozenClock needs a timezone-aware datetime")

    def now(self) -> datetime:
        return self._now

    def set(self, at: datetime) -> None:
        self._now = at

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        self._now = self._now + (delta or timedelta(**kwargs))
        return self._now


# An instant recorded more than this after now was recorded on a clock since moved back (a
# sandbox's `HERALD_CLOCK_FILE`): it has not happened yet, and what counts recent instants (rate
# limits, the throttle's grants) leaves it out. Hosts sharing a count may disagree about now by
# less: their instants still count for each other.
AHEAD = timedelta(seconds=60)

# A clock file's latest time: ids hold their moment in 32 bits of seconds (to 2106), and records
# kept for a year after now must still get one.
_LATEST = LATEST_SECONDS - 2 * 366 * 86400
_EPOCH_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")


class FileClock:
    """Time read from a file holding epoch seconds: one clock shared by several server processes.

    For sandboxes and multi-process tests that need to move time (scheduled campaigns, rate-limit
    windows) without waiting. Enabled by `HERALD_CLOCK_FILE`; never used otherwise.

    The file is read when the clock is made: a missing or unreadable one stops a process at start-up
    (`SettingsError`) rather than failing every request and tick that asks the time.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._stamp: tuple[int, int, int, int] | None = None
        self._now = datetime.now(UTC)
        self.now()

    def now(self) -> datetime:
        try:
            status = os.stat(self._path)
            # Read again when the file changed: its modification time alone missed a file copied
            # over it with its own (`cp -p`, `touch -r`); the change time no writer sets.
            stamp = (status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_size)
            if stamp != self._stamp:
                with open(self._path, encoding="ascii") as handle:
                    text = handle.read().strip()
                # Digits, as `write` puts them: Python's `float` takes more (`1_767_268_800`,
                # `infinity`) than a file of epoch seconds holds.
                if _EPOCH_SECONDS.fullmatch(text) is None:
                    raise ValueError(text)
                seconds = float(text)
                if not 0 <= seconds <= _LATEST:
                    raise ValueError(text)
                self._now = datetime.fromtimestamp(seconds, UTC)
                self._stamp = stamp
        except OSError as exc:
            raise SettingsError(
                f"HERALD_CLOCK_FILE={self._path!r} cannot be read ({exc.strerror or exc}): "
                "expected a file holding epoch seconds"
            ) from exc
        except (ValueError, OverflowError) as exc:  # not a number, nan, out of range, not ASCII
            raise SettingsError(
                f"HERALD_CLOCK_FILE={self._path!r} does not hold a time: expected epoch seconds from 1970 "
                "to 2104, e.g. 1767268800"
            ) from exc
        return self._now

    @staticmethod
    def write(path: str, at: datetime) -> None:
        """Set the time every process reading `path` sees."""
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="ascii") as handle:
            handle.write(repr(at.timestamp()))
        os.replace(temporary, path)


def clock_for(clock_file: str | None) -> Clock:
    """The clock of a process configured with `clock_file` (`HERALD_CLOCK_FILE`): that file's when
    set, else the system's."""
    return FileClock(clock_file) if clock_file else SystemClock()


def utc(value: datetime) -> datetime:
    """Read a datetime as UTC; naive values (as SQLite returns them) are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
