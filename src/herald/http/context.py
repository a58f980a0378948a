"""Per-request state shared by the middleware, dependencies and services.

The middleware creates a `UnitOfWork` for each request and finishes it after the handler has produced
its response but before a byte is sent: commit on success, roll back otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.db import Database
from herald.direct_reads import DirectReads

if TYPE_CHECKING:
    from herald.http.idempotency import Claim
    from herald.http.ratelimit import Decision

Callback = Callable[[], Awaitable[None]]


@dataclass
class UnitOfWork:
    database: Database
    for_write: bool
    _session: AsyncSession | None = None
    # Undo steps outside the database (e.g. giving back a reserved quota slot) run when the request fails.
    on_failure: list[Callback] = field(default_factory=list)
    idempotency: Claim | None = None
    # A claim the guard left to the handler's first read (`Operation.claim_with_read`), until it runs.
    pending_claim: Claim | None = None
    # The handler wrote the claim's record with its own last statement (`operation.recorded_with`):
    # the commit writes none.
    recorded: bool = False
    rate_limit: Decision | None = None
    # The success quota's slot this request holds (a create that counts only if it succeeds): a
    # success's X-RateLimit headers describe that window when it is nearer exhaustion.
    quota: Decision | None = None
    # A read whose statements need no common snapshot (see `Operation.single_statement`).
    single_statement: bool = False

    def direct_reads(self) -> DirectReads:
        """The statements of a single-statement read, run on the driver outside any session and
        transaction (no ORM bookkeeping, no BEGIN or COMMIT; `herald.direct_reads`)."""
        if not self.single_statement or self.for_write:
            raise RuntimeError("direct reads serve single-statement reads only")
        return self.database.direct

    def session(self) -> AsyncSession:
        if self._session is None:
            if self.for_write:
                factory = self.database.writer
            elif self.single_statement:
                factory = self.database.single_statement_reader
            else:
                factory = self.database.reader
            self._session = factory()
        return self._session

    @property
    def has_session(self) -> bool:
        return self._session is not None

    async def commit(self) -> None:
        if self._session is not None:
            await self._session.commit()

    async def rollback(self) -> None:
        if self._session is not None:
            await self._session.rollback()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def run_failure_callbacks(self) -> None:
        callbacks, self.on_failure = self.on_failure, []
        for callback in reversed(callbacks):
            await callback()


def request_state(scope_or_state: Any) -> dict[str, Any]:
    state: dict[str, Any] = scope_or_state.setdefault("state", {})
    return state
