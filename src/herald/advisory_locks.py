"""Keys of PostgreSQL advisory locks (`pg_advisory_xact_lock` and its kin), one rule for all.

A lock is named by the parts of what it guards (its purpose first: "idempotency", "position",
"delivery-history", ...); its key is 64 bits of a SHA-256 of them. A collision of two keys only
makes two unrelated holders wait for each other: never a wrong answer.
"""

from __future__ import annotations

import hashlib


def lock_key(*parts: str) -> int:
    """The signed 64-bit advisory lock key of `parts` (joined by NUL, which no part holds)."""
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
