"""Location- and device-triggered campaigns end to end: position updates and events through
/v1/event, worker ticks on the frozen clock, messages counted at the real HTTP receiver."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from herald.clock import FrozenClock
from herald.delivery.engine import triggers
from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import push_connector
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_send import publish, stats, tick
from tests.delivery.test_engine_triggers import CART, EVENT, ready, send_event, titles, users
from tests.factories import Tenant

# A geofence of 200 m around a shop; HERE is inside it, NEAR 500 m north (outside), FAR elsewhere.
SHOP = (48.8566, 2.3522)
HERE = (48.8570, 2.3525)
NEAR = (48.8611, 2.3522)
FAR = (48.9000, 2.4000)


def fence(triggered_at: str = "ENTRY", **extra: Any) -> dict[str, Any]:
    return {
        "name": "shop",
        "latitude": str(SHOP[0]),
        "longitude": str(SHOP[1]),
        "radius": "200",
        "triggered_at": triggered_at,
        "response_time_value": "10",
        "response_time_granularity": "MINUTES",
        **extra,
    }


def location_body(geofence: dict[str, Any], **controls: Any) -> dict[str, Any]:
    body = copy.deepcopy(EVENT)
    body["campaign_delivery_type"] = "LOCATION_TRIGGERED"
    body["basic_details"] = {"name": "Shop", "platforms": ["ANDROID"], "geofences": [geofence]}
    body["campaign_content"]["content"]["push"]["android"]["basic_details"]["title"] = (
        "{{ event.transition }} {{ event.geofence }}"
    )
    body["trigger_condition"] = {}
    body["delivery_controls"] = {"bypass_dnd": False, **controls}
    return body


def device_body(**controls: Any) -> dict[str, Any]:
    body = copy.deepcopy(EVENT)
    body["campaign_delivery_type"] = "DEVICE_TRIGGERED"
    body["trigger_condition"] = {"included_filters": CART}
    body["delivery_controls"] = {"bypass_dnd": False, **controls}
    return body


async def move(
    client: httpx.AsyncClient, tenant: Tenant, customer_id: str, where: tuple[float, float]
) -> None:
    await send_event(client, tenant, customer_id, "location_update", latitude=where[0], longitude=where[1])


async def moved_at(
    client: httpx.AsyncClient,
    tenant: Tenant,
    customer_id: str,
    where: tuple[float, float],
    at: datetime,
    **attributes: Any,
) -> None:
    """A location update timed `at` (its `current_time`), sent now: late, when `at` is past."""
    update_ = {
        "action": "location_update",
        "attributes": {"latitude": where[0], "longitude": where[1], **attributes},
        "current_time": at.isoformat(),
    }
    response = await client.post(
        f"/v1/event/{tenant.workspace_id}",
        json={"type": "event", "customer_id": customer_id, "actions": [update_]},
        headers=tenant.write_headers(),
    )
    assert response.status_code == 200, response.text


START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


class TestLocationTriggered:
    async def test_entry_fires_once_after_the_response_time_and_outside_does_not(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana", "bo")
        campaign_id = await publish(client, workspace, location_body(fence("ENTRY")))
        assert (await h.get(client, workspace, campaign_id))["status"] == "ACTIVE"
        await move(client, workspace, "bo", NEAR)  # outside: nothing
        await move(client, workspace, "ana", NEAR)
        await move(client, workspace, "ana", HERE)  # entry
        await move(client, workspace, "ana", HERE)  # still inside: no second entry
        await tick(app, workspace)
        clock.advance(minutes=9)
        await tick(app, workspace)
        assert titles(webhook) == []
        clock.advance(minutes=1)  # the response time after the entry
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")]
        await tick(app, workspace)
        assert len(webhook.received) == 1
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["sent"], run["pending"]) == (1, 1, 0)

    async def test_exit_fires_for_an_exit_geofence(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        await publish(client, workspace, location_body(fence("EXIT", response_time_value="0")))
        await move(client, workspace, "ana", HERE)  # entering an EXIT geofence: nothing
        await tick(app, workspace)
        assert titles(webhook) == []
        await move(client, workspace, "ana", FAR)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "EXIT shop")]

    async def test_a_send_limit_of_any_size_is_a_count(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # `send_limit_value` is a whole number written as a string, of any length: read through a
        # float, 400 digits overflowed and stopped every tick of the workspace.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        body = location_body(
            fence("ENTRY", response_time_value="0"),
            send_limit_value="9" * 400,
            send_limit_granularity_in_hours="24",
        )
        await publish(client, workspace, body)
        await move(client, workspace, "ana", HERE)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")]

    async def test_invalid_updates_in_between_do_not_lose_the_last_position(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Updates without a usable position are ignored, however many: the next valid one is
        # compared with the last valid one (inside then inside: no second entry; then an exit).
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        await publish(client, workspace, location_body(fence("ENTRY", response_time_value="0")))
        await move(client, workspace, "ana", HERE)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")]
        for _ in range(30):
            await send_event(client, workspace, "ana", "location_update", latitude="nowhere", longitude=200)
        await move(client, workspace, "ana", HERE)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")]

    async def test_dwell_fires_only_after_the_dwell_time(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana", "bo")
        dwell = fence("dwell", dwell_time_value="30", dwell_time_granularity="MINUTES")
        campaign_id = await publish(client, workspace, location_body(dwell))
        await move(client, workspace, "ana", HERE)
        await move(client, workspace, "bo", HERE)
        await tick(app, workspace)
        clock.advance(minutes=20)
        await move(client, workspace, "bo", FAR)  # bo leaves before the dwell time: never sent
        await tick(app, workspace)
        clock.advance(minutes=19)  # 39 minutes: dwell 30 + response 10 not yet up
        await tick(app, workspace)
        assert titles(webhook) == []
        clock.advance(minutes=1)  # no update from ana since: the tick finds her still inside
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "DWELL shop")]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"]["left_geofence"] == 1

    async def test_an_exit_before_the_dwell_time_cancels_it_even_when_both_arrive_late(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Two updates sent together, after the fact: inside 15 minutes ago, outside 10 minutes ago.
        # The dwell moment (10 minutes after the entry) is past when they arrive, but the user had
        # left before it: nothing is sent.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        dwell = fence(
            "dwell", dwell_time_value="10", dwell_time_granularity="MINUTES", response_time_value="0"
        )
        campaign_id = await publish(client, workspace, location_body(dwell))
        updates = [
            {
                "action": "location_update",
                "attributes": {"latitude": where[0], "longitude": where[1]},
                "current_time": (START - timedelta(minutes=ago)).isoformat(),
            }
            for where, ago in ((HERE, 15), (FAR, 10))
        ]
        response = await client.post(
            f"/v1/event/{workspace.workspace_id}",
            json={"type": "event", "customer_id": "ana", "actions": updates},
            headers=workspace.write_headers(),
        )
        assert response.status_code == 200, response.text
        await tick(app, workspace)
        clock.advance(hours=1)
        await tick(app, workspace)
        assert titles(webhook) == []
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["suppressed"]["left_geofence"]) == (0, 1)

    @pytest.mark.parametrize(
        ("moves", "entries"),
        [
            # inside at 10:00 (an entry, sent), then a late update inside at 09:55: one stay, one
            # entry (the one sent)
            ([(HERE, 0), (HERE, 5)], ["10:00"]),
            # inside at 09:50 (an entry), inside at 10:00, then a late update outside at 09:55: the
            # user left and came back, two entries
            ([(HERE, 10), (HERE, 0), (FAR, 5)], ["09:50", "10:00"]),
            # outside at 10:00, then a late update inside at 09:55: in and out, one entry
            ([(FAR, 0), (HERE, 5)], ["09:55"]),
        ],
    )
    async def test_an_update_sent_late_is_compared_with_the_updates_around_it(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        moves: list[tuple[tuple[float, float], int]],
        entries: list[str],
    ) -> None:
        """Each update, in the order sent (a tick after each), `minutes` before 10:00: the entries
        are those of the updates in their own time order, whatever order they came in."""
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        entry = fence("ENTRY", response_time_value="0")
        body = location_body(entry)
        body["campaign_content"]["content"]["push"]["android"]["basic_details"]["title"] = (
            "{{ event.transition }} {{ event.geofence }} {{ event.time }}"
        )
        campaign_id = await publish(client, workspace, body)
        for where, ago in moves:
            at = START - timedelta(minutes=ago)
            await moved_at(client, workspace, "ana", where, at, time=at.strftime("%H:%M"))
            await tick(app, workspace)
        await tick(app, workspace)
        assert sorted(title.rsplit(" ", 1)[1] for _, title in titles(webhook)) == entries
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["sent"] == len(entries)

    async def test_an_exit_read_before_its_entry_still_cancels_the_dwell(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Updates are not always read in their order: here the exit arrives first (the entry is
        # sent late), as when two workers each take one and the exit's commits first. Read first,
        # the exit has no waiting firing to cancel; the entry's dwell firing, written after it,
        # must still see that the user left before the dwell time was up.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        dwell = fence(
            "dwell", dwell_time_value="10", dwell_time_granularity="MINUTES", response_time_value="0"
        )
        campaign_id = await publish(client, workspace, location_body(dwell))
        for where, ago in ((FAR, 5), (HERE, 10)):  # outside 5 minutes ago, then inside 10 minutes ago
            await moved_at(client, workspace, "ana", where, START - timedelta(minutes=ago))
            await tick(app, workspace)
        clock.advance(hours=1)
        await tick(app, workspace)
        assert titles(webhook) == []
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["suppressed"]["left_geofence"]) == (0, 1)

    async def test_leaving_cancels_a_waiting_dwell_even_once_the_user_no_longer_qualifies(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await push_connector(app, workspace, webhook)
        await users(app, workspace, "ana", vip=True)
        dwell = fence("dwell", dwell_time_value="30", dwell_time_granularity="MINUTES")
        body = location_body(dwell)
        vip = {
            "filter_type": "user_attributes",
            "data_type": "bool",
            "name": "vip",
            "operator": "is",
            "value": True,
        }
        body["trigger_condition"] = {"included_filters": {"filter_operator": "and", "filters": [vip]}}
        campaign_id = await publish(client, workspace, body)
        await move(client, workspace, "ana", HERE)  # a dwell message waits for her
        await tick(app, workspace)
        clock.advance(minutes=10)
        ingested = await client.post(
            f"/v1/customer/{workspace.workspace_id}",
            json={"type": "customer", "customer_id": "ana", "attributes": {"vip": False}},
            headers=workspace.write_headers(),
        )
        assert ingested.status_code == 200, ingested.text
        await move(client, workspace, "ana", FAR)  # she leaves before the dwell time
        await tick(app, workspace)
        clock.advance(hours=2)
        await tick(app, workspace)
        assert titles(webhook) == []
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"]["left_geofence"] == 1

    async def test_a_limited_time_sends_only_within_its_bounds(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # 09:00-17:00 in Paris (UTC+1 in March): an entry at 10:00Z is due at 11:10 in Paris,
        # inside; one at 15:55Z (16:55 in Paris) is due at 17:05 in Paris, after the bound.
        clock.set(START)
        await ready(app, workspace, webhook, "ana", "bo")
        body = location_body(fence("ENTRY"))
        body["scheduling_details"] = {
            **body.get("scheduling_details", {}),
            "timezone": "Europe/Paris",
            "geo_fence_timelimit": {
                "notification_schedule": "LIMITED_TIME",
                "timebounds": [{"start_time": "09:00", "end_time": "17:00"}],
            },
        }
        campaign_id = await publish(client, workspace, body)
        await move(client, workspace, "ana", HERE)
        clock.set(datetime(2026, 3, 2, 15, 55, tzinfo=UTC))
        await move(client, workspace, "bo", HERE)
        await tick(app, workspace)
        clock.advance(hours=1)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"]["outside_time_limit"] == 1

    async def test_the_send_limit_caps_messages_per_window(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        body = location_body(
            fence("ENTRY", response_time_value="0"),
            send_limit_value="2",
            send_limit_granularity_in_hours="24",
        )
        campaign_id = await publish(client, workspace, body)
        for _ in range(3):  # three entries in the day: two messages
            await move(client, workspace, "ana", HERE)
            await tick(app, workspace)
            clock.advance(minutes=5)
            await move(client, workspace, "ana", FAR)
            clock.advance(minutes=5)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")] * 2
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["suppressed"]["send_limit"]) == (2, 1)
        clock.advance(hours=24)  # a new window
        await move(client, workspace, "ana", HERE)
        await tick(app, workspace)
        assert len(webhook.received) == 3

    async def test_two_workers_firing_one_user_at_once_keep_the_send_limit(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Worker A has written the firing of ana's first entry and not committed it yet when
        # worker B reads her second entry (inbox rows are taken with SKIP LOCKED: B takes the
        # ones A does not hold). B must count A's firing against the limit of one, so it waits
        # for A's transaction rather than count without it.
        database = app.state.herald.database
        if database.engine.dialect.name != "postgresql":
            pytest.skip("SQLite has one writing transaction at a time: two firings never overlap")
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        body = location_body(
            fence("ENTRY", response_time_value="0"),
            send_limit_value="1",
            send_limit_granularity_in_hours="24",
        )
        campaign_id = await publish(client, workspace, body)
        written, release = asyncio.Event(), asyncio.Event()
        write = triggers.FiringWrites.write

        async def held_write(self: triggers.FiringWrites, session: Any, now: datetime) -> int:
            count = await write(self, session, now)
            if not written.is_set():  # worker A only: its transaction stays open until released
                written.set()
                await release.wait()
            return count

        monkeypatch.setattr(triggers.FiringWrites, "write", held_write)
        await move(client, workspace, "ana", HERE)
        worker_a = asyncio.create_task(tick(app, workspace))
        await written.wait()
        await move(client, workspace, "ana", FAR)
        await move(client, workspace, "ana", HERE)
        worker_b = asyncio.create_task(tick(app, workspace))

        async def someone_waits_for_a_lock() -> bool:
            async with database.reader() as session:
                waiting = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                )
            return bool(waiting)

        # B either finished (it did not wait for A) or waits for A's lock: then let A commit.
        while not worker_b.done() and not await someone_waits_for_a_lock():
            await asyncio.wait([worker_b], timeout=0.01)
        release.set()
        await asyncio.gather(worker_a, worker_b)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "ENTRY shop")]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["suppressed"]["send_limit"]) == (1, 1)

    async def test_users_outside_the_audience_do_not_fire(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana", "bo")
        body = location_body(fence("ENTRY", response_time_value="0"))
        body["segmentation_details"] = {
            "is_all_user_campaign": True,
            "excluded_filters": {
                "filter_operator": "and",
                "filters": [
                    {
                        "filter_type": "user_attributes",
                        "data_type": "string",
                        "name": "customer_id",
                        "operator": "is",
                        "value": "bo",
                    }
                ],
            },
        }
        await publish(client, workspace, body)
        await move(client, workspace, "ana", HERE)
        await move(client, workspace, "bo", HERE)
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["ana"]


class TestDeviceTriggered:
    async def test_fires_on_a_matching_event_and_keeps_the_max_time_to_show(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        campaign_id = await publish(
            client, workspace, device_body(max_time_to_show_message_of_same_camapign="4")
        )
        assert (await h.get(client, workspace, campaign_id))["status"] == "ACTIVE"
        await send_event(client, workspace, "ana", "viewed_page")  # not the awaited action
        await send_event(client, workspace, "ana", "added_to_cart", product="Boots")
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "Still want Boots?")]
        clock.advance(hours=3)  # within 4 hours of the last message: dropped
        await send_event(client, workspace, "ana", "added_to_cart", product="Hat")
        await tick(app, workspace)
        assert len(webhook.received) == 1
        clock.advance(hours=1)
        await send_event(client, workspace, "ana", "added_to_cart", product="Cap")
        await tick(app, workspace)
        assert titles(webhook)[1:] == [("ana", "Still want Cap?")]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["suppressed"]["minimum_delay"]) == (2, 1)

    async def test_an_event_older_than_the_sync_data_expiry_does_not_fire(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana", "bo")
        await publish(client, workspace, device_body(expiry_time_of_sync_data_in_hour="2"))
        for customer_id, at in (("ana", "2026-03-02T07:00:00Z"), ("bo", "2026-03-02T09:00:00Z")):
            body = {
                "type": "event",
                "customer_id": customer_id,
                "actions": [{"action": "added_to_cart", "current_time": at}],
            }
            response = await client.post(
                f"/v1/event/{workspace.workspace_id}", json=body, headers=workspace.write_headers()
            )
            assert response.status_code == 200, response.text
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["bo"]  # ana's event is 3 hours old

    async def test_expiry_ends_the_campaign_and_its_waiting_firings(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        body = location_body(fence("ENTRY", response_time_value="30"))
        body["scheduling_details"] = {"expiry_time": "2026-03-02T11:00:00Z"}
        campaign_id = await publish(client, workspace, body)
        clock.set(datetime(2026, 3, 2, 10, 45, tzinfo=UTC))
        await move(client, workspace, "ana", HERE)  # due 11:15, after the expiry
        await tick(app, workspace)
        clock.set(datetime(2026, 3, 2, 11, 20, tzinfo=UTC))
        await tick(app, workspace)
        await tick(app, workspace)
        assert titles(webhook) == []
        assert (await h.get(client, workspace, campaign_id))["status"] == "SENT"
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["status"] == "STOPPED"
