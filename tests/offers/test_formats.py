"""Wire formats the offers surface reads: Zulu date-times and list cursors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from herald.offers import cursor
from herald.offers.rules.scheduling import parse_zulu, zulu


class TestScheduling:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2026-01-15T12:00:00Z", datetime(2026, 1, 15, 12, tzinfo=UTC)),
            ("2026-01-15T12:00:00.250Z", datetime(2026, 1, 15, 12, 0, 0, 250000, tzinfo=UTC)),
            ("2026-01-15T12:00:00+00:00", None),
            ("2026-01-15 12:00:00Z", None),
            ("2026-01-15", None),
            ("2026-13-01T00:00:00Z", None),
        ],
    )
    def test_only_zulu_instants_parse(self, text: str, expected: datetime | None) -> None:
        assert parse_zulu(text) == expected

    def test_zulu_round_trips(self) -> None:
        instant = datetime(2026, 1, 15, 12, 0, 0, 123456, tzinfo=UTC)
        assert parse_zulu(zulu(instant)) == instant


class TestCursors:
    def test_offer_cursor_round_trips(self) -> None:
        assert cursor.decode(cursor.encode("65f1c0ffee0123456789abcd")) == "65f1c0ffee0123456789abcd"

    @pytest.mark.parametrize(
        "value",
        [
            "",
            "!!!",
            "b2ZmZXJzOg",
            cursor.encode("xyz"),
            cursor.encode("65f1c0ffee0123456789abcd", "templates:"),
        ],
    )
    def test_malformed_offer_cursors_are_refused(self, value: str) -> None:
        assert cursor.decode(value) is None

    def test_template_cursor_round_trips(self) -> None:
        encoded = cursor.encode("banner-2", cursor.TEMPLATES_PREFIX)
        assert cursor.decode_template(encoded) == "banner-2"
        assert cursor.decode_template(cursor.encode("65f1c0ffee0123456789abcd")) is None
