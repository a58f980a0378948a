"""Per-user send times (`scheduling_details.delivery_type`): SEND_IN_USER_TIMEZONE and SEND_IN_BTS.

The run starts at its moment (a one-time campaign's `start_time`, a periodic occurrence); each user
is then sent at a moment of their own, and a user whose moment is later waits PENDING with
`not_before` (the same deferral as quiet hours: no second scheduler).

- SEND_IN_USER_TIMEZONE: the run's wall clock (its moment in the campaign timezone, else UTC), in
  the user's timezone (the `timezone` attribute, else the workspace's default timezone). The
  campaign begins when that wall clock first comes anywhere (UTC+14, `lifecycle.begins_at`), so
  users east of the campaign's timezone get it at their own hour too. A user whose local moment
  came before the campaign was published (`passed_before`) is sent at once with
  `send_if_user_timezone_has_passed: true`, else suppressed (`TIMEZONE_PASSED`); one whose moment
  came after that but before the tick that reached it (a worker is never quite on time) is sent
  at once, as it would have been had the tick been on time.
- SEND_IN_BTS: the first time at or after the run's moment when it is the user's best hour
  (`best_hour`: the local hour their events cluster at) in their timezone, within the window that
  ends at `window_end_time` (a date-time, or a time of day after the start; default 24 hours). A
  user with no best hour takes `if_user_bts_is_not_available`, one whose best hour falls after
  the window `if_user_bts_outside_time_window`: SEND_AT_START_TIME (also the default for any other
  value), SEND_AT_WINDOW_END, or DO_NOT_SEND / SKIP (suppressed: BTS_NOT_AVAILABLE,
  BTS_OUTSIDE_WINDOW).

Pure: the engine passes the user's zone, best hour and `now` (`controls.decide`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from herald.campaigns.lifecycle import first_local_moment
from herald.campaigns.schemas.scheduling import SchedulingDeliveryType, SchedulingDetails
from herald.delivery.engine.occurrences import local_instant
from herald.timefmt import parse_iso_datetime
from herald.timezones import zone_named

USER_TIMEZONE = SchedulingDeliveryType.SEND_IN_USER_TIMEZONE
BTS = SchedulingDeliveryType.SEND_IN_BTS
DAY = timedelta(days=1)

START = "SEND_AT_START_TIME"
WINDOW_END = "SEND_AT_WINDOW_END"
SKIPPING = frozenset({"DO_NOT_SEND", "SKIP", "SKIP_USER", "DONT_SEND"})


class Reason:
    TIMEZONE_PASSED = "TIMEZONE_PASSED"
    BTS_NOT_AVAILABLE = "BTS_NOT_AVAILABLE"
    BTS_OUTSIDE_WINDOW = "BTS_OUTSIDE_WINDOW"


@dataclass(frozen=True)
class SendTimeRule:
    mode: SchedulingDeliveryType  # USER_TIMEZONE or BTS
    start: datetime  # the run's moment (UTC)
    campaign_zone: ZoneInfo
    send_if_passed: bool = False
    window_end: datetime | None = None
    if_unavailable: str | None = None
    if_outside: str | None = None
    # SEND_IN_USER_TIMEZONE: a user whose moment is before this has passed (None: before `start`).
    passed_before: datetime | None = None

    @property
    def wall(self) -> datetime:
        """The run's wall clock (naive) in the campaign timezone."""
        return self.start.astimezone(self.campaign_zone).replace(tzinfo=None)

    @property
    def window_close(self) -> datetime:
        return self.window_end if self.window_end is not None else self.start + DAY


@dataclass(frozen=True)
class Moment:
    """When the user is sent (None: at once) or why they are not (`skipped`)."""

    at: datetime | None = None
    skipped: str | None = None


_TIME_OF_DAY = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)(:[0-5]\d)?$")


def _window_end(value: str | None, start: datetime, zone: ZoneInfo) -> datetime | None:
    if not value:
        return None
    match = _TIME_OF_DAY.fullmatch(value)
    if match:
        local = start.astimezone(zone)
        end = local_instant(local.date(), time(int(match[1]), int(match[2])), zone)
        return (
            end
            if end > start
            else local_instant(local.date() + DAY, time(int(match[1]), int(match[2])), zone)
        )
    parsed = parse_iso_datetime(value)
    if parsed is None:
        return None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)).astimezone(UTC)


