"""SQLite's one writer across the processes of one file: an exclusive `flock` beside it.

SQLite answers a writer that finds the write lock taken with BUSY, and the writer polls: Herald's
`sqlite_inline.retry_busy` slept 1 ms, then 2, 4 ... up to 50 ms before asking again. Within a
process, writers queue on `db.WriteGate` instead; across processes (`herald serve` and `herald
worker` processes on one file) they still polled, so a second engine process mostly slept while the
first took the lock again and again (benchmarks/README.md, the thirty-third pass: two engine
processes on SQLite sent no more than one).

`ProcessLock` is taken by a writer after its process's own queue and let go after its commit or
rollback. The kernel wakes a process waiting for it as soon as the holder lets go (or dies: a lock
of a killed process goes with its descriptors), so the processes take turns at once. An
uncontended lock costs one system call; a contended one waits on a thread of the lock's own (the
event loop goes on), one waiter at a time since the process's queue comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


class ProcessLock:
    """An exclusive lock on the file `path` (created when missing), shared with other processes."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None
        self._opened_by = 0  # the process that opened `_fd`
        self._requests: queue.SimpleQueue[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]]
        self._requests = queue.SimpleQueue()
        self._waiter: threading.Thread | None = None
        self._mutex = threading.Lock()

    async def acquire(self, abandoned: Callable[[], None]) -> None:
        """Taken, once no other process holds it. Cancelled while waiting: `abandoned()` runs once
        the wait is over (the lock given up again if it was taken meanwhile), so the caller keeps
        its own queue's place until then and nobody in this process takes the lock the wait would
        still get."""
        fd = self._descriptor()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        loop = asyncio.get_running_loop()
        taken: asyncio.Future[None] = loop.create_future()
        self._start_waiter()
        self._requests.put((fd, loop, taken))
        try:
            await asyncio.shield(taken)
        except asyncio.CancelledError:

            def over(done: asyncio.Future[None]) -> None:
                if not done.cancelled() and done.exception() is None:
                    self.release()
                abandoned()

            taken.add_done_callback(over)
            raise

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _descriptor(self) -> int:
        # Opened again in a child forked after it was opened: a descriptor inherited shares its
        # lock with the parent's, so the two would not exclude each other.
        if self._fd is None or self._opened_by != os.getpid():
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._opened_by = os.getpid()
        return self._fd

    def _start_waiter(self) -> None:
        # A daemon thread: a process leaving while it waits is not held up by it. (None runs in a
        # child forked after it started: started there again.)
        with self._mutex:
            if self._waiter is None or not self._waiter.is_alive():
                self._waiter = threading.Thread(
                    target=self._wait_for_requests, name="herald-sqlite-writer-lock", daemon=True
                )
                self._waiter.start()

    def _wait_for_requests(self) -> None:
        while True:
            fd, loop, taken = self._requests.get()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as error:
                _call(loop, taken.set_exception, error)
            else:
                _call(loop, taken.set_result, None)


def _call(loop: asyncio.AbstractEventLoop, step: Callable[[_T], None], argument: _T) -> None:
    with contextlib.suppress(RuntimeError):  # that loop closed meanwhile: its process is leaving
        loop.call_soon_threadsafe(step, argument)
