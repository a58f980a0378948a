"""`herald serve --workers 2`: a burst of new connections is spread over both worker processes.

On the one socket uvicorn hands to its workers, the process that woke first accepted every waiting
connection; 32 opened at once went all to one process in about one run in three, which then served
at half the machine's rate. Each worker now listens on a socket of its own (`herald.http.accept`).

Needs PostgreSQL (several processes on one SQLite file is not a supported deployment).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.ops.served import SEVERAL_WORKERS, server_env
from tests.procfs import children, socket_inodes, tcp_rows
from tests.system.cluster import serve

pytestmark = SEVERAL_WORKERS
BURST = 32


def test_a_burst_of_connections_is_served_by_both_worker_processes(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        server = serve(server_env(database_url, log_level="info"), workers=2, stderr=stderr)
    clients: list[socket.socket] = []
    try:
        # Ready once one worker is: the other may still be starting.
        deadline = time.monotonic() + 30
        while log.read_text().count("Application startup complete") < 2:
            assert time.monotonic() < deadline, "the second worker never started"
            time.sleep(0.05)
        clients = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(BURST)]
        for client in clients:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: herald\r\n\r\n")
        for client in clients:  # answered: accepted by a worker, and still open (keep-alive)
            assert client.recv(4096).startswith(b"HTTP/1.1 200 ")
        ports = {client.getsockname()[1] for client in clients}
        by_worker = {pid: len(ports & _peer_ports(pid, server.port)) for pid in children(server.process.pid)}
        assert sum(by_worker.values()) == BURST, by_worker
        # Spread by a hash of each connection's addresses: fewer than 4 of 32 on one side happens
        # about once in 10^5 runs.
        served = sorted(by_worker.values())[-2:]  # the workers (the resource tracker holds none)
        assert min(served) >= 4, by_worker
    finally:
        for client in clients:
            client.close()
        server.kill()


def _peer_ports(pid: int, server_port: int) -> set[int]:
    """The client ports of the connections to `server_port` that process `pid` holds open."""
    inodes = socket_inodes(pid)
    return {
        remote
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for local, remote, _, inode in tcp_rows(table)
        if local == server_port and inode in inodes
    }
