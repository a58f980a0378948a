"""Wire formats for timestamps (contract §3)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(value: datetime) -> str:
    """Offers: RFC 3339 UTC with `Z` (milliseconds kept when present)."""
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    return text + "Z"


def campaign_timestamp(value: datetime) -> str:
    """Campaign `created_at`/`updated_at`/`sent_time`: `YYYY-MM-DD HH:MM:SS.ffffff`, UTC, no zone."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def meta_timestamp(value: datetime) -> str:
    """Campaign meta times: `YYYY-MM-DDTHH:MM:SS`, UTC, no zone."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
