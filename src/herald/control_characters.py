"""Control characters: what no name, identifier, action or query parameter Herald reads may hold.

C0 (U+0000-U+001F), DEL and C1 (U+0080-U+009F). C1 holds the terminal's single-character escapes
(U+009B starts an escape sequence, as ESC [ does) and NEL (U+0085, a line break to `splitlines`):
a name holding one could forge log lines or recolour a terminal printing command output.
"""

from __future__ import annotations

import re

# Inside a character class, in the syntax both Python's and ECMAScript's patterns read (the OpenAPI
# document's patterns are ECMAScript).
CLASS = r"\x00-\x1f\x7f-\x9f"
CONTROL = re.compile(f"[{CLASS}]")
# The whitespace that is no control character, in the same syntax: with CLASS, exactly what
# Python's `\s` and `str.strip()` take for whitespace (ECMAScript's `\s` differs: U+FEFF is one).
SPACES = r" \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def has_control_character(text: str) -> bool:
    return CONTROL.search(text) is not None
