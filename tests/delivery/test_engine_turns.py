"""A long dispatch gives way to work woken meanwhile: a worker sending a large campaign still sends
an event-triggered message within its turn (`delivery_turn_seconds`), instead of after the whole
campaign; and work that fell due during a long tick is taken up by the next one at once. The engine
runs embedded (`worker.run_forever`, a poll of an hour): what reaches the receiver got there because
a commit woke it, or a tick found it due."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from herald.campaigns import worker
from herald.clock import FrozenClock
from herald.config import Settings
from herald.delivery.engine.run import BATCH
from herald.delivery.engine.triggers import INBOX_BATCH
from herald.services import Services
from tests.delivery.builders import push_connector
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import HttpReceiver, start_http_receiver
from tests.delivery.test_engine_controls import with_controls
from tests.delivery.test_engine_send import PUSH, publish, stats, tick
from tests.delivery.test_engine_triggers import BUSINESS, EVENT, ready, send_event, send_transition
from tests.delivery.test_engine_wake import HOUR, _of, _until
from tests.factories import Tenant, make_tenant

# More than a claim's worth (200 users on SQLite, 1,000 on PostgreSQL): the first batch sent
# leaves users behind it, which a campaign that gives way sends at the next tick.
AUDIENCE = 1200


@pytest.mark.own_database  # the worker scans every workspace
async def test_an_event_triggered_message_goes_out_while_a_large_campaign_sends(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    services: Services = app.state.herald
    await ready(app, workspace, webhook, "ana")
    await add_users(
        app,
        workspace.workspace_id,
        *({"customer_id": f"u{i:04}", "push_id": f"tok-{i}", "platform": "ANDROID"} for i in range(AUDIENCE)),
    )
    settings = dataclasses.replace(services.settings, delivery_turn_seconds=0.0)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(services.database, services.clock, HOUR, stop, settings))
    try:
        triggered = await publish(client, workspace, EVENT)
        webhook.hold()  # the large campaign's first requests wait at the receiver
        large = await publish(client, workspace, PUSH)
        assert await asyncio.to_thread(webhook.entered.wait, 30)
        await send_event(client, workspace, "ana", "added_to_cart", product="Boots")
        webhook.release()
        await _until(lambda: _of(webhook, triggered) == ["ana"], "the event-triggered message is sent")
        # It went out while the large campaign still had users to send to ...
        assert len(_of(webhook, large)) < AUDIENCE + 1
        # ... which the worker takes up again at once, to the end.
        await _until(lambda: len(_of(webhook, large)) == AUDIENCE + 1, "the large campaign is sent")
    finally:
        webhook.release()
        stop.set()
        await task
    assert not task.exception()
    assert sorted(_of(webhook, large)) == sorted(["ana", *(f"u{i:04}" for i in range(AUDIENCE))])


@contextlib.asynccontextmanager
async def _beside_a_slow_receiver(
    app: FastAPI, workspace: Tenant, webhook: HttpReceiver, settings: Settings, sent: int = AUDIENCE
) -> AsyncIterator[tuple[HttpReceiver, Tenant]]:
    """`workspace` with `AUDIENCE` users and its push connector at a receiver of its own, another
    workspace with "ana" and its connector at `webhook`, and a worker running (`settings`): the
    receiver (to hold) and the other workspace. On the way out the receiver answers, `sent` of the
    users got a message (all of them unless told), and the worker stops."""
    services: Services = app.state.herald
    slow = start_http_receiver()
    try:
        await push_connector(app, workspace, slow)
        await add_users(
            app,
            workspace.workspace_id,
            *(
                {"customer_id": f"u{i:04}", "push_id": f"tok-{i}", "platform": "ANDROID"}
                for i in range(AUDIENCE)
            ),
        )
        other = await make_tenant(app, rate_limits=OPEN_LIMITS)
        await ready(app, other, webhook, "ana")
        stop = asyncio.Event()
        task = asyncio.create_task(
            worker.run_forever(services.database, services.clock, HOUR, stop, settings)
        )
        try:
            yield slow, other
            slow.release()
            await _until(lambda: len(_users_of(slow)) == sent, "the large campaign is sent")
        finally:
            slow.release()
            stop.set()
            await task
        assert not task.exception()
    finally:
        slow.stop()


@pytest.mark.own_database  # the worker scans every workspace
async def test_an_event_triggered_message_does_not_wait_for_another_workspaces_slow_receiver(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """Another workspace's campaign has windows on the wire at a receiver that does not answer:
    the tick is held until they are answered (or time out), and the worker's event lane sends the
    event-triggered message meanwhile. (`delivery_turn_seconds` as deployed.)"""
    services: Services = app.state.herald
    async with _beside_a_slow_receiver(app, workspace, webhook, services.settings) as (slow, other):
        triggered = await publish(client, other, EVENT)
        slow.hold()  # every request of the large campaign waits at its receiver
        large = await publish(client, workspace, PUSH)
        assert await asyncio.to_thread(slow.entered.wait, 30)
        await send_event(client, other, "ana", "added_to_cart", product="Boots")
        await _until(lambda: _of(webhook, triggered) == ["ana"], "the event-triggered message is sent")
        # Sent while the large campaign's first requests still waited, none answered or timed
        # out (the connector's timeout is 5 s): nobody of it sent, failed or due again.
        [run] = (await stats(client, workspace, large))["executions"]
        assert (run["sent"], run["failed"], run["retrying"]) == (0, 0, 0)


@pytest.mark.own_database  # the worker scans every workspace
async def test_a_campaign_gives_way_between_the_windows_of_a_batch(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """A large campaign's second batch (a whole claim) is on the wire at a slow receiver when
    another workspace publishes: the large one gives way after the windows in hand, its other users
    pending again, and the other campaign is sent before the rest of that batch, not after it."""
    services: Services = app.state.herald
    settings = dataclasses.replace(services.settings, delivery_turn_seconds=0.0)
    async with _beside_a_slow_receiver(app, workspace, webhook, settings) as (slow, other):
        slow.hold()
        large = await publish(client, workspace, PUSH)
        # The first batch (one window) waits at the receiver, and requests of the second.
        share = services.settings.delivery_concurrency // 2
        await _until(lambda: slow.held > share, "the second batch is on the wire")
        small = await publish(client, other, PUSH)
        slow.release()
        await _until(lambda: _of(webhook, small) == ["ana"], "the other workspace's campaign is sent")
        # Sent: the first batch's window, and at most the windows of the second handed over
        # before the publish was seen (two holding the flight's tickets beside the first's, one
        # waiting for one), not the second batch whole (a claim).
        window = 4 * share
        claim = BATCH[services.database.engine.dialect.name]
        assert len(_of(slow, large)) <= window + 3 * window < window + claim
    [run] = (await stats(client, workspace, large))["executions"]
    assert (run["sent"], run["pending"]) == (AUDIENCE, 0)


@pytest.mark.own_database  # the worker scans every workspace
async def test_a_campaign_published_beside_a_large_send_of_its_workspace_starts_within_a_turn(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """The tick a publish wakes moves the new campaign to SENDING, and then gave the large one
    ahead of it (no wake-up during that tick) a turn to its end: the new one's first message came
    after the whole large send. Now it starts first, and campaigns sending side by side take turns."""
    services: Services = app.state.herald
    settings = dataclasses.replace(services.settings, delivery_turn_seconds=0.0)
    async with _beside_a_slow_receiver(app, workspace, webhook, settings) as (slow, _):
        slow.hold()
        large = await publish(client, workspace, PUSH)
        share = services.settings.delivery_concurrency // 2
        await _until(lambda: slow.held > share, "the large campaign's batches on the wire")
        second_body = {**PUSH, "basic_details": {**PUSH["basic_details"], "name": "Second"}}
        second = await publish(client, workspace, second_body)
        slow.release()
        await _until(lambda: len(_of(slow, second)) > 0, "the new campaign's first message")
        assert len(_of(slow, large)) < AUDIENCE
        await _until(lambda: len(_of(slow, second)) == AUDIENCE, "the new campaign is sent")
    for campaign_id in (large, second):
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["pending"]) == (AUDIENCE, 0)


def _users_of(receiver: HttpReceiver) -> set[str]:
    return {r.json()["recipient"]["customer_id"] for r in receiver.received}


@pytest.mark.own_database  # the worker scans every workspace
async def test_a_throttled_campaign_giving_way_gives_its_unsent_grants_back(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """The users of a throttled campaign's batches released when it gives way (the batch in hand
    and the one claimed ahead) give back the sends granted for them: with the clock held still, the
    campaign still sends its whole budget, not the budget less the users released."""
    services: Services = app.state.herald
    settings = dataclasses.replace(services.settings, delivery_turn_seconds=0.0)
    budget = 500
    async with _beside_a_slow_receiver(app, workspace, webhook, settings, sent=budget) as (slow, other):
        slow.hold()
        large = await publish(client, workspace, with_controls(PUSH, campaign_throttle_rpm=budget))
        share = services.settings.delivery_concurrency // 2
        await _until(lambda: slow.held > share, "the second batch is on the wire")
        small = await publish(client, other, PUSH)
        slow.release()
        await _until(lambda: _of(webhook, small) == ["ana"], "the other workspace's campaign is sent")
    assert len(slow.received) == budget  # and no more: the budget of the minute
    [run] = (await stats(client, workspace, large))["executions"]
    assert (run["sent"], run["pending"]) == (budget, AUDIENCE - budget)


async def _shortest_turns(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> tuple[list[str], str]:
    """Turns of one batch (`delivery_turn_seconds` 0), `AUDIENCE` users ready for the receiver, and
    an event-triggered campaign published: the users, and the campaign's id."""
    services: Services = app.state.herald
    services.settings = dataclasses.replace(services.settings, delivery_turn_seconds=0.0)
    customers = [f"u{i:04}" for i in range(AUDIENCE)]
    await ready(app, workspace, webhook, *customers)
    return customers, await publish(client, workspace, EVENT)


