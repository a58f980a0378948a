"""Delivery controls end to end: workspace settings set with the CLI, a published campaign, worker
ticks on the frozen clock, messages counted at a real HTTP receiver or SMTP server."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from typer.testing import CliRunner

from herald.campaigns import worker
from herald.cli import app as cli_app
from herald.clock import FrozenClock
from herald.config import Settings
from herald.delivery.dispatch import Dispatcher
from herald.delivery.engine import controls
from herald.delivery.engine import tick as engine_tick
from herald.delivery.engine.resolve import start_execution
from herald.delivery.engine.run import BATCH, delivery_id
from herald.delivery.engine.split import in_global_control
from herald.delivery.engine.throttle import open_store
from herald.delivery.models import OutboxEntry
from herald.services import Services
from tests.campaigns import lifecycle_helpers as h
from tests.conftest import PG_URL, REDIS_URL
from tests.delivery.builders import create_campaign, push_connector, smtp_connector
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.delivery.test_engine_send import EMAIL, PUSH, publish, stats, status, tick
from tests.delivery.test_engine_wake import _until
from tests.factories import Tenant, make_tenant
from tests.http.test_dependency_outage import ANSWERED_WITHIN, peer

runner = CliRunner()


async def herald(settings: Settings, *args: str, ok: bool = True) -> str:
    """Run the `herald` CLI against the test database (in a thread: it runs its own event loop)."""
    result = await asyncio.to_thread(
        runner.invoke, cli_app, list(args), env={"HERALD_DATABASE_URL": settings.database_url}
    )
    assert (result.exit_code == 0) is ok, result.output
    return result.output


def with_controls(body: dict[str, Any], **controls: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["delivery_controls"] = controls
    return body


def receivers(webhook: HttpReceiver) -> list[str]:
    return sorted(r.json()["recipient"]["customer_id"] for r in webhook.received)


async def push_users(app: FastAPI, workspace: Tenant, count: int, **extra: Any) -> list[str]:
    ids = [f"u{i:03d}" for i in range(count)]
    await add_users(
        app,
        workspace.workspace_id,
        *({"customer_id": c, "push_id": f"tok-{c}", "platform": "ANDROID", **extra} for c in ids),
    )
    return ids


class TestSettingsCli:
    async def test_settings_are_validated_and_shown(self, settings: Settings, workspace: Tenant) -> None:
        ws = workspace.workspace_id
        await herald(settings, "workspaces", "set", "-w", ws, "global-control", "5")
        await herald(settings, "workspaces", "set", "-w", ws, "dnd", "22:00-08:00")
        await herald(settings, "workspaces", "set", "-w", ws, "frequency-cap-day", "3")
        await herald(settings, "workspaces", "set", "-w", ws, "timezone", "Europe/Paris")
        for key, value in [
            ("global-control", "101"),
            ("dnd", "25:00-08:00"),
            ("dnd", "22:00"),
            ("frequency-cap-week", "0"),
            ("timezone", "Mars/Olympus"),
            ("colour", "blue"),
        ]:
            assert "error" in await herald(settings, "workspaces", "set", "-w", ws, key, value, ok=False)
        await herald(settings, "workspaces", "set", "-w", ws, "frequency-cap-day", "off")
        shown = await herald(settings, "workspaces", "settings", "-w", ws)
        assert shown.splitlines() == [
            "global-control\t5",
            "frequency-cap-day\toff",
            "frequency-cap-week\toff",
            "dnd\t22:00-08:00",
            "timezone\tEurope/Paris",
            "minimum-delay\toff",
        ]


class TestGlobalControl:
    async def test_the_same_users_are_held_out_of_every_campaign_that_takes_part(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 60)
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "global-control", "30")
        held = {u for u in users if in_global_control(workspace.workspace_id, u, 30)}
        assert 0 < len(held) < 60
        taking_part = copy.deepcopy(PUSH)
        taking_part["control_group_details"] = {"is_global_control_group_enabled": True}
        first = await publish(client, workspace, taking_part)
        await tick(app, workspace)
        assert set(receivers(webhook)) == set(users) - held
        webhook.reset()
        second = await publish(client, workspace, taking_part)
        await tick(app, workspace)
        assert set(receivers(webhook)) == set(users) - held  # the same users, another campaign
        webhook.reset()
        await publish(client, workspace, PUSH)  # not taking part: everybody
        await tick(app, workspace)
        assert receivers(webhook) == users
        for campaign_id in (first, second):
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert run["held_out"] == {"control_group": 0, "global_control": len(held)}
            assert run["sent"] == 60 - len(held)

    async def test_the_campaign_control_group_is_a_share_of_the_users_left(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 40)
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "global-control", "50")
        held = {u for u in users if in_global_control(workspace.workspace_id, u, 50)}
        body = copy.deepcopy(PUSH)
        body["control_group_details"] = {
            "is_global_control_group_enabled": True,
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 50,
        }
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        left = 40 - len(held)
        control = int(left * 0.5 + 0.5)
        assert run["held_out"] == {"control_group": control, "global_control": len(held)}
        assert run["sent"] == left - control
        assert not set(receivers(webhook)) & held


def _throttle_settings(settings: Settings, store: str) -> Settings:
    if store == "redis":
        if not REDIS_URL:
            pytest.skip("HERALD_TEST_REDIS_URL is not set")
        return dataclasses.replace(settings, redis_url=REDIS_URL)
    return settings


async def _throttled(
    app: FastAPI,
    client: httpx.AsyncClient,
    engine_settings: Settings,
    workspace: Tenant,
    webhook: HttpReceiver,
    clock: FrozenClock,
    users: int,
    rpm: int,
) -> tuple[str, Callable[[], Awaitable[int]]]:
    """A campaign of `rpm` to `users` users, published: its id, and a tick of the worker."""
    services: Services = app.state.herald
    await push_connector(app, workspace, webhook)
    await push_users(app, workspace, users)
    campaign_id = await publish(client, workspace, with_controls(PUSH, campaign_throttle_rpm=rpm))

    async def worker_tick() -> int:
        return await worker.run_tick(
            services.database, clock.now(), [workspace.workspace_id], engine_settings
        )

    return campaign_id, worker_tick


class TestThrottle:
    @pytest.mark.parametrize("store", ["database", "redis"])
    async def test_any_60_seconds_hold_at_most_the_budget(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        store: str,
    ) -> None:
        clock.set(datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC))
        campaign_id, worker_tick = await _throttled(
            app, client, _throttle_settings(settings, store), workspace, webhook, clock, 12, 5
        )
        # Two workers at once share one budget.
        await asyncio.gather(worker_tick(), worker_tick())
        assert len(webhook.received) == 5
        clock.advance(seconds=20)  # still 10:00
        await worker_tick()
        assert len(webhook.received) == 5
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["pending"]) == (5, 7)
        assert await status(client, workspace, campaign_id) == "SENDING"
        clock.advance(seconds=10)  # 10:01:00: a new clock minute, yet 5 went out 30 seconds ago
        await asyncio.gather(worker_tick(), worker_tick())
        assert len(webhook.received) == 5
        clock.advance(seconds=30, microseconds=999_999)  # a grant counts for 61 s (`throttle.WINDOW`)
        await worker_tick()
        assert len(webhook.received) == 5
        clock.advance(microseconds=1)  # 10:01:31: the first grant left the window
        await asyncio.gather(worker_tick(), worker_tick())
        assert len(webhook.received) == 10
        clock.advance(seconds=61)
        await worker_tick()
        assert len(webhook.received) == 12
        assert len(set(receivers(webhook))) == 12
        assert await status(client, workspace, campaign_id) == "SENT"

    @pytest.mark.parametrize("store", ["database", "redis"])
    async def test_a_clock_moved_back_does_not_count_the_grants_of_its_future(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        store: str,
    ) -> None:
        # A sandbox's clock moved back an hour: the minute's grant lies in its future. The rest of
        # the audience waited for the clock to pass it again (an hour and a minute).
        clock.set(datetime(2026, 3, 2, 10, 0, 0, tzinfo=UTC))
        campaign_id, worker_tick = await _throttled(
            app, client, _throttle_settings(settings, store), workspace, webhook, clock, 4, 2
        )
        await worker_tick()
        assert len(webhook.received) == 2
        clock.set(datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC))
        await worker_tick()
        assert len(webhook.received) == 4
        assert await status(client, workspace, campaign_id) == "SENT"

    @pytest.mark.parametrize("store", ["database", "redis"])
    async def test_sends_that_go_out_late_count_from_when_they_go_out(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        store: str,
    ) -> None:
        # One request at a time, and the receiver stalls on the first for 5 s: the minute's other
        # sends go out at 10:00:05. They counted from the grant at 10:00:00, so the next minute's
        # went out at 10:01:01, and a receiver counting arrivals saw twice the rpm within 60 s.
        engine_settings = dataclasses.replace(_throttle_settings(settings, store), delivery_concurrency=1)
        services: Services = app.state.herald
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 12)
        clock.set(datetime(2026, 3, 2, 10, 0, 0, tzinfo=UTC))
        campaign_id = await publish(client, workspace, with_controls(PUSH, campaign_throttle_rpm=5))

        async def worker_tick() -> None:
            # On the test's clock, as a worker's dispatch is on the process's: it sees the stall.
            await worker.run_tick(
                services.database, clock.now(), [workspace.workspace_id], engine_settings, clock=clock
            )

        webhook.hold()
        ticking = asyncio.create_task(worker_tick())
        assert await asyncio.to_thread(webhook.entered.wait, 30)
        clock.advance(seconds=5)
        webhook.release()
        await ticking
        assert len(webhook.received) == 5  # one at 10:00:00, four at 10:00:05
        clock.set(datetime(2026, 3, 2, 10, 1, 1, tzinfo=UTC))  # the grant of 10:00:00 left the window
        await worker_tick()
        assert len(webhook.received) == 6  # only the one sent at 10:00:00 is out of the last 60 s
        clock.set(datetime(2026, 3, 2, 10, 1, 6, tzinfo=UTC))  # those sent at 10:00:05 too
        await worker_tick()
        assert len(webhook.received) == 10
        clock.advance(seconds=61)
        await worker_tick()
        assert len(set(receivers(webhook))) == len(webhook.received) == 12
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_a_redis_that_never_answers_fails_the_claim_and_the_other_campaigns_go_on(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Redis accepts the connection and never answers (stopped, say). The throttle's client had
        # no bound: the worker waited for as long as Redis was stopped, holding the throttled
        # campaign's row, and every other worker waited for that row.
        services: Services = app.state.herald
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 3)
        clock.set(datetime(2026, 3, 2, 10, 0, 0, tzinfo=UTC))
        throttled_id = await publish(client, workspace, with_controls(PUSH, campaign_throttle_rpm=5))
        free_id = await publish(client, workspace, PUSH)
        async with peer() as silent:
            engine_settings = dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{silent.port}/0")
            ticked = worker.run_tick(
                services.database, clock.now(), [workspace.workspace_id], engine_settings
            )
            await asyncio.wait_for(ticked, ANSWERED_WITHIN)
            assert silent.accepted
        assert (await stats(client, workspace, free_id))["executions"][0]["sent"] == 3
        [run] = (await stats(client, workspace, throttled_id))["executions"]
        assert (run["sent"], run["pending"]) == (0, 3)
        await tick(app, workspace)  # Redis gone from the settings: the database's grants
        assert len(webhook.received) == 6

    async def test_retries_take_from_the_minute_budget(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 3)
        clock.set(datetime(2026, 3, 2, 10, 0, 0, tzinfo=UTC))
        webhook.status = 503
        campaign_id = await publish(client, workspace, with_controls(PUSH, campaign_throttle_rpm=3))
        await tick(app, workspace)
        assert len(webhook.received) == 3  # the minute's budget, all failed transiently
        webhook.status = 204
        clock.advance(seconds=30)  # the retries are due, still in 10:00
        await tick(app, workspace)
        assert len(webhook.received) == 3
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["retrying"], run["sent"]) == (3, 0)
        clock.advance(seconds=31)  # 10:01:01: the first grant left the window (61 s)
        await tick(app, workspace)
        assert len(webhook.received) == 6
        assert await status(client, workspace, campaign_id) == "SENT"


class TestFrequencyCaps:
    async def test_a_user_at_the_cap_is_suppressed_unless_the_campaign_ignores_caps(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 3)
        ws = workspace.workspace_id
        await herald(settings, "workspaces", "set", "-w", ws, "frequency-cap-day", "1")
        await herald(settings, "workspaces", "set", "-w", ws, "frequency-cap-week", "2")
        # Not counted: a campaign that does not count toward the caps.
        await publish(client, workspace, with_controls(PUSH, count_for_frequency_capping=False))
        await tick(app, workspace)
        counted = with_controls(PUSH, count_for_frequency_capping=True)
        await publish(client, workspace, counted)
        await tick(app, workspace)
        assert len(webhook.received) == 6
        webhook.reset()
        capped = await publish(client, workspace, counted)
        await tick(app, workspace)
        assert webhook.received == []
        assert await status(client, workspace, capped) == "SENT"
        [run] = (await stats(client, workspace, capped))["executions"]
        assert (run["sent"], run["suppressed"]["frequency_cap"]) == (0, 3)
        await publish(client, workspace, with_controls(PUSH, ignore_frequency_capping=True))
        await tick(app, workspace)
        assert receivers(webhook) == users
        webhook.reset()
        clock.advance(hours=25)  # a new day: one more this week
        await publish(client, workspace, counted)
        await tick(app, workspace)
        assert receivers(webhook) == users
        webhook.reset()
        clock.advance(hours=25)  # another day, but two this week already
        week_capped = await publish(client, workspace, counted)
        await tick(app, workspace)
        assert webhook.received == []
        [run] = (await stats(client, workspace, week_capped))["executions"]
        assert run["suppressed"]["frequency_cap"] == 3
        clock.advance(days=6)  # the first counted message left the week
        await publish(client, workspace, counted)
        await tick(app, workspace)
        assert receivers(webhook) == users

    async def test_a_message_counts_from_when_it_was_sent_and_not_before(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Sent on its retry an hour after its first attempt: a day after that attempt, the day's
        # cap still counts it (from its send; counted from its row's first moment, it let the next
        # campaign through), and a sandbox's clock moved back before the send does not count it.
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 2)
        ws = workspace.workspace_id
        await herald(settings, "workspaces", "set", "-w", ws, "frequency-cap-day", "1")
        counted = with_controls(PUSH, count_for_frequency_capping=True)
        started = clock.now()
        webhook.status = 503
        webhook.answer_headers = {"Retry-After": "3600"}
        await publish(client, workspace, counted)
        await tick(app, workspace)
        webhook.reset()
        webhook.status, webhook.answer_headers = 204, {}
        clock.advance(hours=1)
        await tick(app, workspace)
        assert receivers(webhook) == users
        webhook.reset()
        clock.advance(hours=23, minutes=1)  # a day after the first attempt, 23 hours after the send
        capped = await publish(client, workspace, counted)
        await tick(app, workspace)
        assert webhook.received == []
        [run] = (await stats(client, workspace, capped))["executions"]
        assert run["suppressed"]["frequency_cap"] == 2
        clock.set(started)  # back before the send: nothing sent in the day before now
        await publish(client, workspace, counted)
        await tick(app, workspace)
        assert receivers(webhook) == users

    async def test_a_send_to_several_of_a_users_devices_counts_once(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        """The caps count sends, as the messages being sent count: a campaign's messages to one
        user's Android and iOS devices are one. (Counted by outbox row, a user with two devices
        was at a cap of 2 after one campaign once it was sent, and under it while it was sent.)"""
        await push_connector(app, workspace, webhook)
        ids = await push_users(app, workspace, 2)
        await add_users(
            app,
            workspace.workspace_id,
            *({"customer_id": c, "push_id": f"ios-{c}", "platform": "IOS"} for c in ids),
        )
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "frequency-cap-day", "2")
        counted = with_controls(PUSH, count_for_frequency_capping=True)
        await publish(client, workspace, counted)
        await tick(app, workspace)
        assert len(webhook.received) == 4  # each user on both devices
        webhook.reset()
        await publish(client, workspace, counted)
        await tick(app, workspace)
        assert len(webhook.received) == 4  # the second send of the day
        webhook.reset()
        capped = await publish(client, workspace, counted)
        await tick(app, workspace)
        assert webhook.received == []
        [run] = (await stats(client, workspace, capped))["executions"]
        assert run["suppressed"]["frequency_cap"] == 2

    @pytest.mark.skipif(not PG_URL, reason="claims run side by side on PostgreSQL (SQLite has one writer)")
    async def test_two_campaigns_claiming_the_same_users_at_once_stay_within_the_cap(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Two workers sending two capped campaigns: the first worker's claim for the first campaign is
        held open after its users were decided, and the second worker's claim for the second runs
        meanwhile. It must not decide
        on a history that misses the users the first is about to commit as CLAIMED."""
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 5)
        ws = workspace.workspace_id
        await herald(settings, "workspaces", "set", "-w", ws, "frequency-cap-day", "1")
        counted = with_controls(PUSH, count_for_frequency_capping=True)
        first = await publish(client, workspace, counted)
        second = await publish(client, workspace, counted)
        decided, release = asyncio.Event(), asyncio.Event()
        decide = controls.decide

        async def held_decide(*args: Any, **kwargs: Any) -> controls.Decision:
            decision = await decide(*args, **kwargs)
            if args[3].campaign_id == first and not decided.is_set():
                decided.set()  # the first claim's transaction stays open until released
                await release.wait()
            return decision

        monkeypatch.setattr(controls, "decide", held_decide)
        services: Services = app.state.herald
        database, now = services.database, clock.now()

        async def send_one(campaign_id: str) -> None:
            """One campaign's part of another worker's tick (SENDING since the first tick began)."""
            campaigns, _ = await engine_tick._sending(database, ws)
            [campaign] = [c for c in campaigns if c.campaign_id == campaign_id]
            lease = timedelta(seconds=settings.delivery_lease_seconds)
            async with (
                Dispatcher(settings, FrozenClock(now), database) as dispatcher,
                open_store(settings) as store,
            ):
                execution = await start_execution(database, campaign, now, 1, None)
                await engine_tick._run_one(database, dispatcher, store, campaign, execution, now, lease)

        async def waiting_on_a_lock() -> bool:
            async with database.reader() as session:
                found = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                )
                return bool(found)

        sending_first = asyncio.create_task(tick(app, workspace))  # the first campaign's claim, held
        await decided.wait()
        sending_second = asyncio.create_task(send_one(second))
        # The second claim either finishes (deciding without the first's users) or waits its turn.
        while not await waiting_on_a_lock():
            finished, _ = await asyncio.wait({sending_second}, timeout=0.01)
            if finished:
                break
        release.set()
        await asyncio.gather(sending_first, sending_second)
        assert receivers(webhook) == users  # each user once: the cap is one a day
        [run] = (await stats(client, workspace, second))["executions"]
        assert (run["sent"], run["suppressed"]["frequency_cap"]) == (0, 5)


