"""Wake-ups between processes on one SQLite file (`herald.wake_sockets`): where the sockets live,
and a directory anyone else may write in is never used (its sockets could be anyone's)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from herald import wake_sockets


def test_the_directory_is_the_files_own_however_its_path_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = wake_sockets.directory_of(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    assert absolute is not None
    assert wake_sockets.directory_of("sqlite+aiosqlite:///a.db") == absolute
    assert wake_sockets.directory_of(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}") != absolute
    assert len(os.path.join(absolute, "4194304-1000")) < 100  # a Unix socket's path fits
    assert wake_sockets.directory_of("sqlite+aiosqlite:///:memory:") is None
    assert wake_sockets.directory_of("postgresql+asyncpg://postgres@127.0.0.1/test") is None


@pytest.fixture
def shared_directory(tmp_path: Path) -> Path:
    """A wake-up directory anyone may write in, with a socket "of another process" in it."""
    directory = tmp_path / "wake"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


def test_no_wake_up_is_sent_into_a_directory_others_may_write_in(shared_directory: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(shared_directory / "1-other"))
        receiver.setblocking(False)
        wake_sockets.tell_others(str(shared_directory), "WS-A")
        with pytest.raises(BlockingIOError):
            receiver.recv(4096)
        shared_directory.chmod(0o700)  # the same, private: sent
        wake_sockets.tell_others(str(shared_directory), "WS-A")
        assert receiver.recv(4096) == b"WS-A"


async def test_no_worker_listens_in_a_directory_others_may_write_in(shared_directory: Path) -> None:
    heard: list[str] = []
    listener = wake_sockets.SocketListener(str(shared_directory), heard.append)
    await listener.ensure()
    try:
        assert listener.address == ""  # not bound: the worker polls instead
        assert os.listdir(shared_directory) == []
    finally:
        await listener.close()


def test_a_deep_temporary_directory_leaves_room_for_the_sockets_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    directory = wake_sockets.directory_of(f"sqlite+aiosqlite:///{tmp_path / 'deep.db'}")
    assert directory is not None
    assert len(os.path.join(directory, "4194304-1000000000000")) <= 107
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as bound:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        bound.bind(os.path.join(directory, f"{os.getpid()}-1"))
    os.unlink(os.path.join(directory, f"{os.getpid()}-1"))
    os.rmdir(directory)


async def test_a_socket_whose_file_was_removed_is_bound_again_and_the_worker_catches_up(
    tmp_path: Path,
) -> None:
    """A cleaner of the temporary directory removed a worker's socket (or its whole directory):
    no sender finds it any more. The worker's next wait binds another, and ticks once for the
    wake-ups sent meanwhile (lost)."""
    directory = tmp_path / "wake"
    heard: list[str] = []
    missed: list[str] = []
    listener = wake_sockets.SocketListener(str(directory), heard.append, lambda: missed.append("tick"))
    await listener.ensure()
    try:
        first = listener.address
        assert os.listdir(directory) == [Path(first).name]
        assert missed == ["tick"]  # the first bind: nothing heard before it
        await listener.ensure()
        assert (listener.address, missed) == (first, ["tick"])  # still there: kept
        os.unlink(first)
        os.rmdir(directory)
        await listener.ensure()
        again = listener.address
        assert again not in ("", first)
        assert os.listdir(directory) == [Path(again).name]
        assert missed == ["tick", "tick"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"WS-A", again)
        for _ in range(1000):  # a bound against hanging: the loop reads it on its next turn
            if heard:
                break
            await asyncio.sleep(0.001)
        assert heard == ["WS-A"]
    finally:
        await listener.close()
    assert not directory.exists()
