"""SQLite's WAL checkpoints on a thread of their own in `herald serve`, not inside a request's commit.

In WAL mode a commit appends its pages to the write-ahead log, and by default the commit that takes
the log past 1,000 pages also copies the log back into the database file and syncs both (an
"automatic checkpoint"). Herald runs statements on the event loop's thread (`herald.sqlite_inline`),
so that copy and its two syncs (5-10 ms each here) stopped every request of the process. A campaign
create writes about 14 pages: under a burst of creates one commit in ~70 checkpointed, several times
a second, and the requests queued behind it made the write routes' long tail.

In a process that serves, `start` turns automatic checkpoints off on the connections it opens
afterwards (`wants_manual_checkpoints`, asked when a connection is set up) and checkpoints from a
thread instead: a PASSIVE checkpoint every `interval` seconds, which copies what no reader still
needs and waits for nobody (writers go on appending meanwhile; the thread holds no Python lock
while SQLite copies and syncs), and a TRUNCATE one when the log has grown past `RESTART_FRAMES`
(see there). Other processes on the same file (the CLI, `herald worker`) keep
SQLite's automatic checkpoints: any process's checkpoint serves every process.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from herald.plain_sql import open_sqlite, sqlite_file_key

log = logging.getLogger("herald.db")

# The log starts again from its beginning only when a writer finds it wholly copied and no reader
# on it. A process that is never idle (a request or the worker always reading) gives it no such
# moment, so it grew without end: 300 MB after two minutes of 1,000 events/s, every page read
# searching it, and the worker's ticks slowing until it fell behind. Past this many frames (32 MB of
# 4 KB pages) the thread truncates it: it holds SQLite's write lock until the readers on the log are
# done (milliseconds; writers wait for it as for any writer), then empties it.
RESTART_FRAMES = 8192

_lock = threading.Lock()
_threads: dict[str, _CheckpointThread] = {}


def wants_manual_checkpoints(path: str) -> bool:
    """True when this process checkpoints the file `path` from its thread (see the module docstring)."""
    return sqlite_file_key(path) in _threads


def start(path: str, interval: float = 0.1) -> None:
    """Checkpoint the SQLite file `path` from a thread of this process until `stop`."""
    key = sqlite_file_key(path)
    if key is None:
        return  # an in-memory database has no log
    with _lock:
        thread = _threads.get(key)
        if thread is None:
            thread = _threads[key] = _CheckpointThread(path, interval)
            thread.start()
        thread.users += 1


def stop(path: str) -> None:
    """Once every `start` of `path` has its `stop`: end the thread after a last checkpoint (call it
    once the engines that `start` served are disposed of: their connections checkpoint no more)."""
    key = sqlite_file_key(path)
    if key is None:
        return
    with _lock:
        thread = _threads.get(key)
        if thread is None:
            return
        thread.users -= 1
        if thread.users > 0:
            return
        del _threads[key]
    thread.stop()


class _CheckpointThread(threading.Thread):
    def __init__(self, path: str, interval: float) -> None:
        super().__init__(name="herald-sqlite-checkpoints", daemon=True)
        self.users = 0  # apps of this process serving the file (tests run several at once)
        self._path = path
        self._interval = interval
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.join()

    def run(self) -> None:
        # Waits for a lock up to a second itself: a checkpoint never holds up anyone but this thread.
        connection = open_sqlite(self._path, busy_seconds=1.0)
        try:
            while not self._stopping.wait(self._interval):
                self._checkpoint(connection)
            self._checkpoint(connection)
        finally:
            connection.close()

    def _checkpoint(self, connection: sqlite3.Connection) -> None:
        try:
            checkpoint(connection)
        except sqlite3.Error as exc:  # busy or gone for now: the next turn tries again
            log.warning("SQLite checkpoint failed: %s", exc)


def checkpoint(connection: sqlite3.Connection, restart_frames: int = RESTART_FRAMES) -> None:
    """A PASSIVE checkpoint; then, when the log holds more than `restart_frames` frames, a TRUNCATE
    one, which waits (up to the connection's busy timeout) for the readers still on the log and
    empties it."""
    _, frames, _ = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if frames > restart_frames:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
