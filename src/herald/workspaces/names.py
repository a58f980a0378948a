"""The rules of the names and ids an administrator gives (workspaces, keys, tags, templates,
segments): one check each, shared by the services and the command line.

A name is printable text: not blank, without control characters (`attributes.is_printable_name`,
the rule of attribute names) nor the characters that `str.splitlines` reads as line breaks, nor
invisible formatting characters that change how the rest reads (a right-to-left override showed
"admin\u202etxt.exe" as "admintxe.txt"; a zero-width space made two names look alike), and no
longer than its column (SQLite does not enforce a `String(N)`, PostgreSQL does). Listings print
names in tab-separated lines, so a tab or a newline in one would break them.

An id travels in headers and URLs (`SVC-APPKEY: <workspace id>`, `tag_<id>`), so it is ASCII
letters, digits, `_` and `-` only.
"""

from __future__ import annotations

import re
import unicodedata

from herald.workspaces.errors import AdminError

# The Unicode line and paragraph separators (`is_printable_name` refuses the control characters).
_BREAKS = re.compile("[\u2028\u2029]")
_ID = re.compile(r"[A-Za-z0-9_-]+")
# The formatting characters (Unicode category Cf) a name may hold: the joiners that words of some
# scripts and emoji sequences (a family, a flag of the tag characters) are written with.
_JOINERS = frozenset("\u200c\u200d")
_EMOJI_TAGS = range(0xE0020, 0xE0080)


def _invisible(char: str) -> bool:
    return unicodedata.category(char) == "Cf" and char not in _JOINERS and ord(char) not in _EMOJI_TAGS


def is_printable(name: str, max_length: int) -> bool:
    # Imported here: the attribute rules load the audience models, which the light commands
    # (`herald keys list`) do without.
    from herald.audience.attributes import is_printable_name

    return (
        0 < len(name) <= max_length
        and is_printable_name(name)
        and not _BREAKS.search(name)
        and not any(map(_invisible, name))
    )


def check_name(what: str, name: str, max_length: int) -> str:
    """`name` when it is printable text of 1 to `max_length` characters; AdminError otherwise."""
    if not is_printable(name, max_length):
        raise AdminError(
            f"{what} must be printable text of 1-{max_length} characters (no tabs, newlines, control "
            "characters or invisible formatting ones)"
        )
    return name


def check_id(what: str, value: str, max_length: int) -> str:
    """`value` when it is 1 to `max_length` ASCII letters, digits, '_' or '-'; AdminError otherwise."""
    if len(value) > max_length or not _ID.fullmatch(value):
        raise AdminError(f"{what} must be 1-{max_length} ASCII letters, digits, '_' or '-'")
    return value
