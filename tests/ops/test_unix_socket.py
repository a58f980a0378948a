"""The recommended deployment on the same host as PostgreSQL: `herald serve --workers 2` reaching the
server over its Unix socket (README, "Operating a server"), every connection of it (the request
pools, the driver's direct pool, the readiness check) through a URL naming the socket's directory.

Needs PostgreSQL with its socket in /var/run/postgresql (skipped elsewhere).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url

from tests.offers.builders import OFFERS, offer_body
from tests.ops.served import SEVERAL_WORKERS, server_env, tenant
from tests.procfs import children, socket_inodes, tcp_rows
from tests.system.cluster import serve

SOCKET_DIR = Path("/var/run/postgresql")
POSTGRES_PORT = 5432
pytestmark = [
    SEVERAL_WORKERS,
    pytest.mark.skipif(not (SOCKET_DIR / ".s.PGSQL.5432").exists(), reason="no PostgreSQL socket here"),
]


def test_served_over_the_servers_unix_socket(database_url: str) -> None:
    tcp = make_url(database_url)
    if tcp.port not in (None, POSTGRES_PORT):
        pytest.skip("the test server listens on another port than its socket's")
    over_socket = tcp.set(host=None, port=None, query={"host": str(SOCKET_DIR)})
    url = over_socket.render_as_string(hide_password=False)
    made = tenant(url)
    server = serve(server_env(url, log_level="warning"), workers=2)
    try:
        assert httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200
        body = offer_body(datetime.now(UTC), name=f"Socket_{uuid.uuid4().hex[:8]}")
        created = httpx.post(f"{server.url}{OFFERS}", json=body, headers=made.write_headers(), timeout=30)
        assert created.status_code == 201, created.text
        listed = httpx.get(f"{server.url}{OFFERS}", headers=made.headers(), timeout=30)
        assert listed.status_code == 200, listed.text
        assert [item["name"] for item in listed.json()["data"]] == [body["name"]]
        # Every connection of the workers to the database went over the socket: none over TCP.
        workers = children(server.process.pid)
        held = set().union(*(socket_inodes(pid) for pid in workers))
        to_postgres = [
            inode
            for table in ("/proc/net/tcp", "/proc/net/tcp6")
            for _, remote, _, inode in tcp_rows(table)
            if remote == POSTGRES_PORT and inode in held
        ]
        assert workers
        assert to_postgres == []
        assert _unix_socket_count(held) > 0
    finally:
        server.kill()


def _unix_socket_count(inodes: set[str]) -> int:
    """How many of these sockets are connected Unix sockets (/proc/net/unix: inode last but one)."""
    rows = Path("/proc/net/unix").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[6] in inodes and row.split()[5] == "03")
