"""Sending through a connector and recording it: the one path every message takes.

A `Dispatcher` lives for one batch of sends (one C8 request, one campaign run): it shares an HTTP
client between webhook calls and remembers connectors that failed as a whole, so later messages
through them fail at once with the same reason instead of each waiting for a timeout.

Campaign messages go through `deliver`: a transient failure is attempted again later (bounded
attempts, exponential backoff on the injected clock), and the dispatcher counts failed attempts
in a row per connector so the engine can pause an execution whose connector keeps failing.
"""

from __future__ import annotations

from datetime import timedelta
from types import TracebackType
from typing import Self

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from herald.clock import Clock
from herald.config import Settings
from herald.delivery import outbox
from herald.delivery.config import is_smtp
from herald.delivery.connectors import open_secrets
from herald.delivery.crypto import SecretKeyError
from herald.delivery.messages import Envelope, Outcome
from herald.delivery.models import Connector
from herald.delivery.smtp import send_smtp
from herald.delivery.webhook import send_webhook


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        sessions: async_sessionmaker[AsyncSession],
        request_id: str | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._sessions = sessions
        self._request_id = request_id
        self._down: dict[str, str] = {}
        # Failed attempts in a row per connector, and the last reason (reset by a success).
        self._streak: dict[str, tuple[int, str]] = {}
        # Redirects are never followed: the signature is for the URL the connector names.
        self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._client.aclose()

    async def send(self, connector: Connector, envelope: Envelope) -> Outcome:
        """Record PENDING, attempt, record the outcome. Raises only if the PENDING row cannot be
        written, in which case nothing was sent."""
        await outbox.record_pending(self._sessions, envelope, connector, self._request_id)
        outcome = await self._attempt(connector, envelope)
        await outbox.record_outcome(self._sessions, envelope, outcome, self._clock.now())
        return outcome

    async def deliver(self, connector: Connector, envelope: Envelope) -> Outcome:
        """A campaign message: attempted unless already settled; a transient failure below the
        attempt limit stays PENDING and comes back with `retry_at`, anything else is recorded."""
        now = self._clock.now()
        attempt = await outbox.begin_attempt(self._sessions, envelope, connector, now)
        if attempt.settled is not None:
            return attempt.settled
        outcome = await self._attempt(connector, envelope)
        self._count(connector, outcome)
        if outcome.sent or not outcome.transient:
            await outbox.record_outcome(self._sessions, envelope, outcome, self._clock.now())
            return outcome
        reason = outcome.reason or "The send failed."
        if attempt.number >= self._settings.delivery_max_attempts:
            final = Outcome(False, f"Gave up after {attempt.number} attempts: {reason}")
            await outbox.record_outcome(self._sessions, envelope, final, self._clock.now())
            return final
        at = now + retry_delay(self._settings, attempt.number)
        await outbox.record_retry(self._sessions, envelope, reason, at, self._clock.now())
        return Outcome(False, reason, outcome.connector_down, True, at)

    def failing(self, connector: Connector) -> str | None:
        """Why `connector` counts as failing (its error threshold reached), else None."""
        threshold = self._settings.delivery_error_threshold
        count, reason = self._streak.get(connector.id, (0, ""))
        if threshold <= 0 or count < threshold:
            return None
        return f"Connector '{connector.name}' failed {count} attempts in a row; the last: {reason}"

    def _count(self, connector: Connector, outcome: Outcome) -> None:
        if outcome.sent:
            self._streak.pop(connector.id, None)
        else:
            count, _ = self._streak.get(connector.id, (0, ""))
            self._streak[connector.id] = (count + 1, outcome.reason or "The send failed.")

    async def unsent(self, connector: Connector | None, envelope: Envelope, reason: str) -> Outcome:
        """Record a message that cannot be attempted (e.g. its recipient has no address)."""
        await outbox.record_unsent(self._sessions, envelope, connector, self._request_id, reason)
        return Outcome(False, reason)

    async def _attempt(self, connector: Connector, envelope: Envelope) -> Outcome:
        if connector.id in self._down:
            return Outcome(False, f"Not attempted: {self._down[connector.id]}", transient=True)
        try:
            secrets = open_secrets(connector, self._settings.secret_key)
        except SecretKeyError as exc:
            # Fixable by the operator (the key is rotated back in): later, not never.
            outcome = Outcome(False, str(exc), connector_down=True, transient=True)
        else:
            settings = connector.settings or {}
            time_limit = float(settings.get("timeout") or self._settings.delivery_timeout_seconds)
            if is_smtp(connector.type):
                outcome = await send_smtp(settings, secrets, envelope, time_limit)
            else:
                outcome = await send_webhook(self._client, settings, secrets, envelope, time_limit)
        if outcome.connector_down and outcome.reason:
            self._down[connector.id] = (
                f"connector '{connector.name}' failed earlier in this batch: {outcome.reason}"
            )
        return outcome


def retry_delay(settings: Settings, attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt: the base, doubled each time, capped."""
    base = settings.delivery_retry_seconds * 2 ** max(0, attempts - 1)
    return timedelta(seconds=min(base, settings.delivery_retry_max_seconds))
