"""The long-lived pieces one running app shares: settings, database, clock, rate-limit store."""

from __future__ import annotations

from dataclasses import dataclass, field

from herald.clock import Clock
from herald.config import Settings
from herald.db import Database
from herald.http.ratelimit import RateLimitStore
from herald.workspaces.credentials import CredentialsCache


@dataclass
class Services:
    settings: Settings
    database: Database
    clock: Clock
    limiter: RateLimitStore
    credentials: CredentialsCache = field(default_factory=lambda: CredentialsCache(ttl=0))
