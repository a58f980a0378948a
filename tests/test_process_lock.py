"""SQLite's one writer across processes (`herald.process_lock.ProcessLock`, taken by `db.WriteGate`
after its own queue): another process holding it makes a writer wait, without blocking the event
loop, until it lets go; a writer cancelled while waiting leaves the lock free and its queue's place
given up only once its wait is over."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald.db import WriteGate
from herald.process_lock import ProcessLock

# A process that takes the lock, says so, and lets go when told (a line on its standard input).
_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
fcntl.flock(fd, fcntl.LOCK_UN)
print("let go", flush=True)
sys.stdin.readline()
"""


class Holder:
    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._line() == "held"

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def let_go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        assert self._line() == "let go"

    def end(self) -> None:
        self.process.kill()
        self.process.communicate(timeout=10)  # and its pipes closed


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "herald.db-writer"


@pytest.fixture
def holder(lock_path: Path) -> Iterator[Holder]:
    held = Holder(lock_path)
    yield held
    held.end()


def _free(path: Path) -> bool:
    """Nobody holds the lock: a descriptor of another open file takes it at once."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


async def test_a_writer_waits_for_another_process_then_takes_the_lock(
    lock_path: Path, holder: Holder
) -> None:
    lock = ProcessLock(str(lock_path))
    taking = asyncio.create_task(lock.acquire(abandoned=lambda: None))
    await asyncio.sleep(0)  # the non-blocking try has failed: the loop runs on meanwhile
    assert not taking.done()
    await asyncio.to_thread(holder.let_go)
    await asyncio.wait_for(taking, 30)
    assert not _free(lock_path)
    lock.release()
    assert _free(lock_path)


async def test_an_uncontended_lock_is_taken_at_once(lock_path: Path) -> None:
    lock = ProcessLock(str(lock_path))
    await lock.acquire(abandoned=lambda: None)
    assert not _free(lock_path)
    lock.release()
    await lock.acquire(abandoned=lambda: None)  # again, on the same descriptor
    lock.release()
    assert _free(lock_path)


async def test_a_writer_cancelled_while_waiting_leaves_the_lock_free(lock_path: Path, holder: Holder) -> None:
    lock = ProcessLock(str(lock_path))
    over = asyncio.Event()
    taking = asyncio.create_task(lock.acquire(abandoned=over.set))
    await asyncio.sleep(0)
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    assert not over.is_set()  # its wait goes on: the caller's place is kept until it ends
    await asyncio.to_thread(holder.let_go)
    await asyncio.wait_for(over.wait(), 30)  # taken by the waiting thread, then given up again
    assert _free(lock_path)


async def test_the_gate_keeps_its_place_until_a_cancelled_wait_is_over(
    lock_path: Path, holder: Holder
) -> None:
    """A writer of the same process queued behind a cancelled one gets the gate only once the
    cancelled wait has given the file's lock up again: never both at once."""
    gate = WriteGate(ProcessLock(str(lock_path)))
    first = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0)
    assert not second.done()  # the cancelled wait still holds the process's place
    await asyncio.to_thread(holder.let_go)
    await asyncio.wait_for(second, 30)
    assert not _free(lock_path)
    gate.release()
    assert _free(lock_path)


def test_a_forked_child_takes_the_lock_on_a_descriptor_of_its_own(lock_path: Path) -> None:
    """A descriptor inherited across `fork` shares its lock with the parent's: a child forked after
    the parent's lock opened its file must not think it holds the lock the parent holds."""
    lock = ProcessLock(str(lock_path))
    asyncio.run(lock.acquire(abandoned=lambda: None))  # held by this process
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child: is the lock free for it? (it must not be)
        os.close(reader)

        async def attempt() -> bool:
            try:
                await asyncio.wait_for(lock.acquire(abandoned=lambda: None), 0.5)
            except TimeoutError:
                return False
            return True

        took = asyncio.run(attempt())
        os.write(writer, b"took" if took else b"waited")
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as answer:
        said = answer.read()
    os.waitpid(child, 0)
    lock.release()
    assert said == b"waited"
