"""Identifiers: 24-hex object ids (time-ordered) and the public prefixes of the offers surface."""

from __future__ import annotations

import os
import re
import threading
from datetime import UTC, datetime

OBJECT_ID = re.compile(r"^[0-9a-f]{24}$")
OFFER_PREFIX = "offer_"
OFFER_ID_PATTERN = f"^{OFFER_PREFIX}[0-9a-f]{{24}}$"  # what `parse_offer_id` reads, for the documents
TAG_PREFIX = "tag_"

# The instants an id can hold: its 4 bytes of seconds count from 1970 and end early in 2106. An
# imported time outside them wrapped round (year 1 sorted among this year's ids), and PostgreSQL
# stored year 1 and 9999-12-31T23:59:59.999999 as -infinity and infinity (shown as null).
LATEST_SECONDS = 2**32 - 1
EARLIEST_INSTANT = datetime.fromtimestamp(0, UTC)
LATEST_INSTANT = datetime.fromtimestamp(LATEST_SECONDS, UTC)
INSTANT_RANGE = "from 1970-01-01T00:00:00Z to 2106-02-07T06:28:15Z"


def holds_instant(at: datetime) -> bool:
    """Whether an id can be made for `at` (an aware date-time; a naive one is read as UTC)."""
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return EARLIEST_INSTANT <= at <= LATEST_INSTANT


_counter_lock = threading.Lock()
_counter = int.from_bytes(os.urandom(3), "big")
_process_random = os.urandom(3)


def _instant(at: datetime) -> bytes:
    """6 bytes: the seconds, then the fraction of the second in 16-microsecond steps (0-62499)."""
    seconds = int(at.timestamp())
    steps = at.microsecond // 16
    return (seconds & 0xFFFFFFFF).to_bytes(4, "big") + steps.to_bytes(2, "big")


def object_id(at: datetime) -> str:
    """A 24-hex id: 4 bytes of seconds, 2 of the fraction of the second, 3 random bytes per
    process, a 3-byte counter (the layout of an ObjectId, whose 5 random bytes lend two to time).

    Ids sort by creation instant, so `ORDER BY id DESC` means newest first, across processes too:
    with the second alone, two workers' ids of one second sorted by their processes' random bytes,
    and a list read newest first was not (contract §4's order is "newest first (id descending)").
    """
    global _counter
    with _counter_lock:
        _counter = (_counter + 1) % 0xFFFFFF
        count = _counter
    return (_instant(at) + _process_random + count.to_bytes(3, "big")).hex()


def object_ids(at: datetime, count: int) -> list[str]:
    """`count` ids for one instant, as `object_id` makes them one by one (for bulk loads)."""
    global _counter
    with _counter_lock:
        start = _counter
        _counter = (_counter + count) % 0xFFFFFF
    prefix = (_instant(at) + _process_random).hex()
    return [f"{prefix}{(start + offset) % 0xFFFFFF:06x}" for offset in range(1, count + 1)]


def is_object_id(value: str) -> bool:
    return bool(OBJECT_ID.fullmatch(value))


def offer_public_id(raw: str) -> str:
    return OFFER_PREFIX + raw


def parse_offer_id(public: str) -> str | None:
    """The raw id of `offer_<24 hex>`, or None when the value is not of that form."""
    if not public.startswith(OFFER_PREFIX):
        return None
    raw = public[len(OFFER_PREFIX) :]
    return raw if is_object_id(raw) else None


def tag_public_id(raw: str) -> str:
    return TAG_PREFIX + raw


def parse_tag_id(value: str) -> str:
    """Requests may name a tag as `tag_<id>` or as the raw `<id>`."""
    return value[len(TAG_PREFIX) :] if value.startswith(TAG_PREFIX) else value


def uuid4_text() -> str:
    """A random UUID v4 in its canonical text form, as `str(uuid.uuid4())` gives it (without building
    a `UUID` object: one is made for every request, its id)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
