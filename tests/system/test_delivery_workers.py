"""Exactly once across `kill -9`: three `herald worker` processes share one PostgreSQL (+ Redis) and
deliver one campaign to a few thousand users through a real HTTP receiver; one worker is killed
mid-execution and started again.

The workers poll once an hour, so the campaign is sent because the publish woke them (NOTIFY).
Time is a shared file clock: the test moves it past the dead worker's lease instead of waiting.
What a receiver sees: every user gets exactly one delivery id, and a repeat of an id can only be
one of the messages the killed worker had in flight (their outcome unknown, they are sent again
under the same ids, which a receiver drops). The receiver holds requests once a fifth of the
audience has arrived, so the worker killed is caught mid-window, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import func, insert, select

from herald.audience.models import User
from herald.clock import FileClock
from herald.config import Settings
from herald.db import create_database
from herald.delivery.config import ConnectorInput
from herald.delivery.engine.models import Execution, ExecutionUser
from herald.delivery.engine.rank import rank_of
from herald.delivery.engine.run import AHEAD, ROUNDS, delivery_id
from herald.delivery.models import OutboxEntry
from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import HOOK_SECRET, create_campaign
from tests.delivery.conftest import OPEN_LIMITS
from tests.delivery.test_engine_send import PUSH
from tests.factories import Tenant, add_connector
from tests.ops.served import server_env, tenant
from tests.procfs import socket_inodes, tcp_rows
from tests.system.cluster import Server, serve

PG_URL = os.environ.get("HERALD_TEST_DATABASE_URL")
REDIS_URL = os.environ.get("HERALD_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not (PG_URL and REDIS_URL),
    reason="multi-process tests need HERALD_TEST_DATABASE_URL and HERALD_TEST_REDIS_URL (shared state)",
)
USERS = 2000
WORKERS = 3
LEASE = timedelta(minutes=5)


@dataclass
class Receiver:
    """An HTTP receiver counting the delivery id of every POST (it answers 204). Once `hold_after`
    messages have arrived, it holds further requests unanswered until `opened` is set: the workers
    are then caught mid-window, each holding a claimed batch."""

    ids: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    hold_after: int | None = None
    opened: threading.Event = field(default_factory=threading.Event)
    held: int = 0
    port: int = 0
    status: int = 204  # what it answers

    def start(self) -> tuple[ThreadingHTTPServer, str]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    hold = receiver.hold_after is not None and len(receiver.ids) >= receiver.hold_after
                    receiver.held += hold
                if hold:
                    receiver.opened.wait(120)
                with receiver.lock:
                    receiver.ids.append(str(orjson.loads(body)["id"]))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # a worker has several requests on the way at once
            daemon_threads = True

        server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host, port = server.server_address[:2]
        self.port = int(port)
        return server, f"http://{host!s}:{port}/hooks"

    def count(self) -> int:
        with self.lock:
            return len(self.ids)

    def holding(self) -> int:
        with self.lock:
            return self.held


def _connected_to(pid: int, port: int) -> bool:
    """Whether process `pid` has a TCP connection open to 127.0.0.1:`port` (Linux /proc)."""
    inodes = socket_inodes(pid)
    return any(
        remote == port and inode in inodes and state == "01"  # ESTABLISHED
        for _, remote, state, inode in tcp_rows(f"/proc/{pid}/net/tcp")
    )


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _start_worker(env: dict[str, str], log: Path) -> Worker:
    """A `herald worker` polling hourly, once it listens for wake-ups."""
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "herald", "worker", "--interval", "3600"],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    worker = Worker(process, log)
    try:
        _wait(lambda: "listening for wake-ups" in log.read_text(encoding="utf-8"), f"{log.name} listening")
    except BaseException:
        worker.kill()  # never left running behind a failed test
        raise
    return worker


def _wait(condition: Any, what: str, timeout: float = 120.0) -> None:
    """Wait for another process's effect (a bound against hanging, not a speed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def _add_users(database_url: str, workspace_id: str, count: int) -> None:
    async def add() -> None:
        database = create_database(Settings(database_url=database_url))
        now = datetime.now(UTC)
        rows = [
            {
                "workspace_id": workspace_id,
                "customer_id": f"user-{i:05d}",
                "push_id": f"tok-{i:05d}",
                "attributes": {"platform": "ANDROID"},
                "email_opt_out": False,
                "push_opt_out": False,
                "sms_opt_out": False,
                "created_at": now,
                "updated_at": now,
            }
            for i in range(count)
        ]
        try:
            async with database.writer() as session:
                await session.execute(insert(User), rows)
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(add())


def _states(database_url: str, workspace_id: str) -> tuple[str | None, dict[str, int]]:
    """The execution's id and its users by state."""

    async def read() -> tuple[str | None, dict[str, int]]:
        database = create_database(Settings(database_url=database_url))
        try:
            async with database.reader() as session:
                execution = await session.scalar(
                    select(Execution.id).where(Execution.workspace_id == workspace_id)
                )
                rows = (
                    await session.execute(
                        select(ExecutionUser.state, func.count())
                        .where(ExecutionUser.workspace_id == workspace_id)
                        .group_by(ExecutionUser.state)
                    )
                ).all()
                return execution, {str(state): int(n) for state, n in rows}
        finally:
            await database.dispose()

    return asyncio.run(read())


