"""Real `herald serve` processes on loopback, sharing one PostgreSQL, one Redis and one file clock."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import httpx

from herald.clock import FileClock


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, no graceful shutdown."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def serve(
    env: dict[str, str], workers: int, *, stderr: IO[bytes] | None = None, probe: str = "/readyz"
) -> Server:
    """A `herald serve` process on a free loopback port, in its own process group, once `probe`
    answers 200 (`/healthz` for a server that is up but not meant to be ready). Its log goes to
    `stderr` when given."""
    port = free_port()
    command = [sys.executable, "-m", "herald", "serve", "--port", str(port), "--workers", str(workers)]
    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=stderr if stderr is not None else subprocess.DEVNULL,
    )
    server = Server(port, process)
    try:
        wait_until_ready(server, probe=probe)
    except BaseException:
        server.kill()
        raise
    return server


@dataclass
class Cluster:
    env: dict[str, str]
    clock_file: str
    now: datetime
    servers: list[Server] = field(default_factory=list)

    def start(self, workers: int = 2) -> Server:
        server = serve(self.env, workers)
        self.servers.append(server)
        return server

    def advance(self, delta: timedelta) -> None:
        self.now += delta
        FileClock.write(self.clock_file, self.now)

    def stop(self) -> None:
        for server in self.servers:
            server.kill()


@contextmanager
def two_servers(database_url: str, redis_url: str, tmp: Path) -> Iterator[Cluster]:
    """Two `herald serve --workers 2` on one database, one Redis and one file clock (in `tmp`)."""
    clock_file = str(tmp / "now")
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    FileClock.write(clock_file, start)
    (tmp / "tmp").mkdir()
    env = {
        **os.environ,
        "HERALD_DATABASE_URL": database_url,
        "HERALD_REDIS_URL": redis_url,
        "HERALD_CLOCK_FILE": clock_file,
        "HERALD_LOG_LEVEL": "warning",
        # Five processes at most (two servers of two, one more), each with 1.25 times its pool (the
        # driver's own pool beside the engine's; see the README), and the test's own connections,
        # under the server's 100.
        "HERALD_DB_POOL_SIZE": "12",
        # Servers may be killed, not stopped: their metrics directories stay in the test's tmp.
        "TMPDIR": str(tmp / "tmp"),
    }
    nodes = Cluster(env=env, clock_file=clock_file, now=start)
    try:
        nodes.start()
        nodes.start()
        yield nodes
    finally:
        nodes.stop()


def wait_until_ready(server: Server, timeout: float = 60.0, probe: str = "/readyz") -> None:
    """Poll `probe` until the server answers (start-up, not a test assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"herald serve exited with {server.process.returncode}")
        try:
            if httpx.get(f"{server.url}{probe}", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"herald serve on {server.port} did not become ready")
