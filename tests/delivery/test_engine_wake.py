"""The worker wakes when work is committed, instead of waiting for its next poll: the engine
embedded in the API process (`herald serve` on SQLite) runs here with a poll interval of an hour,
so a message that reaches the sink got there because the publish woke it."""

from __future__ import annotations

import asyncio
import copy
import os
import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from herald import wake, wake_sockets
from herald.campaigns import worker
from herald.clock import FileClock
from herald.services import Services
from tests.delivery.builders import push_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import PUSH, publish
from tests.factories import Tenant

HOUR = 3600.0


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for a background worker's effect (a bound against hanging, not a speed assertion)."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def _of(webhook: HttpReceiver, campaign_id: str) -> list[str]:
    return [
        str(r.json()["recipient"]["customer_id"])
        for r in webhook.received
        if r.json()["campaign_id"] == campaign_id
    ]


@pytest.mark.own_database  # the worker scans every workspace
async def test_a_worker_waits_out_a_clock_file_that_holds_no_time(
    app: FastAPI,
    client: httpx.AsyncClient,
    workspace: Tenant,
    webhook: HttpReceiver,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A clock file rewritten in place (`echo $t > file` empties it first) holds no time for a
    moment: the worker that reads it then waits for a time and goes on, instead of exiting while
    the API keeps taking work (it answers 503 in that moment)."""
    await push_connector(app, workspace, webhook)
    await add_users(
        app, workspace.workspace_id, {"customer_id": "ana", "push_id": "t", "platform": "ANDROID"}
    )
    services: Services = app.state.herald
    path = tmp_path / "clock"
    FileClock.write(str(path), services.clock.now())
    clock = FileClock(str(path))
    path.write_text("")
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(services.database, clock, HOUR, stop, services.settings))
    try:
        await _until(lambda: "does not hold a time" in caplog.text, "the worker reads the empty file")
        assert not task.done()
        FileClock.write(str(path), services.clock.now())
        campaign_id = await publish(client, workspace, PUSH)
        await _until(lambda: _of(webhook, campaign_id) == ["ana"], "the campaign is sent")
    finally:
        stop.set()
        await task


@pytest.mark.own_database  # the worker scans every workspace
async def test_publishing_wakes_the_worker(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    await push_connector(app, workspace, webhook)
    await add_users(
        app, workspace.workspace_id, {"customer_id": "ana", "push_id": "t", "platform": "ANDROID"}
    )
    services: Services = app.state.herald
    stop = asyncio.Event()
    task = asyncio.create_task(
        worker.run_forever(services.database, services.clock, HOUR, stop, services.settings)
    )
    try:
        first = await publish(client, workspace, PUSH)
        await _until(lambda: _of(webhook, first) == ["ana"], "the first campaign is sent")
        # The worker now waits for an hour, unless something wakes it.
        body = copy.deepcopy(PUSH)
        body["basic_details"]["name"] = "Second"
        second = await publish(client, workspace, body)
        await _until(lambda: _of(webhook, second) == ["ana"], "the second campaign is sent")
    finally:
        stop.set()
        await task
    assert not task.exception()


def test_a_tick_takes_the_workspaces_named_by_wake_ups_first() -> None:
    wake.wake_here("WS-B")
    wake.wake_here("WS-D")
    wake.wake_here(None)  # a wake-up that names no workspace changes no order
    assert wake.named_first(["WS-A", "WS-B", "WS-C", "WS-D"]) == ["WS-B", "WS-D", "WS-A", "WS-C"]
    # Taken by that tick: the next one walks them in their own order again.
    assert wake.named_first(["WS-A", "WS-B", "WS-C", "WS-D"]) == ["WS-A", "WS-B", "WS-C", "WS-D"]


async def test_a_commit_names_its_workspace_to_every_listening_worker(app: FastAPI) -> None:
    """In this process the commit names it directly (the engine embedded in `herald serve`); to
    `herald worker` processes the name also travels in the notification (PostgreSQL) or in a
    datagram to the worker's socket (a SQLite file)."""
    services: Services = app.state.herald
    woken = asyncio.Event()

    async def named(name: str) -> bool:
        """Whether a wake-up names `name` (woken ones naming others, e.g. late ones, are skipped)."""
        for _ in range(10):
            await asyncio.wait_for(woken.wait(), timeout=30)
            woken.clear()
            if wake.named_first(["WS-A", name])[0] == name:
                return True
        return False

    async with wake.listening(services.settings.database_url, woken) as listener:
        if listener is not None:
            await listener.ensure()
        async with services.database.writer() as session:
            await wake.wake_on_commit(session, "WS-NAMED")
            await session.commit()
        assert await named("WS-NAMED")
        if isinstance(listener, wake.Listener):
            async with services.database.writer() as session:
                await session.execute(
                    text("SELECT pg_notify(:channel, 'WS-NOTIFIED')"), {"channel": wake.CHANNEL}
                )
                await session.commit()
            assert await named("WS-NOTIFIED")
        elif isinstance(listener, wake_sockets.SocketListener):
            # What another process's commit sends (`wake_sockets.tell_others` skips this process's own).
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                sender.sendto(b"WS-SENT", listener.address)
            assert await named("WS-SENT")


async def test_a_wake_up_to_share_a_dispatch_names_its_workspace_but_asks_no_dispatch_to_give_way(
    app: FastAPI,
) -> None:
    """The engine's own wake-ups (an audience written, for other workers to join its dispatch) must
    not end the turn of the dispatch that sent them (`Dispatcher.yielding`); a publish's must."""
    services: Services = app.state.herald
    before, heard = wake.wakes(), wake.heard()
    async with services.database.writer() as session:
        await wake.wake_on_commit(session, "WS-SHARED", new_work=False)
        await session.commit()
    assert wake.wakes() == before
    assert wake.heard() == heard + 1  # yet heard: a dispatch under way checks its campaign again
    assert wake.named_first(["WS-A", "WS-SHARED"]) == ["WS-SHARED", "WS-A"]
    async with services.database.writer() as session:
        await wake.wake_on_commit(session, "WS-NEW")
        await session.commit()
    assert wake.wakes() == before + 1
    assert wake.named_first(["WS-A", "WS-NEW"]) == ["WS-NEW", "WS-A"]
    # The same two as notifications, read by a `herald worker`'s listener.
    listener = wake.Listener("postgresql+asyncpg://postgres@127.0.0.1:5432/any", asyncio.Event())
    listener._notified(None, 0, wake.CHANNEL, "share WS-SHARED")
    assert wake.wakes() == before + 1
    listener._notified(None, 0, wake.CHANNEL, "WS-NEW")
    assert wake.wakes() == before + 2
    assert wake.heard() == heard + 4
    assert wake.named_first(["WS-A", "WS-NEW", "WS-SHARED"]) == ["WS-NEW", "WS-SHARED", "WS-A"]


async def test_a_notification_to_share_a_dispatch_carries_its_mark(app: FastAPI) -> None:
    """What `wake_on_commit(..., new_work=False)` sends on PostgreSQL is what the listener reads as
    such (the payload heard through a real LISTEN)."""
    services: Services = app.state.herald
    woken = asyncio.Event()
    async with wake.listening(services.settings.database_url, woken) as listener:
        if not isinstance(listener, wake.Listener):
            pytest.skip("notifications are PostgreSQL's (a SQLite file's datagrams: the test below)")
        heard: list[str] = []
        original = listener._notified

        def record(connection: object, pid: int, channel: str, payload: str) -> None:
            heard.append(payload)
            original(connection, pid, channel, payload)

        listener._notified = record  # type: ignore[method-assign]
        await listener.ensure()
        async with services.database.writer() as session:
            await wake.wake_on_commit(session, "WS-SHARED", new_work=False)
            await session.commit()
        # (Other tests' notifications may be heard as well: only this one's are looked at.)
        await _until(lambda: any("WS-SHARED" in payload for payload in heard), "the notification is heard")
        assert [payload for payload in heard if "WS-SHARED" in payload] == ["share WS-SHARED"]


async def test_a_commit_sends_its_wake_up_to_the_other_processes_on_a_sqlite_file(app: FastAPI) -> None:
    """Each other process's socket in the file's directory gets the payload `NOTIFY` would carry
    (a wake-up to share a dispatch with its mark); a socket whose process is gone is removed."""
    services: Services = app.state.herald
    directory = wake_sockets.directory_of(services.settings.database_url)
    if directory is None:
        pytest.skip("datagrams are a SQLite file's")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    other = os.path.join(directory, "1-other")  # "another process's" (pid 1 is never a test's)
    gone = os.path.join(directory, "2-gone")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(other)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as closed:
            closed.bind(gone)  # closed at once: its file stays, as a killed process's does
        try:
            async with services.database.writer() as session:
                await wake.wake_on_commit(session, "WS-SHARED", new_work=False)
                await session.rollback()  # never for a rollback
            async with services.database.writer() as session:
                await wake.wake_on_commit(session, "WS-SHARED", new_work=False)
                await session.commit()
            receiver.setblocking(False)
            assert receiver.recv(4096) == b"share WS-SHARED"
            with pytest.raises(BlockingIOError):
                receiver.recv(4096)  # one datagram: the rollback sent none
            assert "2-gone" not in os.listdir(directory)
        finally:
            os.unlink(other)
