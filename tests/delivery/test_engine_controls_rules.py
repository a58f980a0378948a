"""The delivery controls' pure rules: quiet hours, caps, minimum delay, global control share, and
the parsing of the workspace settings."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.delivery.engine.controls import delay_until, over_cap, quiet_until
from herald.delivery.engine.split import in_global_control
from herald.timezones import zone_named
from herald.workspaces.delivery_settings import parse_value, settings_of
from herald.workspaces.service import AdminError

NIGHT = (time(22, 0), time(8, 0))
PARIS = ZoneInfo("Europe/Paris")
moments = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
)


class TestQuietHours:
    @pytest.mark.parametrize(
        ("now", "until"),
        [
            (datetime(2026, 6, 1, 19, 59, tzinfo=UTC), None),  # Paris 21:59 (summer, UTC+2)
            (datetime(2026, 6, 1, 20, 0, tzinfo=UTC), datetime(2026, 6, 2, 6, 0, tzinfo=UTC)),
            (datetime(2026, 6, 2, 5, 59, tzinfo=UTC), datetime(2026, 6, 2, 6, 0, tzinfo=UTC)),
            (datetime(2026, 6, 2, 6, 0, tzinfo=UTC), None),  # 08:00: the window has ended
            (datetime(2026, 1, 10, 22, 30, tzinfo=UTC), datetime(2026, 1, 11, 7, 0, tzinfo=UTC)),
        ],
    )
    def test_a_window_across_midnight_in_the_users_zone(self, now: datetime, until: datetime | None) -> None:
        assert quiet_until(now, NIGHT, PARIS) == until

    def test_a_window_within_one_day(self) -> None:
        lunch = (time(12, 0), time(14, 0))
        utc = ZoneInfo("UTC")
        assert quiet_until(datetime(2026, 1, 1, 13, tzinfo=UTC), lunch, utc) == datetime(
            2026, 1, 1, 14, tzinfo=UTC
        )
        assert quiet_until(datetime(2026, 1, 1, 14, tzinfo=UTC), lunch, utc) is None
        assert quiet_until(datetime(2026, 1, 1, 11, tzinfo=UTC), lunch, utc) is None

    def test_no_window_defers_nobody(self) -> None:
        assert quiet_until(datetime(2026, 1, 1, 23, tzinfo=UTC), None, PARIS) is None

    @given(moments, st.sampled_from(["Europe/Paris", "Asia/Tokyo", "America/New_York", "UTC"]))
    def test_the_end_is_later_and_outside_the_window(self, now: datetime, name: str) -> None:
        tz = ZoneInfo(name)
        until = quiet_until(now, NIGHT, tz)
        if until is not None:
            assert now < until <= now + timedelta(hours=11)  # at most the window's length (+ a DST hour)
            assert quiet_until(until, NIGHT, tz) is None

    def test_an_unknown_zone_falls_back_to_the_default_then_utc(self) -> None:
        assert zone_named("Asia/Tokyo", "Europe/Paris") == ZoneInfo("Asia/Tokyo")
        assert zone_named("Not/AZone", "Europe/Paris") == PARIS
        assert zone_named(None, "Nope") == ZoneInfo("UTC")
        assert zone_named("../etc/passwd") == zone_named(42) == zone_named("") == ZoneInfo("UTC")


class TestCaps:
    NOW = datetime(2026, 1, 15, 12, tzinfo=UTC)

    def test_day_and_week_windows(self) -> None:
        hour_ago = [self.NOW - timedelta(hours=1)]
        assert over_cap(hour_ago, self.NOW, 1, None)
        assert not over_cap(hour_ago, self.NOW, 2, None)
        two_days = [self.NOW - timedelta(days=2), self.NOW - timedelta(days=3)]
        assert not over_cap(two_days, self.NOW, 1, None)
        assert over_cap(two_days, self.NOW, 1, 2)
        assert not over_cap([self.NOW - timedelta(days=8)], self.NOW, 1, 1)
        assert not over_cap([], self.NOW, None, None)

    def test_minimum_delay(self) -> None:
        last = self.NOW - timedelta(hours=1)
        assert delay_until(last, self.NOW, timedelta(hours=3)) == last + timedelta(hours=3)
        assert delay_until(last, self.NOW, timedelta(hours=1)) is None
        assert delay_until(None, self.NOW, timedelta(hours=3)) is None
        assert delay_until(last, self.NOW, None) is None


class TestGlobalControl:
    @pytest.mark.parametrize("percentage", [1, 5, 12.5, 50])
    def test_the_share_is_close_on_ten_thousand_users(self, percentage: float) -> None:
        held = sum(in_global_control("WSGLOBAL", f"user-{i}", percentage) for i in range(10_000))
        assert abs(held / 100 - percentage) <= 1

    @given(st.text(min_size=1, max_size=30), st.floats(min_value=0, max_value=100))
    def test_a_larger_share_keeps_every_user_already_held(self, customer_id: str, percentage: float) -> None:
        if in_global_control("WS", customer_id, percentage):
            assert in_global_control("WS", customer_id, min(100.0, percentage + 5))

    def test_none_and_all(self) -> None:
        assert not in_global_control("WS", "u", None)
        assert not in_global_control("WS", "u", 0)
        assert in_global_control("WS", "u", 100)


class TestSettings:
    def test_values_are_parsed_and_read_back(self) -> None:
        stored = {
            "global-control": parse_value("global-control", "2.5"),
            "frequency-cap-day": parse_value("frequency-cap-day", "3"),
            "dnd": parse_value("dnd", "22:00-08:00"),
            "timezone": parse_value("timezone", "Europe/Paris"),
        }
        read = settings_of(stored)
        assert (read.global_control, read.cap_day, read.cap_week) == (2.5, 3, None)
        assert read.dnd == NIGHT
        assert read.timezone == "Europe/Paris"
        assert settings_of(None).dnd is None
        assert parse_value("dnd", "off") is None

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("global-control", "-1"),
            ("global-control", "x"),
            ("frequency-cap-day", "1.5"),
            ("dnd", "08:00-08:00"),
            ("dnd", "8-9"),
            ("timezone", "Atlantis/Capital"),
            ("nope", "1"),
        ],
    )
    def test_bad_values_are_refused(self, key: str, value: str) -> None:
        with pytest.raises(AdminError):
            parse_value(key, value)
