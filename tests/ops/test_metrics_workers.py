"""`/metrics` under `herald serve --workers 2`: every answer counts, whichever process gave it.

Needs PostgreSQL (several processes on one SQLite file is not a supported deployment).
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.offers.builders import OFFERS
from tests.ops.served import SEVERAL_WORKERS, server_env, tenant, value
from tests.system.cluster import serve

pytestmark = SEVERAL_WORKERS
REQUESTS = 40


def test_counts_are_summed_over_the_worker_processes(database_url: str, tmp_path: Path) -> None:
    made = tenant(database_url, rate_limits={"offers_read": "100000/minute"})
    # The served process's temporary directories (its metrics directory among them) go here.
    env = {**server_env(database_url, log_level="warning"), "TMPDIR": str(tmp_path)}
    server = serve(env, workers=2)
    try:

        def one(_: int) -> int:
            # A new connection each: the two processes take turns accepting them.
            return httpx.get(f"{server.url}{OFFERS}", headers=made.headers(), timeout=30).status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(one, range(REQUESTS))) == {200}
        scrapes = [httpx.get(f"{server.url}/metrics", timeout=30).text for _ in range(4)]
        counted = [
            value(text, "herald_http_requests_total", route="/v5/offers", status="200") for text in scrapes
        ]
        # Each scrape, whichever process answers it, sees every process's requests.
        assert counted == [REQUESTS] * 4
        assert [path.name.startswith("herald-metrics-") for path in tmp_path.iterdir()] == [True]
        os.kill(server.process.pid, signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
        assert list(tmp_path.iterdir()) == []  # the run's metrics directory is removed
    finally:
        server.kill()
