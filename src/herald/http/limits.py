"""Rate-limit buckets (contract §8), per-workspace overrides, and enforcement for a request."""

from __future__ import annotations

from dataclasses import dataclass

from herald.http.ratelimit import Decision, RateLimitStore, Window, parse_windows
from herald.workspaces.models import Workspace

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


def validate_limit_spec(spec: str) -> tuple[Window, ...]:
    windows = parse_windows(spec)
    if not windows:
        raise ValueError("a limit needs at least one window, e.g. 100/minute")
    return windows


def windows_for(workspace: Workspace, bucket: str) -> tuple[Window, ...]:
    override = (workspace.rate_limits or {}).get(bucket)
    return parse_windows(override) if override else _parsed_defaults[bucket]


@dataclass(frozen=True)
class Consumer:
    workspace: Workspace
    key_id: str


def limit_key(bucket: str, operation: str, consumer: Consumer) -> str:
    return f"{bucket}:{operation}:{consumer.workspace.id}:{consumer.key_id}"


async def release(store: RateLimitStore, bucket: str, operation: str, consumer: Consumer, token: str) -> None:
    windows = windows_for(consumer.workspace, bucket)
    await store.release(limit_key(bucket, operation, consumer), windows, token)


def headers_for(decision: Decision) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(decision.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(decision.reset_at),
    }
