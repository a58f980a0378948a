"""Rate-limit buckets (contract §8), per-workspace overrides, and enforcement for a request."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from herald.http.ratelimit import Decision, Window, parse_windows
from herald.workspaces.credentials import WorkspaceView

# Bucket -> default windows. "Per consumer" means per API key.
BUCKETS: dict[str, str] = {
    "offers_read": "150/minute;500/hour;1000/day",
    "offers_write": "100/minute;300/hour;600/day",
    "campaign_create": "5/second;25/minute;100/hour",
    "campaign_create_success": "5/minute;25/hour;100/day",
    "campaign_ops": "10/second;100/minute;6000/hour",
    "preview": "10000/minute",
    "ingest": "10000/minute",
}

_parsed_defaults: dict[str, tuple[Window, ...]] = {
    name: parse_windows(spec) for name, spec in BUCKETS.items()
}


# Overrides are parsed on every request of their workspace: parse each distinct spec once.
_parse_override = lru_cache(maxsize=1024)(parse_windows)


def validate_limit_spec(spec: str) -> tuple[Window, ...]:
    """The windows of `spec`; ValueError (never an empty tuple) when it is not a valid limit."""
    return parse_windows(spec)


def windows_for(workspace: WorkspaceView, bucket: str) -> tuple[Window, ...]:
    override = (workspace.rate_limits or {}).get(bucket)
    return _parse_override(override) if override else _parsed_defaults[bucket]


@dataclass(frozen=True)
class Consumer:
    workspace: WorkspaceView
    key_id: str


def limit_key(bucket: str, operation: str, consumer: Consumer) -> str:
    return f"{bucket}:{operation}:{consumer.workspace.id}:{consumer.key_id}"


def headers_for(decision: Decision) -> list[tuple[bytes, bytes]]:
    """The `X-RateLimit-*` headers of `decision`, as an ASGI answer carries them."""
    return [
        (b"x-ratelimit-limit", str(decision.limit).encode()),
        (b"x-ratelimit-remaining", str(decision.remaining).encode()),
        (b"x-ratelimit-reset", str(decision.reset_at).encode()),
    ]