class TestQuietHours:
    async def test_a_user_in_the_window_is_deferred_to_its_end(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        ws = workspace.workspace_id
        await add_users(
            app,
            ws,
            {"customer_id": "paris", "push_id": "t1", "platform": "ANDROID", "timezone": "Europe/Paris"},
            {"customer_id": "tokyo", "push_id": "t2", "platform": "ANDROID", "timezone": "Asia/Tokyo"},
            {"customer_id": "nowhere", "push_id": "t3", "platform": "ANDROID"},  # workspace default
        )
        clock.set(datetime(2026, 3, 2, 22, 30, tzinfo=UTC))  # Paris 23:30, Tokyo 07:30 (+1 day)
        campaign_id = await publish(client, workspace, PUSH)  # no window yet: everybody at once
        await tick(app, workspace)
        assert len(webhook.received) == 3
        webhook.reset()
        await herald(settings, "workspaces", "set", "-w", ws, "dnd", "22:00-08:00")
        await herald(settings, "workspaces", "set", "-w", ws, "timezone", "America/New_York")  # 17:30
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert receivers(webhook) == ["nowhere"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["pending"], run["deferred"]) == (1, 2, 2)
        assert await status(client, workspace, campaign_id) == "SENDING"
        clock.set(datetime(2026, 3, 2, 23, 0, tzinfo=UTC))  # Tokyo 08:00: its window is over
        await tick(app, workspace)
        assert receivers(webhook) == ["nowhere", "tokyo"]
        clock.set(datetime(2026, 3, 3, 6, 59, tzinfo=UTC))  # Paris 07:59
        await tick(app, workspace)
        assert len(webhook.received) == 2
        clock.set(datetime(2026, 3, 3, 7, 0, tzinfo=UTC))  # Paris 08:00
        await tick(app, workspace)
        assert receivers(webhook) == ["nowhere", "paris", "tokyo"]
        assert await status(client, workspace, campaign_id) == "SENT"
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["pending"], run["deferred"]) == (3, 0, 0)

    async def test_quiet_hours_set_while_a_send_goes_on_apply_from_its_next_batch(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        settings: Settings,
    ) -> None:
        # A send that lasts to its end has no next tick: the settings were read once, when it
        # began, and quiet hours set a minute into it let every later batch through.
        await push_connector(app, workspace, webhook)
        ws = workspace.workspace_id
        services: Services = app.state.herald
        claim = BATCH[services.database.engine.dialect.name]
        first_window = 300  # at most: the dispatch's first batch is one window of users
        users = sorted(await push_users(app, workspace, 3 * claim + first_window))
        clock.set(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
        campaign_id = await publish(client, workspace, PUSH)
        webhook.hold()
        ticking = asyncio.create_task(tick(app, workspace))
        try:
            await _until(lambda: webhook.held > 0, "the first batch on the wire")
            await herald(settings, "workspaces", "set", "-w", ws, "dnd", "11:00-13:00")
        finally:
            webhook.release()
            await ticking
        # The first batch (one window) and the batches claimed ahead before the change went out;
        # before, everybody did.
        sent = len(webhook.received)
        assert 0 < sent <= first_window + 2 * claim
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["deferred"], run["pending"]) == (sent, len(users) - sent, len(users) - sent)
        clock.set(datetime(2026, 3, 2, 13, 0, tzinfo=UTC))  # the window is over
        await tick(app, workspace)
        assert sorted(receivers(webhook)) == users
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_a_change_of_the_quiet_hours_releases_the_users_they_deferred(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        settings: Settings,
    ) -> None:
        # Settings are read at each tick: users deferred to the end of a window turned off (or
        # moved) used to wait for the old window's end all the same.
        await push_connector(app, workspace, webhook)
        ws = workspace.workspace_id
        await add_users(
            app,
            ws,
            {"customer_id": "paris", "push_id": "t1", "platform": "ANDROID", "timezone": "Europe/Paris"},
            {"customer_id": "tokyo", "push_id": "t2", "platform": "ANDROID", "timezone": "Asia/Tokyo"},
        )
        clock.set(datetime(2026, 3, 2, 22, 30, tzinfo=UTC))  # Paris 23:30, Tokyo 07:30 (+1 day)
        await herald(settings, "workspaces", "set", "-w", ws, "dnd", "22:00-08:00")
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert webhook.received == []
        await herald(settings, "workspaces", "set", "-w", ws, "dnd", "23:45-08:00")  # Paris: outside now
        await tick(app, workspace)
        assert receivers(webhook) == ["paris"]  # Tokyo is still inside the new window
        await herald(settings, "workspaces", "set", "-w", ws, "dnd", "off")
        await tick(app, workspace)
        assert receivers(webhook) == ["paris", "tokyo"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["pending"], run["deferred"]) == (2, 0, 0)

    async def test_bypass_dnd_sends_at_once_and_a_window_past_expiry_drops_the_user(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 2)
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "dnd", "22:00-08:00")
        clock.set(datetime(2026, 3, 2, 23, 0, tzinfo=UTC))
        await publish(client, workspace, with_controls(PUSH, bypass_dnd=True))
        await tick(app, workspace)
        assert len(webhook.received) == 2
        webhook.reset()
        expiring = copy.deepcopy(PUSH)
        expiring["scheduling_details"]["expiry_time"] = "2026-03-03T06:00:00Z"
        campaign_id = await publish(client, workspace, expiring)
        await tick(app, workspace)
        assert webhook.received == []
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["pending"], run["suppressed"]["dnd"]) == (0, 0, 2)

    @pytest.mark.parametrize(("expiry", "dropped"), [("2026-03-03T15:00:00", 2), ("2026-03-03T18:00:00", 0)])
    async def test_an_expiry_without_zone_is_read_in_the_campaign_timezone(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        expiry: str,
        dropped: int,
    ) -> None:
        # 15:00 in Tokyo is 06:00Z, before the window's end (08:00 UTC, the workspace default):
        # the users are dropped. 18:00 in Tokyo is 09:00Z: they wait for 08:00. Each tick goes on to
        # the workspace's other campaign (a zoneless expiry once failed the whole tick).
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 2)
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "dnd", "22:00-08:00")
        clock.set(datetime(2026, 3, 2, 23, 0, tzinfo=UTC))
        expiring = copy.deepcopy(PUSH)
        expiring["scheduling_details"] |= {"expiry_time": expiry, "timezone": "Asia/Tokyo"}
        campaign_id = await publish(client, workspace, expiring)
        other = await publish(client, workspace, with_controls(PUSH, bypass_dnd=True))
        await tick(app, workspace)
        assert len(webhook.received) == 2
        assert await status(client, workspace, other) == "SENT"
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["pending"], run["suppressed"]["dnd"]) == (2 - dropped, dropped)
        clock.set(datetime(2026, 3, 3, 8, 0, tzinfo=UTC))
        await tick(app, workspace)
        assert len(webhook.received) == 4 - dropped


