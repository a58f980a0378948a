"""Waking the worker when work becomes due, instead of waiting for its next poll.

A transaction that makes work due (publishing a campaign, a status action, resuming a paused
delivery) calls `wake_on_commit(session)`:
- on PostgreSQL it queues `NOTIFY herald_wake` in that transaction; PostgreSQL delivers it at the
  commit (never for a rollback) to every `herald worker` listening (`listening`, on a connection
  of its own);
- on a SQLite file, the commit sends a datagram to every other process's worker listening on the
  same file (`wake_sockets`: `herald worker` processes beside `herald serve`);
- in every process, the commit sets the events registered with `waiting` here: the engine embedded
  in `herald serve` wakes without any database round trip.
The poll stays the fallback: a wake-up lost with a dropped connection costs one interval, no more.

A wake-up names the workspace whose work became due, when it knows it: the next tick takes the
workspaces named since the last one first (`named_first`), so a publish does not wait while the
tick walks every other workspace before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from herald import wake_sockets
from herald.plain_sql import postgresql_dsn

log = logging.getLogger("herald.worker")

CHANNEL = "herald_wake"
# Each waiting event with its loop: the worker embedded in `herald serve` waits on a thread and loop
# of its own, woken by commits made on the API's.
_waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
# Workspaces named by wake-ups since the last tick took them (wake-ups come from any thread), and
# since the worker's event lane last took them (`named_for_events`).
_named: set[str] = set()
_named_for_events: set[str] = set()
_named_mutex = threading.Lock()
# Wake-ups this process has received (in-process and notified) for new work: a dispatch that sees
# the count move knows other work became due meanwhile (`wakes`).
_received = 0
# Every wake-up this process has received, for new work or not (`heard`).
_heard = 0
# Marks a notification of no new work: the other workers may share a dispatch under way (an
# audience written), or a dispatch under way has a change to see (a campaign's content). It names
# the workspace, and no dispatch gives way for it. A workspace id has no space. (The word is the
# one workers have always read: a worker of the release before reads it the same way.)
_NOT_NEW = "share "


async def wake_on_commit(
    session: AsyncSession, workspace_id: str | None = None, *, new_work: bool = True
) -> None:
    """Wake the workers once the session's transaction commits; `workspace_id`: whose work it is.
    `new_work` False: no work became due, but a dispatch under way is concerned: the caller's own,
    which other workers may join, or one whose campaign's content changed (see `wakes`, `heard`)."""
    payload = ("" if new_work else _NOT_NEW) + (workspace_id or "")
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        await session.execute(
            text("SELECT pg_notify(:channel, :workspace)"), {"channel": CHANNEL, "workspace": payload}
        )
    others = wake_sockets.directory_of(str(bind.engine.url)) if bind.dialect.name == "sqlite" else None

    def committed(_session: Any) -> None:
        wake_here(workspace_id, new_work=new_work)
        if others is not None:  # SQLite: the workers of other processes on the same file
            wake_sockets.tell_others(others, payload)

    event.listen(session.sync_session, "after_commit", committed, once=True)


def wakes() -> int:
    """How many wake-ups for new work this process has received so far: a long dispatch compares it
    with what it was when its turn began, to give way to the work woken since (a dispatch's own
    wake-ups to share its work do not count, or it would give way to itself)."""
    return _received


def heard() -> int:
    """How many wake-ups of any kind this process has received so far: a dispatch whose windows
    are on the wire checks its campaign again when the count moves (`engine.halting`)."""
    return _heard


def _note(workspace_id: str | None, new_work: bool = True) -> None:
    """A wake-up received: counted (`new_work`), and its workspace named."""
    global _received, _heard
    # Plain ints: an increment lost between threads only delays a turn's end, or a check.
    _heard += 1
    if new_work:
        _received += 1
    if workspace_id:
        with _named_mutex:
            _named.add(workspace_id)
            _named_for_events.add(workspace_id)


# The moments ahead that ticks of this process found work due at and no table holds (a periodic
# campaign's next occurrence: computed from its schedule; a campaign a writer held, looked at again
# in a moment), for the worker's sleep: a heap, the earliest first. Not one earliest moment: a later
# one noted while an earlier was still ahead was lost once that one passed (an ASAP publish waited
# the whole poll). Bounded: past `_NOTED_KEPT`, the latest are let go (the poll finds their work).
_noted: list[datetime] = []
_NOTED_KEPT = 1000
_due_mutex = threading.Lock()


def due_at(moment: datetime) -> None:
    """Work falls due at `moment` (by the worker's clock): a worker of this process about to sleep
    sleeps until then at most (`next_noted`)."""
    with _due_mutex:
        heapq.heappush(_noted, moment)
        if len(_noted) > 2 * _NOTED_KEPT:
            _noted[:] = heapq.nsmallest(_NOTED_KEPT, _noted)  # sorted: a heap as it is