def per_user(details: SchedulingDetails | None) -> bool:
    """Whether each user of the campaign's runs is sent at a moment of their own."""
    return details is not None and details.delivery_type in (USER_TIMEZONE, BTS)


def rule_of(
    details: SchedulingDetails | None, start: datetime | None, published_at: datetime | None = None
) -> SendTimeRule | None:
    """The campaign's per-user send-time rule for a run at `start`; None when every user is sent at
    the run's moment (ASAP, AT_FIXED_TIME). SEND_IN_USER_TIMEZONE: the run began as early as any
    user's moment (`lifecycle.first_local_moment`), so a user's moment has passed only when it came
    before the campaign was published (`published_at`); for a campaign published before Herald
    recorded when (None), when it came before `start`, as then."""
    if details is None or start is None or not per_user(details):
        return None
    zone = zone_named(details.timezone)
    if details.delivery_type is USER_TIMEZONE:
        passed = details.user_timezone_details
        return SendTimeRule(
            USER_TIMEZONE,
            start,
            zone,
            send_if_passed=bool(passed and passed.send_if_user_timezone_has_passed),
            passed_before=None
            if published_at is None
            else max(first_local_moment(start, zone), published_at),
        )
    bts = details.bts_details
    return SendTimeRule(
        BTS,
        start,
        zone,
        window_end=_window_end(bts.window_end_time if bts else None, start, zone),
        if_unavailable=bts.if_user_bts_is_not_available if bts else None,
        if_outside=bts.if_user_bts_outside_time_window if bts else None,
    )


def best_hour(moments: Iterable[datetime], zone: ZoneInfo) -> int | None:
    """The local hour (0-23) most of the moments fall in (the earliest such hour on a tie); None
    without moments."""
    hours = Counter(moment.astimezone(zone).hour for moment in moments)
    if not hours:
        return None
    top = max(hours.values())
    return min(hour for hour, count in hours.items() if count == top)


def _fallback(rule: SendTimeRule, choice: str | None, reason: str) -> Moment:
    name = (choice or START).strip().upper()
    if name in SKIPPING:
        return Moment(skipped=reason)
    if name == WINDOW_END:
        return Moment(at=rule.window_close)
    return Moment(at=rule.start)


def next_at_hour(after: datetime, hour: int, zone: ZoneInfo) -> datetime:
    """The first instant at or after `after` that is `hour`:00 local time in `zone`."""
    local = after.astimezone(zone)
    for days in range(3):
        candidate = local_instant(local.date() + timedelta(days=days), time(hour), zone)
        if candidate >= after:
            return candidate
    raise AssertionError("an hour of the day recurs within three days")  # pragma: no cover


def first_in_hour(after: datetime, hour: int, zone: ZoneInfo) -> datetime:
    """The first moment at or after `after` within `hour` of the day in `zone`: `after` itself when
    it falls in that hour (a run that begins at 10:30 is within a best hour of 10), else the next
    `hour`:00."""
    if after.astimezone(zone).hour == hour:
        return after
    return next_at_hour(after, hour, zone)


def moment_for(rule: SendTimeRule, user_zone: ZoneInfo, hour: int | None) -> Moment:
    """When this user is sent in this run (`hour`: their best hour, for BTS)."""
    if rule.mode is USER_TIMEZONE:
        wall = rule.wall
        local = local_instant(wall.date(), wall.time(), user_zone)
        if local < (rule.passed_before or rule.start):
            return Moment() if rule.send_if_passed else Moment(skipped=Reason.TIMEZONE_PASSED)
        return Moment(at=local)
    if hour is None:
        return _fallback(rule, rule.if_unavailable, Reason.BTS_NOT_AVAILABLE)
    at = first_in_hour(rule.start, hour, user_zone)
    if at >= rule.window_close:
        return _fallback(rule, rule.if_outside, Reason.BTS_OUTSIDE_WINDOW)
    return Moment(at=at)
