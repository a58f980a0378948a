"""What `herald serve` tells its operator at start-up about the processes it runs."""

from __future__ import annotations

import os
from pathlib import Path

from tests.system.cluster import serve


def _stderr_of(tmp_path: Path, workers: int, in_process_worker: str | None = None) -> str:
    env = {**os.environ, "HERALD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'herald.db'}"}
    env.pop("HERALD_IN_PROCESS_WORKER", None)
    if in_process_worker is not None:
        env["HERALD_IN_PROCESS_WORKER"] = in_process_worker
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        server = serve(env, workers, stderr=stderr, probe="/healthz")
        server.kill()
    return log.read_text()


def test_several_processes_on_sqlite_say_that_none_runs_the_delivery_engine(tmp_path: Path) -> None:
    # With --workers above 1 no process runs the engine: published campaigns waited, unsaid, for a
    # `herald worker` the operator had no reason to start.
    assert "no delivery runs in the server" in _stderr_of(tmp_path, 2)


def test_one_process_on_sqlite_runs_it_and_says_nothing_of_it(tmp_path: Path) -> None:
    assert "no delivery runs in the server" not in _stderr_of(tmp_path, 1)


def test_several_processes_told_to_run_the_engine_say_that_each_does(tmp_path: Path) -> None:
    stderr = _stderr_of(tmp_path, 2, in_process_worker="on")
    assert "each of the 2 server processes runs the delivery engine" in stderr
    assert "no delivery runs in the server" not in stderr