def _outbox(database_url: str, workspace_id: str) -> list[tuple[str, str]]:
    async def read() -> list[tuple[str, str]]:
        database = create_database(Settings(database_url=database_url))
        try:
            async with database.reader() as session:
                rows = await session.execute(
                    select(OutboxEntry.id, OutboxEntry.status).where(OutboxEntry.workspace_id == workspace_id)
                )
                return [(str(i), str(s)) for i, s in rows.all()]
        finally:
            await database.dispose()

    return asyncio.run(read())


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    found = Receiver()
    server, url = found.start()
    yield found, url
    server.shutdown()
    server.server_close()


def push_workspace(database_url: str, url: str) -> Tenant:
    """A workspace of USERS Android users whose push connector posts to `url`."""

    async def connector(app: FastAPI, made: Tenant) -> None:
        given = ConnectorInput(
            "push-gw", "CUSTOM_API", channel="push", url=url, secret=HOOK_SECRET, timeout=10
        )
        await add_connector(app, made, given)

    workspace = tenant(database_url, setup=connector, rate_limits=OPEN_LIMITS)
    _add_users(database_url, workspace.workspace_id, USERS)
    return workspace


def _deployment(
    database_url: str, tmp_path: Path, url: str, clock_file: str, **settings: str
) -> tuple[Tenant, dict[str, str]]:
    """A workspace of USERS Android users whose push connector posts to `url` (`push_workspace`),
    and the environment of its processes (the file clock, Redis, the lease, `settings`)."""
    workspace = push_workspace(database_url, url)
    env = server_env(
        database_url,
        clock_file=clock_file,
        redis_url=str(REDIS_URL),
        log_level="info",
        delivery_lease_seconds=str(LEASE.total_seconds()),
        **settings,
    )
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    return workspace, env


def _publish(api: Server, workspace: Tenant) -> str:
    """A Push campaign to the workspace's Android users, published (ASAP): its id."""
    body = copy.deepcopy(PUSH)
    body["basic_details"]["platforms"] = ["ANDROID"]

    async def publish() -> str:
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as client:
            campaign_id = await create_campaign(client, workspace, body)
            await h.publish(client, workspace, campaign_id)
            return campaign_id

    return asyncio.run(publish())


def _delivery_ids(execution_id: str, campaign_id: str) -> set[str]:
    """The delivery id of each user's one message (ids in the order of the users' rank)."""
    users = (f"user-{i:05d}" for i in range(USERS))
    return {delivery_id(execution_id, c, "ANDROID", rank=rank_of(campaign_id, c)) for c in users}


