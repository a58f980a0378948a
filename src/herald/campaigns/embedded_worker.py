"""The worker embedded in `herald serve` (a one-process SQLite deployment): `worker.run_forever` on a
thread and event loop of its own, with database engines of its own.

On the API's loop the worker queued behind every request's callbacks: under ingestion the loop lags
tens to hundreds of milliseconds, and each of a tick's sessions and statements waited one lag or more,
so firings piled up while events arrived. On its own loop the worker is scheduled by the interpreter's
thread switching instead, which shares the CPU between the two whatever the request queue. What the
threads share is made for it: SQLite's write gate (`herald.db.WriteGate`, one per file and process)
and the wake-up on commit (`herald.wake`, which reaches a waiter on another loop thread-safely).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import uvloop

from herald.campaigns import worker
from herald.clock import Clock
from herald.config import Settings
from herald.db import create_database

log = logging.getLogger("herald.worker")


class EmbeddedWorker:
    """Started with the app, stopped (after the batch in hand) before the app's engines close."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self._settings = settings
        self._clock = clock
        self._loop = uvloop.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._main, name="herald-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: the thread has ended already
            self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join)

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._run())
        except Exception:
            log.exception("the embedded worker stopped")
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _run(self) -> None:
        database = create_database(self._settings)
        try:
            await worker.run_forever(
                database, self._clock, self._settings.worker_interval_seconds, self._stop, self._settings
            )
        finally:
            await database.dispose()
