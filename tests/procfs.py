"""What Linux's /proc says of a process's sockets: for tests that check which process holds which
connection."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def children(parent: int) -> list[int]:
    """The processes whose parent is `parent`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[1]) == parent:  # after the name: state, ppid
            found.append(int(stat.parent.name))
    return found


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def tcp_rows(table: str) -> Iterator[tuple[int, int, str, str]]:
    """Each row of a /proc TCP table (`/proc/net/tcp`, `/proc/PID/net/tcp6`, ...): local port,
    remote port, state (hex, "01" established, "0A" listening) and the socket's inode."""
    for line in Path(table).read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
        yield local, remote, fields[3], fields[9]