def test_every_user_gets_exactly_one_delivery_id_across_a_killed_worker(
    database_url: str, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    sink, url = receiver
    clock_file = str(tmp_path / "now")
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    FileClock.write(clock_file, start)
    workspace, env = _deployment(database_url, tmp_path, url, clock_file)
    api: Server = serve(env, 1)
    workers: list[Worker] = []
    try:
        # Each started inside the try: one that fails to start leaves none of the others running.
        for n in range(WORKERS):
            workers.append(_start_worker(env, tmp_path / f"worker-{n}.log"))
        sink.hold_after = USERS // 5
        campaign_id = _publish(api, workspace)
        _wait(lambda: sink.holding() > 0, "a fifth of the audience reached the receiver, the rest is held")
        # The victim is a worker caught mid-window: it has requests held at the receiver, so it
        # holds a claimed batch and messages in flight.
        _wait(
            lambda: any(_connected_to(w.process.pid, sink.port) for w in workers),
            "a worker with requests held at the receiver",
        )
        victim = next(n for n, w in enumerate(workers) if _connected_to(w.process.pid, sink.port))
        workers[victim].kill()
        sink.opened.set()

        # The live workers send everything they can, then go back to sleep; what is left is the
        # dead worker's batch, CLAIMED until its lease runs out.
        def settled_but_the_dead_batch() -> bool:
            _, states = _states(database_url, workspace.workspace_id)
            before = sink.count()
            time.sleep(0.5)
            return states.get("PENDING", 0) == 0 and sink.count() == before

        _wait(settled_but_the_dead_batch, "the live workers are idle")
        execution_id, states = _states(database_url, workspace.workspace_id)
        assert states.get("CLAIMED", 0) > 0  # the killed worker's batch is waiting for its lease
        assert sink.count() < USERS + 1

        FileClock.write(clock_file, start + LEASE + timedelta(minutes=1))
        workers[victim] = _start_worker(env, tmp_path / "worker-again.log")  # ticks at start
        _wait(lambda: _states(database_url, workspace.workspace_id)[1].get("SENT", 0) == USERS, "all SENT")

        async def status() -> str:
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as client:
                return str((await h.get(client, workspace, campaign_id))["status"])

        _wait(lambda: asyncio.run(status()) == "SENT", "the campaign is SENT")
    finally:
        for worker in workers:
            worker.kill()
        api.kill()

    assert execution_id is not None
    expected = _delivery_ids(execution_id, campaign_id)
    received = Counter(sink.ids)
    assert set(received) == expected  # none missing, none extra: one id per user
    repeats = {i: n for i, n in received.items() if n > 1}
    # Only the messages the killed worker had begun and not recorded may arrive twice, each under
    # its one id: the two windows on the wire, the one written ahead of them, and the one answered
    # before them, being recorded (each window `ROUNDS` messages on each of half the lanes).
    assert len(repeats) <= (3 + AHEAD) * (Settings().delivery_concurrency // 2) * ROUNDS
    assert all(n == 2 for n in repeats.values())
    rows = _outbox(database_url, workspace.workspace_id)
    assert sorted(i for i, _ in rows) == sorted(expected)
    assert {s for _, s in rows} == {"SENT"}
    _, states = _states(database_url, workspace.workspace_id)
    assert states == {"SENT": USERS}


def test_sigterm_stops_a_worker_after_its_batch_in_hand(
    database_url: str, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    """SIGTERM while a worker's messages are on the wire: the batch it claimed is sent and recorded,
    no other batch is claimed, the process exits 0; the next worker sends the rest, each user once."""
    sink, url = receiver
    clock_file = str(tmp_path / "now")
    FileClock.write(clock_file, datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    workspace, env = _deployment(database_url, tmp_path, url, clock_file)
    api: Server = serve(env, 1)
    worker = _start_worker(env, tmp_path / "worker.log")
    try:
        sink.hold_after = 20  # within the first batch the worker claims
        campaign_id = _publish(api, workspace)
        _wait(lambda: sink.holding() > 0, "the worker's messages held at the receiver")
        worker.process.send_signal(signal.SIGTERM)
        # Said at once, while the messages handed over are still held at the receiver.
        _wait(lambda: "SIGTERM received" in worker.log.read_text(encoding="utf-8"), "the stop logged")
        sink.opened.set()
        assert worker.process.wait(timeout=120) == 0
        execution_id, states = _states(database_url, workspace.workspace_id)
        assert states.get("CLAIMED", 0) == 0  # the batch in hand was finished, not abandoned
        assert 0 < states.get("SENT", 0) < USERS  # and no batch after it was taken
        assert {status for _, status in _outbox(database_url, workspace.workspace_id)} == {"SENT"}
        sent_before = sink.count()
        assert sent_before == states["SENT"]

        worker = _start_worker(env, tmp_path / "worker-again.log")  # ticks at start
        _wait(lambda: _states(database_url, workspace.workspace_id)[1].get("SENT", 0) == USERS, "all SENT")
    finally:
        worker.kill()
        api.kill()

    assert execution_id is not None
    expected = _delivery_ids(execution_id, campaign_id)
    received = Counter(sink.ids)
    assert set(received) == expected
    assert set(received.values()) == {1}  # nothing sent twice: the stop lost nothing in flight


def test_a_failing_connector_pauses_the_execution_at_the_threshold_of_all_workers(
    database_url: str, tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    """Three workers with every lane open send through a receiver that fails every request: the
    execution pauses once their failures together reach the threshold, and no more requests than
    the threshold were made by all of them together (each takes places in the connector's shared
    row for its requests on their way). (Before, each counted its own failures and had all its
    windows out at once: 192 failed, whatever the threshold; then each kept its own requests on
    their way under the threshold: 40-60. Which worker's failures reach it is the in-process
    test's to pin down: `test_engine_retry`.)"""
    sink, url = receiver
    sink.status = 503
    threshold = 20
    clock_file = str(tmp_path / "now")
    FileClock.write(clock_file, datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    workspace, env = _deployment(
        database_url, tmp_path, url, clock_file, delivery_error_threshold=str(threshold)
    )
    api: Server = serve(env, 1)
    workers: list[Worker] = []

    def paused() -> bool:
        async def read() -> str | None:
            database = create_database(Settings(database_url=database_url))
            try:
                async with database.reader() as session:
                    return await session.scalar(
                        select(Execution.status).where(Execution.workspace_id == workspace.workspace_id)
                    )
            finally:
                await database.dispose()

        return asyncio.run(read()) == "PAUSED"

    try:
        for n in range(WORKERS):
            workers.append(_start_worker(env, tmp_path / f"worker-{n}.log"))
        _publish(api, workspace)
        _wait(paused, "the execution is paused")
        time.sleep(0.5)  # anything still on its way arrives (a bound on what was sent, not a speed)
        arrived = sink.count()
    finally:
        for worker in workers:
            worker.kill()
        api.kill()
    assert Settings().delivery_concurrency > threshold  # lanes enough for more
    assert arrived == threshold