def next_noted(now: datetime) -> datetime | None:
    """The earliest moment noted by `due_at` that is still ahead of `now` (those passed are let go:
    the tick at them notes the next ones)."""
    with _due_mutex:
        while _noted and _noted[0] <= now:
            heapq.heappop(_noted)
        return _noted[0] if _noted else None


def named_first(workspace_ids: list[str]) -> list[str]:
    """`workspace_ids` with those named by wake-ups since the last call first (each order kept)."""
    with _named_mutex:
        named = set(_named)
        _named.clear()
    first = [workspace_id for workspace_id in workspace_ids if workspace_id in named]
    return first + [workspace_id for workspace_id in workspace_ids if workspace_id not in named]


def named_for_events() -> set[str]:
    """The workspaces named by wake-ups since the last call (the worker's event lane: its own
    record, as `named_first` empties the tick's)."""
    with _named_mutex:
        named = set(_named_for_events)
        _named_for_events.clear()
    return named


def wake_here(workspace_id: str | None = None, *, new_work: bool = True) -> None:
    """Wake the workers of this process (a tick that left work for the next one: it starts at once);
    `workspace_id`: whose work it is; `new_work`: counted by `wakes`."""
    _note(workspace_id, new_work)
    _set_waiting()


def _set_waiting() -> None:
    """Set every event registered with `waiting`, on whichever loop it waits."""
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    for loop, waiter in list(_waiting):
        if loop is here:
            waiter.set()
        else:
            with contextlib.suppress(RuntimeError):  # that loop closed meanwhile: its worker stopped
                loop.call_soon_threadsafe(waiter.set)


@contextlib.asynccontextmanager
async def waiting(wake: asyncio.Event) -> AsyncIterator[None]:
    """`wake` is set by every commit of this process that calls `wake_on_commit`, on any thread."""
    key = (asyncio.get_running_loop(), wake)
    _waiting.add(key)
    try:
        yield
    finally:
        _waiting.discard(key)


class Listener:
    """A LISTEN connection that sets `wake` on each notification; reconnected by `ensure` (called
    before each wait) when it was lost."""

    def __init__(self, database_url: str, wake: asyncio.Event) -> None:
        self._dsn = postgresql_dsn(database_url)
        self._wake = wake
        self._connection: Any = None
        self._warned = False

    async def ensure(self) -> None:
        if self._connection is not None and not self._connection.is_closed():
            return
        import asyncpg

        try:
            connection = await asyncpg.connect(self._dsn, timeout=10)
            try:
                await connection.add_listener(CHANNEL, self._notified)
            except BaseException:
                connection.terminate()  # refused or cancelled (a shutdown): never left open
                raise
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            if not self._warned:
                log.warning("cannot listen for wake-ups (polling meanwhile): %s", exc)
                self._warned = True
            return
        self._connection, self._warned = connection, False
        # A wake-up sent while no connection listened is lost: tick once to catch up.
        self._wake.set()
        log.info("listening for wake-ups on channel %s", CHANNEL)

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        _heard_from_another(payload, self._wake)

    async def close(self) -> None:
        connection = self._connection
        if connection is None or connection.is_closed():
            return
        try:
            await connection.close(timeout=5)
        except Exception:
            connection.terminate()
        except BaseException:
            connection.terminate()  # cancelled mid-close (a shutdown): closed at once instead
            raise


def _heard_from_another(payload: str, wake: asyncio.Event) -> None:
    """A wake-up another process sent (`payload`: as `wake_on_commit` sends it)."""
    _note(payload.removeprefix(_NOT_NEW), new_work=not payload.startswith(_NOT_NEW))
    # The worker's own wake, and its event lane's (`waiting`: every event of this process).
    wake.set()
    _set_waiting()


@contextlib.asynccontextmanager
async def listening(
    database_url: str, wake: asyncio.Event
) -> AsyncIterator[Listener | wake_sockets.SocketListener | None]:
    """In-process wake-ups always; from other processes too: on PostgreSQL, its notifications; on a
    SQLite file, datagrams (`wake_sockets`)."""
    async with waiting(wake):
        if make_url(database_url).get_backend_name() != "postgresql":
            directory = wake_sockets.directory_of(database_url)
            if directory is None:
                yield None
                return
            sockets = wake_sockets.SocketListener(
                directory, lambda payload: _heard_from_another(payload, wake), wake.set
            )
            try:
                yield sockets
            finally:
                await sockets.close()
            return
        listener = Listener(database_url, wake)
        try:
            yield listener
        finally:
            await listener.close()
