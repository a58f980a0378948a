"""The long-lived pieces one running app shares: settings, database, clock, rate-limit store."""

from __future__ import annotations

from dataclasses import dataclass

from herald.clock import Clock
from herald.config import Settings
from herald.db import Database
from herald.http.ratelimit import RateLimitStore


@dataclass
class Services:
    settings: Settings
    database: Database
    clock: Clock
    limiter: RateLimitStore
