"""Lower-casing as PostgreSQL's `lower()` does it, for what Herald lower-cases in Python, and the
characters a case-insensitive test treats as one.

PostgreSQL maps each character to one (Unicode's simple case mapping); Python's `str.lower` uses
the full mapping, which differs for one character only: 'İ' (U+0130) becomes 'i' followed by a
combining dot above instead of 'i'. A case-insensitive filter on "İstanbul" then chose other users
on SQLite (whose `lower()` is this function, `herald.sqlite_inline`) than on PostgreSQL.
"""

from __future__ import annotations

import functools

_DOTTED_CAPITAL_I = "\u0130"
# Past this code point no character has another case (the last cased script, Adlam, ends before).
CASED_END = 0x20000


def lower(text: str) -> str:
    """`text` lower-cased one character for one, as PostgreSQL's `lower()`."""
    if _DOTTED_CAPITAL_I in text:
        text = text.replace(_DOTTED_CAPITAL_I, "i")
    return text.lower()


def same_when_lowered(char: str) -> str:
    """Every character whose `lower` is `char`'s, `char` among them, in code point order: 'i' and
    'I' and 'İ' alike give "Iiİ", 'k' gives "KkK" (the Kelvin sign). So a test of each character
    against this set means what `lower(text)` compared with `lower(needle)` means."""
    return _lowered_alike().get(lower(char), char)


@functools.cache
def _lowered_alike() -> dict[str, str]:
    """Each lower-case form with every character that has it (only those shared by several)."""
    found: dict[str, list[str]] = {}
    for point in range(CASED_END):
        char = chr(point)
        found.setdefault(lower(char), []).append(char)
    return {key: "".join(chars) for key, chars in found.items() if len(chars) > 1}
