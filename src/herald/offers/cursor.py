"""List cursors: base64 of `<kind>:<key of the last item>`.

O1 (contract §4): `offers:<24-hex id of the last item>`. O4 pages templates the same way with
`templates:<template id>`.
"""

from __future__ import annotations

import base64
import binascii

from herald.ids import is_object_id

PREFIX = "offers:"
TEMPLATES_PREFIX = "templates:"
MAX_TEMPLATE_ID = 64  # the column's width


def encode(last_id: str, prefix: str = PREFIX) -> str:
    return base64.urlsafe_b64encode(f"{prefix}{last_id}".encode()).decode()


def _payload(cursor: str, prefix: str) -> str | None:
    text = cursor.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return decoded[len(prefix) :] if decoded.startswith(prefix) else None


def decode(cursor: str) -> str | None:
    """The offer id a cursor points after, or None when the cursor is malformed in any way."""
    raw = _payload(cursor, PREFIX)
    return raw if raw is not None and raw.isascii() and is_object_id(raw) else None


def decode_template(cursor: str) -> str | None:
    """The template id an O4 cursor points after, or None when malformed."""
    key = _payload(cursor, TEMPLATES_PREFIX)
    return key if key and len(key) <= MAX_TEMPLATE_ID and key.isprintable() else None