class TestMinimumDelay:
    async def test_a_user_sent_this_campaign_recently_waits_out_the_delay(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        clock: FrozenClock,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "ana", "email": "ana@example.com"},
            {"customer_id": "bo", "email": "bo@example.com"},
        )
        body = with_controls(EMAIL, minimum_delay_between_two_notification_in_hour=3)
        campaign_id = await create_campaign(client, workspace, copy.deepcopy(body))
        # Ana got a message of this campaign an hour ago (an earlier run).
        await _sent_before(app, workspace, campaign_id, "ana", clock.now() - timedelta(hours=1))
        await h.publish(client, workspace, campaign_id)
        await tick(app, workspace)
        assert [m.rcpt_tos for m in smtp_server.received] == [["bo@example.com"]]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["deferred"]) == (1, 1)
        clock.advance(hours=1, minutes=59)
        await tick(app, workspace)
        assert len(smtp_server.received) == 1
        clock.advance(minutes=1)  # three hours after Ana's last message
        await tick(app, workspace)
        assert [m.rcpt_tos for m in smtp_server.received] == [["bo@example.com"], ["ana@example.com"]]
        assert await status(client, workspace, campaign_id) == "SENT"


async def _sent_before(
    app: FastAPI, workspace: Tenant, campaign_id: str, customer_id: str, at: datetime
) -> None:
    """A live message of the campaign already in the outbox (as an earlier run leaves it)."""
    services: Services = app.state.herald
    async with services.database.writer() as session:
        session.add(
            OutboxEntry(
                workspace_id=workspace.workspace_id,
                id=delivery_id("earlier-run", customer_id, "EMAIL"),
                status="SENT",
                is_test=False,
                channel="EMAIL",
                locale="default",
                variation="1",
                recipient=f"{customer_id}@example.com",
                customer_id=customer_id,
                campaign_id=campaign_id,
                summary={},
                created_at=at,
                updated_at=at,
            )
        )
        await session.commit()


