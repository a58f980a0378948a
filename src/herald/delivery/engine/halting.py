"""Halting the windows on the wire: after a STOP, a PAUSE, the campaign's expiry or a change of its
content, no request of a window already begun goes out.

A window's outbox rows are written before its requests go out, under a check that the campaign
still sends as planned (`run._Flight`). With two windows and one ahead on the wire, each of several
requests per lane, a window begun before a STOP could go on handing messages to a slow receiver for
seconds after the STOP's answer, and messages rendered before a content change went out with the
old content. So each request of a window asks its `Watch` first (`Dispatcher.send_window`'s `halt`):
the watch reads the campaign again, in a task of its own, when a wake-up came since its last read (a
STOP wakes every worker; so does a change of a sending campaign's content) and at least every
`EVERY` seconds (a wake-up lost, the expiry reached). A request it halts is not made: its messages
are due again at once (sent with the new content by the next batch; unsent when the campaign
stopped), and used no attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from sqlalchemy import select, text, update
from sqlalchemy.exc import SQLAlchemyError

from herald.db import Database
from herald.db_errors import database_unavailable
from herald.delivery.engine.content import Version
from herald.delivery.engine.models import Execution
from herald.delivery.models import WAITING_RETRY, OutboxEntry
from herald.delivery.outbox import OutboxStatus
from herald.wake import heard

log = logging.getLogger("herald.worker")

# Seconds between two reads of the campaign while windows are on the wire, without a wake-up: the
# bound on a halt that no wake-up announced. A read is one indexed row.
EVERY = 0.25

# Why: a STOP, a PAUSE, the expiry, or the execution paused (its connector failing) look alike to
# the watch (the campaign no longer sending as planned): the reason names them all.
STOPPED = "sending was stopped or paused before the message's turn"
CHANGED = "the campaign's content changed before the message's turn"


class Watch:
    """The campaign of one dispatch, read again while its windows are on the wire."""

    def __init__(self, read: Callable[[], Awaitable[tuple[bool, Version | None]]]) -> None:
        """`read`: whether the campaign still sends, and the version of its content."""
        self._read = read
        self._heard = heard()
        self._at = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._sending = True
        self._version: Version | None = None

    def halt(self, planned: Version | None) -> Callable[[], Awaitable[str | None]]:
        """The `halt` of a window rendered from content `planned`: why its next request may not go
        out (None: it may). When a read is due, the request waits for it: after a STOP's answer
        (whose commit this process heard of first), none goes out unchecked."""

        async def why() -> str | None:
            while self._sending:
                if self._task is None:
                    count, now = heard(), time.monotonic()
                    if count == self._heard and now - self._at < EVERY:
                        break
                    self._heard, self._at = count, now
                    self._task = asyncio.create_task(self._run())
                # Shared by every request waiting on it: one cancelled does not end it. A wake-up
                # heard while it read: read again.
                await asyncio.shield(self._task)
            if not self._sending:
                return STOPPED
            if self._version is not None and planned is not None and self._version != planned:
                return CHANGED
            return None

        return why

    @property
    def stopped(self) -> bool:
        """The campaign was read as no longer sending: the requests halted since left unsent."""
        return not self._sending

    async def _run(self) -> None:
        try:
            self._sending, self._version = await self._read()
        except Exception as exc:
            # The windows' own checks still hold (each window's rows are written under one): the
            # next read is due in `EVERY`. Raised, the error (a connection refused while the
            # database restarts: not SQLAlchemy's) ended the window with its answers unrecorded,
            # its users held until their lease passed and their messages sent again.
            if not (isinstance(exc, SQLAlchemyError) or database_unavailable(exc)):
                raise
            log.warning("could not read the campaign of a dispatch again", exc_info=True)
        finally:
            self._task = None

    async def close(self) -> None:
        """The read under way, if any, ended (the dispatch is over)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def settle_halted(database: Database, execution: Execution, ids: list[str], now: datetime) -> None:
    """The rows of messages a dispatch halted because its campaign stopped sending (`Watch`), left
    waiting for an attempt: FAILED now if the execution has ended (STOPPED) meanwhile, as
    `abandoned.settle_stopped` would have done had their users not been CLAIMED when it ran (their
    window was on the wire then). If it has not ended, the tick that ends it settles them. The
    execution's row is read share-locked: a tick ending it at this moment either came first, and
    is seen, or waits and then finds the users no longer CLAIMED."""
    if not ids:
        return
    async with database.writer() as session:
        status = await session.scalar(
            select(Execution.status)
            .where(Execution.workspace_id == execution.workspace_id, Execution.id == execution.id)
            .with_for_update(read=True)
        )
        if status == "STOPPED":
            await session.execute(
                update(OutboxEntry)
                .where(
                    OutboxEntry.workspace_id == execution.workspace_id,
                    OutboxEntry.id.in_(ids),
                    text(WAITING_RETRY),
                )
                .values(status=OutboxStatus.FAILED.value, next_attempt_at=None, updated_at=now)
                .execution_options(synchronize_session=False)
            )
        await session.commit()
