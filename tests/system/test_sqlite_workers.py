"""Several engine processes on one SQLite file: `herald worker` processes beside `herald serve`.

They take turns at SQLite's one writer through a lock the kernel hands over (`herald.process_lock`),
and a commit that makes work due wakes the workers of the other processes (`herald.wake_sockets`):
the workers here poll once an hour, so a campaign they send was started by the publish's wake-up.
What the receiver sees is the proof: every user's one delivery id, exactly once.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from herald import migrate as migrations
from herald.clock import FileClock
from tests.factories import Tenant
from tests.ops.served import server_env
from tests.system.cluster import Server, serve
from tests.system.test_delivery_workers import (
    USERS,
    Receiver,
    Worker,
    _delivery_ids,
    _publish,
    _start_worker,
    _states,
    _wait,
    push_workspace,
)
from tests.system.test_delivery_workers import receiver as receiver  # the fixture


def _sqlite_deployment(tmp_path: Path, url: str, **settings: str) -> tuple[str, Tenant, dict[str, str]]:
    """A SQLite file with a workspace of USERS Android users whose push connector posts to `url`;
    the environment of its processes (a file clock held still, `settings`)."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'herald.db'}"
    migrations.upgrade(database_url)
    workspace = push_workspace(database_url, url)
    clock_file = str(tmp_path / "now")
    FileClock.write(clock_file, datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    env = server_env(database_url, clock_file=clock_file, log_level="info", **settings)
    return database_url, workspace, env


def _sent_once_each(sink: Receiver, database_url: str, workspace: Tenant, campaign_id: str) -> None:
    _wait(lambda: _states(database_url, workspace.workspace_id)[1].get("SENT", 0) == USERS, "all SENT")
    execution_id, states = _states(database_url, workspace.workspace_id)
    assert states == {"SENT": USERS}
    assert execution_id is not None
    _wait(lambda: sink.count() >= USERS, "every message at the receiver")
    received = Counter(sink.ids)
    assert set(received) == _delivery_ids(execution_id, campaign_id)
    assert set(received.values()) == {1}


def test_a_publish_wakes_a_worker_of_another_process(tmp_path: Path, receiver: tuple[Receiver, str]) -> None:
    """No engine in the served process: the campaign goes out only if the worker, polling hourly,
    was woken by the publish committed in `herald serve`."""
    sink, url = receiver
    database_url, workspace, env = _sqlite_deployment(tmp_path, url, in_process_worker="off")
    api: Server = serve(env, 1)
    worker: Worker | None = None
    try:
        worker = _start_worker(env, tmp_path / "worker.log")
        campaign_id = _publish(api, workspace)
        _sent_once_each(sink, database_url, workspace, campaign_id)
    finally:
        if worker is not None:
            worker.kill()
        api.kill()


def test_the_served_engine_and_two_workers_send_each_user_exactly_once(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    """The engine embedded in `herald serve` and two `herald worker` processes share one execution
    on one SQLite file, each claiming batches of its own."""
    sink, url = receiver
    database_url, workspace, env = _sqlite_deployment(tmp_path, url)
    api: Server = serve(env, 1)
    workers: list[Worker] = []
    try:
        for n in range(2):
            workers.append(_start_worker(env, tmp_path / f"worker-{n}.log"))
        campaign_id = _publish(api, workspace)
        _sent_once_each(sink, database_url, workspace, campaign_id)
    finally:
        for worker in workers:
            worker.kill()
        api.kill()
