"""The offers list cursor: base64 of `offers:<24-hex id of the last item>` (contract §4)."""

from __future__ import annotations

import base64
import binascii

from herald.ids import is_object_id

PREFIX = "offers:"


def encode(last_id: str) -> str:
    return base64.urlsafe_b64encode(f"{PREFIX}{last_id}".encode()).decode()


def decode(cursor: str) -> str | None:
    """The id a cursor points after, or None when the cursor is malformed in any way."""
    text = cursor.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        decoded = base64.b64decode(text, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not decoded.startswith(PREFIX):
        return None
    raw = decoded[len(PREFIX) :]
    return raw if is_object_id(raw) else None
