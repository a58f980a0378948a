"""One check of IANA timezone names for every surface (`herald.timezones`)."""

from __future__ import annotations

import pytest

from herald.timezones import is_timezone


@pytest.mark.parametrize("name", ["UTC", "Europe/Paris", "Asia/Kolkata", "America/Argentina/Buenos_Aires"])
def test_names_of_the_iana_database_are_timezones(name: str) -> None:
    assert is_timezone(name)


@pytest.mark.parametrize(
    "name",
    [
        "localtime",  # the host's own zone: a file ZoneInfo opens, no IANA name
        "posixrules",
        "Factory",
        "posix/UTC",
        "right/UTC",
        "europe/paris",
        "zone.tab",
        "../etc/passwd",
        "/usr/share/zoneinfo/UTC",
        "",
        "Europe/Paris\x00",
    ],
)
def test_host_files_and_misspellings_are_not(name: str) -> None:
    assert not is_timezone(name)
