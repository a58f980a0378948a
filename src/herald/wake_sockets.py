"""Wake-ups between the processes of one SQLite file: a datagram to each worker's Unix socket.

PostgreSQL carries wake-ups between processes itself (`NOTIFY`, see `herald.wake`); SQLite has no
such channel, so a `herald worker` beside `herald serve` on one file was woken by its poll only: a
publish waited up to the whole interval for it. Here each process that runs the engine binds a
datagram socket in a directory of the file's own (`directory_of`), and a commit that wakes the
workers sends its payload (the workspace, as `NOTIFY` does) to every socket there but its own
process's. Sent after the commit, never for a rollback, as `NOTIFY`; non-blocking, so a receiver
that is slow or gone costs nothing: a socket nobody reads any more (its process killed) is
removed by the first sender that finds it so, and one whose queue is full has wake-ups waiting
already. The poll stays the fallback, as on PostgreSQL.

The directory is under the system's temporary directory (`/tmp` when that one's path is too deep),
named by a hash of the database file's real path: a Unix socket's path is limited to 107 bytes,
which a database's own directory can exceed. It is made private to the user (mode 0700); one that
another user owns or may write in is not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import logging
import os
import socket
import stat
import tempfile
from collections.abc import Callable

from sqlalchemy.engine import make_url

from herald.plain_sql import sqlite_file_key

log = logging.getLogger("herald.worker")

_ids = itertools.count(1)
# A socket's path is at most 107 bytes on Linux; its name in the directory (`PID-N`) takes up to 24.
_LONGEST_DIRECTORY = 107 - 25


@functools.lru_cache(maxsize=64)
def directory_of(database_url: str) -> str | None:
    """The wake-up directory of a SQLite file database; None for PostgreSQL or in-memory SQLite."""
    url = make_url(database_url)
    real = sqlite_file_key(url.database or "") if url.get_backend_name() == "sqlite" else None
    if real is None:
        return None
    name = f"herald-wake-{os.getuid()}-{hashlib.sha256(real.encode()).hexdigest()[:20]}"
    directory = os.path.join(tempfile.gettempdir(), name)
    if len(directory) > _LONGEST_DIRECTORY and os.path.isdir("/tmp"):
        directory = os.path.join("/tmp", name)  # a deep TMPDIR leaves no room for a socket's name
    return directory


def _private(directory: str) -> bool:
    """`directory` exists (made now if missing), is ours and nobody else's to write in."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    return _ours(directory)


def _ours(directory: str) -> bool:
    """`directory` is a directory of this user's that nobody else may write in."""
    info = os.lstat(directory)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _still_there(path: str) -> bool:
    """A file is at `path` (one `lstat` of a directory in the temporary one: no wait to speak of)."""
    return os.path.lexists(path)


def _own_prefix() -> str:
    return f"{os.getpid()}-"


def tell_others(directory: str, payload: str) -> None:
    """Send `payload` to every other process's socket in `directory` (without waiting)."""
    try:
        if not _ours(directory):
            return  # another user's: nothing of ours listens there
        entries = [entry.path for entry in os.scandir(directory) if not entry.name.startswith(_own_prefix())]
    except FileNotFoundError:
        return  # no process listens
    if not entries:
        return
    data = payload.encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for path in entries:
            try:
                sender.sendto(data, path)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # its process is gone
            except (BlockingIOError, OSError):
                pass  # its queue is full (it has wake-ups waiting), or it cannot be reached now


class SocketListener:
    """This process's socket in the wake-up directory, calling `heard(payload)` for each datagram
    while it is open. `ensure` (called before each wait, as the PostgreSQL listener's) binds it,
    and binds it again when its file is gone (a cleaner of the temporary directory removed it:
    no sender finds it there any more); `missed()` after each bind, since a wake-up sent while no
    socket was bound here was lost."""

    def __init__(
        self, directory: str, heard: Callable[[str], None], missed: Callable[[], None] = lambda: None
    ) -> None:
        self._directory = directory
        self._heard = heard
        self._missed = missed
        self._socket: socket.socket | None = None
        self._path = ""
        self._warned = False

    @property
    def address(self) -> str:
        """The path of the socket bound (empty until `ensure` binds it)."""
        return self._path

    async def ensure(self) -> None:
        if self._socket is not None:
            if _still_there(self._path):
                return
            log.warning("the wake-up socket %s was removed: binding another", self._path)
            self._unbind()
        path = os.path.join(self._directory, f"{_own_prefix()}{next(_ids)}")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            if not _private(self._directory):
                raise PermissionError(f"{self._directory} is not this user's own")
            receiver.setblocking(False)
            receiver.bind(path)
            asyncio.get_running_loop().add_reader(receiver.fileno(), self._readable)
        except OSError as exc:
            receiver.close()
            if not self._warned:
                log.warning("cannot listen for wake-ups (polling meanwhile): %s", exc)
                self._warned = True
            return
        self._socket, self._path, self._warned = receiver, path, False
        log.info("listening for wake-ups from other processes at %s", path)
        self._missed()

    def _readable(self) -> None:
        assert self._socket is not None
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:  # nothing more to read now (BlockingIOError), or the socket closed
                return
            self._heard(data.decode(errors="replace"))

    async def close(self) -> None:
        if self._socket is None:
            return
        self._unbind()
        with contextlib.suppress(OSError):  # left when another process still listens there
            os.rmdir(self._directory)

    def _unbind(self) -> None:
        """The socket closed and its file removed (if still there)."""
        receiver, self._socket = self._socket, None
        if receiver is None:
            return
        with contextlib.suppress(RuntimeError, ValueError):  # the loop closed meanwhile
            asyncio.get_running_loop().remove_reader(receiver.fileno())
        receiver.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)
        self._path = ""
