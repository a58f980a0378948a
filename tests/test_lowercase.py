"""Lower-casing one character for one, as PostgreSQL does (`herald.lowercase`)."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st

from herald.lowercase import CASED_END, lower, same_when_lowered


def test_the_dotted_capital_i_lowers_to_a_plain_i() -> None:
    assert lower("İSTANBUL") == "istanbul"
    assert "İ".lower() == "i\u0307"  # Python's own, which SQLite's lower() followed


def test_characters_sharing_a_lower_case_form_are_found_together() -> None:
    assert same_when_lowered("i") == same_when_lowered("İ") == "Iiİ"
    assert same_when_lowered("k") == "Kk\u212a"  # the Kelvin sign
    assert same_when_lowered("ß") == "ßẞ"
    assert same_when_lowered("7") == "7"


def test_no_character_past_the_bound_has_another_case() -> None:
    beyond = (chr(point) for point in range(CASED_END, sys.maxunicode + 1))
    assert [char for char in beyond if char.lower() != char or char.upper() != char] == []


@given(st.text())
def test_each_character_lowers_to_one(text: str) -> None:
    lowered = lower(text)
    assert len(lowered) == len(text)
    assert all(char in same_when_lowered(lowered[index]) for index, char in enumerate(text))
