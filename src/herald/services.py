"""The long-lived pieces one running app shares: settings, database, clock, rate-limit store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from herald.clock import Clock, SystemClock
from herald.config import Settings
from herald.db import Database
from herald.http.ratelimit import RateLimitStore
from herald.workspaces.credentials import CredentialsCache

if TYPE_CHECKING:
    from herald.delivery.dispatch import Lanes


@dataclass
class Services:
    settings: Settings
    database: Database
    clock: Clock
    limiter: RateLimitStore
    credentials: CredentialsCache = field(default_factory=lambda: CredentialsCache(ttl=0))
    # How long an idempotency key stays claimed by its request in flight (`idempotency.LEASE`) is
    # real time, whatever `clock` says: it bounds how long a process that died holds the key, and a
    # sandbox's clock moved forward a minute let a repeat through while the first was still sending.
    lease_clock: Clock = field(default_factory=SystemClock)
    # Kept-alive HTTP clients every test send (C8) of the process shares (closed with the app).
    test_lanes: Lanes | None = None

    async def aclose(self) -> None:
        """Close what the app opened for its life: the test sends' clients, then the database's pools."""
        if self.test_lanes is not None:
            await self.test_lanes.aclose()
        await self.database.dispose()
