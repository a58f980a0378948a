"""Location-triggered campaigns whatever the order and batching of a user's position updates:
the crossings are those of the updates in their own time order, each counted once. Updates through
/v1/event (several in one request, timed by `current_time`), worker ticks on the frozen clock,
messages counted at the real HTTP receiver."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.clock import FrozenClock
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_location import FAR, HERE, NEAR, START, fence, location_body
from tests.delivery.test_engine_send import publish, stats, tick
from tests.delivery.test_engine_triggers import ready, titles
from tests.factories import Tenant

DWELL = timedelta(minutes=10)


def ago(**delta: float) -> datetime:
    return START - timedelta(**delta)


def at_once(name: str, triggered_at: str, **extra: Any) -> dict[str, Any]:
    """A geofence around the shop firing at once (no response time)."""
    return fence(triggered_at, name=name, response_time_value="0", **extra)


async def publish_each(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, str]:
    """An ENTRY, an EXIT and a 10-minute dwell campaign on the same geofence (each its own fence
    name, so a message's title tells which fired), and an ENTRY campaign capped at 2 a day."""
    dwell = at_once("stay", "dwell", dwell_time_value="10", dwell_time_granularity="MINUTES")
    capped = location_body(
        at_once("capped", "ENTRY"), send_limit_value="2", send_limit_granularity_in_hours="24"
    )
    return {
        "ENTRY": await publish(client, tenant, location_body(at_once("in", "ENTRY"))),
        "EXIT": await publish(client, tenant, location_body(at_once("out", "EXIT"))),
        "DWELL": await publish(client, tenant, location_body(dwell)),
        "CAPPED": await publish(client, tenant, capped),
    }


async def updates_in_one_request(
    client: httpx.AsyncClient,
    tenant: Tenant,
    customer_id: str,
    updates: list[tuple[tuple[float, float], datetime]],
) -> None:
    """Position updates, each timed by its `current_time`, in one POST /v1/event."""
    actions = [
        {
            "action": "location_update",
            "attributes": {"latitude": where[0], "longitude": where[1]},
            "current_time": at.isoformat(),
        }
        for where, at in updates
    ]
    response = await client.post(
        f"/v1/event/{tenant.workspace_id}",
        json={"type": "event", "customer_id": customer_id, "actions": actions},
        headers=tenant.write_headers(),
    )
    assert response.status_code == 200, response.text


def received(webhook: HttpReceiver) -> dict[str, Counter[str]]:
    """Each customer's messages: how many of each title ("ENTRY in", "EXIT out", "DWELL stay",
    "ENTRY capped")."""
    found: dict[str, Counter[str]] = {}
    for customer_id, title in titles(webhook):
        found.setdefault(customer_id, Counter())[title] += 1
    return found


class TestArrivalOrder:
    async def test_an_old_update_batched_with_an_exit_loses_neither_the_exit_nor_the_dwell_cancel(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Outside 30 s ago, inside 20 s ago: an entry, sent. Then one request with a late update far
        # away 190 s ago and one outside 10 s ago. In time order: far, out, in, out: the user
        # entered and left 10 s later. The two were compared with each other only (far, then out:
        # no crossing), as if adjacent: the exit was lost and the dwell message went out.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        campaigns = await publish_each(client, workspace)
        await updates_in_one_request(
            client, workspace, "ana", [(NEAR, ago(seconds=30)), (HERE, ago(seconds=20))]
        )
        await tick(app, workspace)
        await updates_in_one_request(
            client, workspace, "ana", [(FAR, ago(seconds=190)), (NEAR, ago(seconds=10))]
        )
        await tick(app, workspace)
        clock.advance(seconds=700)
        await tick(app, workspace)
        assert received(webhook) == {"ana": Counter({"ENTRY in": 1, "ENTRY capped": 1, "EXIT out": 1})}
        [run] = (await stats(client, workspace, campaigns["DWELL"]))["executions"]
        assert (run["sent"], run["suppressed"]["left_geofence"]) == (0, 1)

    async def test_an_old_update_batched_with_one_inside_fires_no_second_entry_for_the_stay(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Outside 30 s ago, inside 20 s ago: an entry. Then one request: far away 40 s ago, inside
        # 10 s ago. In time order: out, out, in, in: one stay, one entry.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        await publish_each(client, workspace)
        await updates_in_one_request(
            client, workspace, "ana", [(NEAR, ago(seconds=30)), (HERE, ago(seconds=20))]
        )
        await tick(app, workspace)
        await updates_in_one_request(
            client, workspace, "ana", [(FAR, ago(seconds=40)), (HERE, ago(seconds=10))]
        )
        await tick(app, workspace)
        clock.advance(hours=1)
        await tick(app, workspace)
        assert received(webhook) == {"ana": Counter({"ENTRY in": 1, "ENTRY capped": 1, "DWELL stay": 1})}

    async def test_a_late_exit_cancels_only_the_dwell_of_the_stay_it_ends(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Inside 3 minutes ago: a dwell message waits for 7 minutes from now. Then, late: inside
        # 8 minutes ago and outside 5 minutes ago, a stay that ended before the one going on began.
        # Leaving at 5 minutes ago cancels that earlier stay's dwell, not the later one's.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        campaigns = await publish_each(client, workspace)
        await updates_in_one_request(client, workspace, "ana", [(HERE, ago(minutes=3))])
        await tick(app, workspace)
        await updates_in_one_request(
            client, workspace, "ana", [(HERE, ago(minutes=8)), (NEAR, ago(minutes=5))]
        )
        await tick(app, workspace)
        clock.advance(hours=1)
        await tick(app, workspace)
        assert received(webhook)["ana"]["DWELL stay"] == 1
        [run] = (await stats(client, workspace, campaigns["DWELL"]))["executions"]
        assert (run["sent"], run["suppressed"]["left_geofence"]) == (1, 1)

    async def test_a_re_entry_fires_at_an_update_whose_entry_moved_earlier(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Inside 2 minutes ago: an entry, sent (its firing keyed by that update). Late, inside 6
        # minutes ago: the stay began then, nothing more. Late again, outside 4 minutes ago: the
        # user left and came back, so the update 2 minutes ago is a re-entry and fires, though its
        # update already keys the first entry's firing.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        await publish_each(client, workspace)
        for where, minutes in ((HERE, 2), (HERE, 6), (NEAR, 4)):
            await updates_in_one_request(client, workspace, "ana", [(where, ago(minutes=minutes))])
            await tick(app, workspace)
        await tick(app, workspace)
        assert received(webhook) == {"ana": Counter({"ENTRY in": 2, "ENTRY capped": 2, "EXIT out": 1})}

    @pytest.mark.parametrize("left_at", [None, 1], ids=["stays", "leaves-1-minute-ago"])
    async def test_a_late_update_that_moves_the_entry_earlier_moves_the_stays_dwell_with_it(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        left_at: int | None,
    ) -> None:
        # Inside 4 minutes ago: the stay's dwell message waits until 6 minutes from now. Then a late
        # update inside 12 minutes ago: the stay began then, and its dwell moment is 2 minutes ago.
        # One dwell message for the stay, not one per update that was the first inside as read;
        # and a user seen leaving 1 minute ago had stayed the 10 minutes: it is sent all the same.
        clock.set(START)
        await ready(app, workspace, webhook, "ana")
        campaigns = await publish_each(client, workspace)
        await updates_in_one_request(client, workspace, "ana", [(HERE, ago(minutes=4))])
        await tick(app, workspace)
        if left_at is not None:
            await updates_in_one_request(client, workspace, "ana", [(NEAR, ago(minutes=left_at))])
            await tick(app, workspace)
        await updates_in_one_request(client, workspace, "ana", [(HERE, ago(minutes=12))])
        await tick(app, workspace)
        assert received(webhook)["ana"]["DWELL stay"] == 1  # due 2 minutes ago: at once
        clock.advance(hours=1)
        await tick(app, workspace)
        assert received(webhook)["ana"]["DWELL stay"] == 1
        assert received(webhook)["ana"]["ENTRY in"] == 1
        [run] = (await stats(client, workspace, campaigns["DWELL"]))["executions"]
        assert (run["audience"], run["sent"], run["suppressed"].get("left_geofence", 0)) == (1, 1, 0)


@dataclass(frozen=True)
class Update:
    where: tuple[float, float]
    at: datetime


def expected(updates: list[Update]) -> Counter[str]:
    """The messages of `updates` read in their time order (no position before them: outside)."""
    found: Counter[str] = Counter()
    entered: datetime | None = None
    for update_ in sorted(updates, key=lambda u: u.at):
        inside = update_.where == HERE
        if inside and entered is None:
            entered = update_.at
            found["ENTRY in"] += 1
        elif not inside and entered is not None:
            found["EXIT out"] += 1
            found["DWELL stay"] += update_.at >= entered + DWELL  # it stayed the dwell time
            entered = None
    if entered is not None:
        found["DWELL stay"] += 1
    found["ENTRY capped"] = min(found["ENTRY in"], 2)
    return +found  # no zero counts


def random_updates(rng: random.Random) -> list[Update]:
    """4 to 10 updates at distinct times on a 30-second grid from 9.5 minutes ago to 4.5 minutes
    ahead (no further ahead than ingestion takes): every dwell moment (an entry + 10 minutes) is
    after now, so no dwell message goes before every update has arrived, whatever their order,
    while stays longer and shorter than the dwell time both occur."""
    steps = sorted(rng.sample(range(29), rng.randint(4, 10)))
    return [
        Update(rng.choice([HERE, HERE, NEAR, FAR]), START + timedelta(seconds=30 * step - 570))
        for step in steps
    ]


class TestArrivalOrderProperty:
    @pytest.mark.parametrize("seed", range(3))
    async def test_any_order_and_batching_sends_what_the_time_order_sends(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        seed: int,
    ) -> None:
        """For random update sequences: one user sends them in time order, one request and one
        tick each; others send them shuffled, in requests of 1 to 3 updates, with two workers
        ticking at once after some requests only (so one worker batch may hold several requests).
        Every user gets the messages the sequence has in time order."""
        rng = random.Random(seed)
        clock.set(START)
        sequences = {f"s{n}": random_updates(rng) for n in range(5)}
        arrivals = ["in-order", "shuffled-1", "shuffled-2", "shuffled-3"]
        await ready(app, workspace, webhook, *(f"{s}-{a}" for s in sequences for a in arrivals))
        await publish_each(client, workspace)

        async def workers() -> None:
            await asyncio.gather(tick(app, workspace), tick(app, workspace))

        for name, updates in sequences.items():
            for update_ in updates:
                await updates_in_one_request(
                    client, workspace, f"{name}-in-order", [(update_.where, update_.at)]
                )
                await workers()
            for arrival in arrivals[1:]:
                shuffled = rng.sample(updates, len(updates))
                while shuffled:
                    size = rng.randint(1, 3)
                    request, shuffled = shuffled[:size], shuffled[size:]
                    await updates_in_one_request(
                        client, workspace, f"{name}-{arrival}", [(u.where, u.at) for u in request]
                    )
                    if rng.random() < 0.5:
                        await workers()
                await workers()
        clock.advance(hours=1)
        await workers()
        await workers()
        got = received(webhook)
        for name, updates in sequences.items():
            for arrival in arrivals:
                assert (name, arrival, got.get(f"{name}-{arrival}", Counter())) == (
                    name,
                    arrival,
                    expected(updates),
                )