async def test_events_left_in_the_inbox_end_a_campaigns_turn(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """More events than one tick takes: the tick that fires the first of them leaves the rest to
    the next one, and the campaign sending meanwhile gives way at the end of its turn (its tick's
    own wake-up came before the turn began, so only knowing what is left can end it)."""
    customers, triggered = await _shortest_turns(app, client, workspace, webhook)
    events = [
        {"type": "event", "customer_id": customers[i % AUDIENCE], "actions": [{"action": "added_to_cart"}]}
        for i in range(INBOX_BATCH + 1)
    ]
    for start in range(0, len(events), 1000):
        await send_transition(client, workspace, events[start : start + 1000])
    large = await publish(client, workspace, PUSH)
    await tick(app, workspace)
    assert len(_of(webhook, triggered)) == INBOX_BATCH
    [run] = (await stats(client, workspace, large))["executions"]
    assert 0 < run["sent"] < AUDIENCE
    assert run["progress"] == round(100 * run["sent"] / AUDIENCE, 1)  # the rest pending
    await tick(app, workspace)
    assert len(_of(webhook, triggered)) == INBOX_BATCH + 1
    assert len(_of(webhook, large)) == AUDIENCE
    [run] = (await stats(client, workspace, large))["executions"]
    assert (run["sent"], run["pending"], run["progress"]) == (AUDIENCE, 0, 100.0)


async def test_a_wake_up_during_an_earlier_turn_ends_the_next_campaigns_turn_too(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """An event stored while the tick's first campaign has its turn is work the tick has not seen
    (it read the inbox before): the second campaign's turn, begun after the wake-up, gives way to
    it as well, instead of sending to its end first."""
    customers, triggered = await _shortest_turns(app, client, workspace, webhook)
    first = await publish(client, workspace, PUSH)
    second_body = {**PUSH, "basic_details": {**PUSH["basic_details"], "name": "Second"}}
    second = await publish(client, workspace, second_body)
    webhook.hold()  # the first campaign's first requests wait at the receiver
    running = asyncio.create_task(tick(app, workspace))
    try:
        assert await asyncio.to_thread(webhook.entered.wait, 30)
        await send_event(client, workspace, customers[0], "added_to_cart", product="Boots")
    finally:
        webhook.release()
    await running
    for campaign_id in (first, second):
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert 0 < run["sent"] < AUDIENCE
    assert _of(webhook, triggered) == []  # stored after the inbox was read: the next tick's
    await tick(app, workspace)
    assert _of(webhook, triggered) == [customers[0]]


async def test_a_business_run_whose_turn_ended_after_its_last_batch_ends_done(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """A second raise while the first run's last batch is on the wire ends that run's turn: its
    dispatch gives way with every user sent, and no user of it is due any more. A later tick
    still takes it up, finds nobody left, and ends it DONE, instead of leaving it DISPATCHING."""
    services: Services = app.state.herald
    services.settings = dataclasses.replace(services.settings, delivery_turn_seconds=0.0)
    await ready(app, workspace, webhook, "ana", "bo")
    campaign_id = await publish(client, workspace, BUSINESS)

    async def raise_it() -> None:
        response = await client.post(
            f"/v1/business-event/{workspace.workspace_id}",
            json={"name": "price_drop", "attributes": {"product": "Boots", "price": 30}},
            headers=workspace.write_headers(),
        )
        assert response.status_code == 202, response.text

    await raise_it()
    webhook.hold()  # the first run's messages wait at the receiver ...
    ticking = asyncio.create_task(tick(app, workspace))
    try:
        assert await asyncio.to_thread(webhook.entered.wait, 30)
        await raise_it()  # ... while a second raise is committed, which wakes the worker
    finally:
        webhook.release()
    await ticking
    [first] = (await stats(client, workspace, campaign_id))["executions"][:1]
    assert (first["sent"], first["pending"]) == (2, 0)
    await tick(app, workspace)
    await tick(app, workspace)
    runs = (await stats(client, workspace, campaign_id))["executions"]
    assert [(r["run"], r["status"], r["sent"]) for r in runs] == [(1, "DONE", 2), (2, "DONE", 2)]


async def test_a_transition_is_logged_before_the_send_it_starts_ends(
    app: FastAPI,
    client: httpx.AsyncClient,
    workspace: Tenant,
    webhook: HttpReceiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The log says a campaign began SENDING while its messages wait at the receiver, not once
    the tick that sends them (minutes, for a large one) is over."""
    await ready(app, workspace, webhook, "ana")
    webhook.hold()
    await publish(client, workspace, PUSH)
    with caplog.at_level(logging.INFO, logger="herald.worker"):
        running = asyncio.create_task(tick(app, workspace))
        try:
            assert await asyncio.to_thread(webhook.entered.wait, 30)
            began = f"campaign {workspace.workspace_id}/"
            assert any(line.startswith(began) and "-> SENDING" in line for line in caplog.messages)
        finally:
            webhook.release()
            await running


@pytest.mark.own_database  # the worker scans every workspace
async def test_a_retry_that_falls_due_during_a_tick_goes_out_at_once(
    app: FastAPI, client: httpx.AsyncClient, webhook: HttpReceiver, clock: FrozenClock
) -> None:
    """A message failed transiently in the tick's first workspace; its retry falls due while the
    tick sends another workspace's event-triggered message (held at its receiver while the clock
    moves past it; nothing wakes the worker meanwhile). The worker ticks again at once and sends
    it, instead of sleeping its poll (an hour here): the next moment due is looked for from the
    tick's start, not its end."""
    services: Services = app.state.herald
    other = start_http_receiver()
    try:
        first, second = sorted(
            [await make_tenant(app, rate_limits=OPEN_LIMITS) for _ in range(2)], key=lambda t: t.workspace_id
        )
        await ready(app, first, webhook, "ana")
        await ready(app, second, other, "bo")
        webhook.status = 503  # transient: attempted again after the retry delay
        failing = await publish(client, first, PUSH)
        triggered = await publish(client, second, EVENT)
        for tenant in (first, second):
            await tick(app, tenant)  # the first attempt fails; the event-triggered campaign runs
        assert _of(webhook, failing) == ["ana"]
        webhook.status = 204
        other.hold()
        await send_event(client, second, "bo", "added_to_cart", product="Boots")
        stop = asyncio.Event()
        task = asyncio.create_task(
            worker.run_forever(services.database, clock, HOUR, stop, services.settings)
        )
        try:
            assert await asyncio.to_thread(other.entered.wait, 30)  # the first workspace's turn is over
            assert _of(webhook, failing) == ["ana"]  # its retry not due yet
            clock.advance(seconds=2 * services.settings.delivery_retry_seconds)
            other.release()
            await _until(lambda: _of(other, triggered) == ["bo"], "the held message is answered")
            await _until(lambda: _of(webhook, failing) == ["ana", "ana"], "the retry is sent")
        finally:
            other.release()
            stop.set()
            await task
        assert not task.exception()
    finally:
        other.stop()


@pytest.mark.own_database  # the worker scans every workspace
async def test_a_worker_started_beside_a_large_send_listens_during_its_first_tick(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    """A worker started while another sends a campaign (a rolling upgrade) joins that send in its
    first tick. It listened for other processes' wake-ups only once that tick ended: its event lane
    heard no event stored by a server until the send was over (3 minutes late)."""
    services: Services = app.state.herald
    if not services.settings.database_url.startswith("postgresql"):
        pytest.skip(
            "its listening shows in PostgreSQL's pg_stat_activity; SQLite's is tested in test_engine_wake.py"
        )
    # Held requests wait out the test's bound below, not the usual 5 s that would end the tick.
    await push_connector(app, workspace, webhook, time_limit=60)
    await add_users(
        app,
        workspace.workspace_id,
        *({"customer_id": f"u{i:04}", "push_id": f"tok-{i}", "platform": "ANDROID"} for i in range(AUDIENCE)),
    )
    webhook.hold()
    await publish(client, workspace, PUSH)
    sending = asyncio.create_task(tick(app, workspace))  # the worker there before: a claim held
    assert await asyncio.to_thread(webhook.entered.wait, 30)
    stop = asyncio.Event()
    task = asyncio.create_task(
        worker.run_forever(services.database, services.clock, HOUR, stop, services.settings)
    )
    listening = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
    )
    try:
        for _ in range(3000):  # a bound against hanging, not a speed assertion
            async with services.database.reader() as session:
                if await session.scalar(listening):
                    break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the worker did not listen during its first tick")
    finally:
        webhook.release()
        stop.set()
        await asyncio.gather(task, sending)