class TestAudienceLimit:
    async def test_the_limit_counts_messages_sent_not_failures(
        self, app: FastAPI, client: httpx.AsyncClient, smtp_server: SmtpServer
    ) -> None:
        workspace = await make_tenant(
            app, features={"campaign_audience_limit": True}, rate_limits=OPEN_LIMITS
        )
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        users = [{"customer_id": f"u{i}", "email": f"u{i}@example.com", "count": 1} for i in range(5)]
        # Seven users whose message cannot be rendered: they fail, and leave the limit's room to the
        # five others, whatever the order the ranks give.
        users += [{"customer_id": f"x{i}", "email": f"x{i}@example.com", "count": 10**9} for i in range(7)]
        await add_users(app, workspace.workspace_id, *users)
        body = copy.deepcopy(EMAIL)
        body["campaign_content"]["content"]["email"]["html_content"] = (
            "{% for i in range(user.count) %}x{% endfor %}"
        )
        body["campaign_audience_limit"] = {
            "is_campaign_audience_limit_enabled": True,
            "metric": "SENT",
            "frequency": "TOTAL",
            "limit": 5,
        }
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert len(smtp_server.received) == 5
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["sent"] == 5
        assert run["sent"] + run["failed"] + run["suppressed"]["audience_limit"] == 12
