"""Conversions end to end: a published campaign with goals sent by worker ticks on the frozen clock
to a real HTTP receiver, the users' events ingested through /v1/event, /v1/transition and
`herald audience import`, and the figures read from GET /v5/campaigns/{id}/stats and the CLI."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.audience import service as audience_service
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import Database
from herald.delivery.engine import conversions as attribution
from herald.delivery.engine.models import Conversion, Execution
from herald.delivery.engine.split import in_global_control
from herald.ids import object_id
from herald.timefmt import rfc3339
from tests.conftest import PG_URL
from tests.delivery.builders import push_connector
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_controls import herald, push_users
from tests.delivery.test_engine_send import PUSH, publish, stats, tick
from tests.delivery.test_engine_triggers import EVENT
from tests.factories import Tenant, make_tenant

PURCHASE = {
    "goal_name": "Purchase",
    "goal_event_name": "Order Completed",
    "goal_event_attribute": {
        "name": "order_value",
        "condition": "greaterThan",
        "data_type": "DOUBLE",
        "value": "10",
    },
    "is_primary_goal": True,
    "revenue_attribute": "order_value",
    "revenue_currency": "EUR",
}
OPENED = {"goal_name": "Open", "goal_event_name": "App Opened", "is_primary_goal": False}


def with_goals(*goals: dict[str, Any], hours: int = 24, body: dict[str, Any] = PUSH) -> dict[str, Any]:
    found = copy.deepcopy(body)
    found["basic_details"]["platforms"] = ["ANDROID"]
    found["campaign_content"]["content"]["push"].pop("ios", None)
    found["conversion_goal_details"] = {"attribution_window_in_hours": hours, "goals": list(goals)}
    return found


def with_variations(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    android = body["campaign_content"]["content"]["push"]["android"]
    body["campaign_content"] = {
        "variation_details": {
            "distribution_type": "MANUAL",
            "no_of_variations": 2,
            "manual_distribution_percentage": {"variation_1": 50, "variation_2": 50},
        },
        "content": {
            "default": {
                "variation_1": {"push": {"android": android}},
                "variation_2": {
                    "push": {"android": {**android, "basic_details": {"title": "B", "message": "B"}}}
                },
            }
        },
    }
    return body


async def event(
    client: httpx.AsyncClient, tenant: Tenant, customer_id: str, *actions: dict[str, Any]
) -> None:
    response = await client.post(
        f"/v1/event/{tenant.workspace_id}",
        json={"type": "event", "customer_id": customer_id, "actions": list(actions)},
        headers=tenant.headers(),
    )
    assert response.status_code < 300, response.text


def order(value: Any, **extra: Any) -> dict[str, Any]:
    return {"action": "Order Completed", "attributes": {"order_value": value}, **extra}


def opened() -> dict[str, Any]:
    return {"action": "App Opened", "attributes": {}}


async def transition(
    client: httpx.AsyncClient, tenant: Tenant, events: list[tuple[str, dict[str, Any]]]
) -> None:
    elements = [{"type": "event", "customer_id": c, "actions": [action]} for c, action in events]
    response = await client.post(
        f"/v1/transition/{tenant.workspace_id}",
        json={"type": "transition", "elements": elements},
        headers=tenant.headers(),
    )
    assert response.status_code < 300, response.text


async def conversions(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str) -> dict[str, Any]:
    [run] = (await stats(client, tenant, campaign_id))["executions"]
    found: dict[str, Any] = run["conversions"]
    return found


def sent_to(webhook: HttpReceiver) -> dict[str, str]:
    """customer id -> the variation of the message it received."""
    return {r.json()["recipient"]["customer_id"]: r.json()["variation"] for r in webhook.received}


class TestSentUsers:
    async def test_a_goal_event_in_the_window_converts_once_with_its_revenue(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 5)
        campaign_id = await publish(client, workspace, with_goals(PURCHASE, OPENED, hours=24))
        await tick(app, workspace)
        assert len(webhook.received) == 5
        figures = await conversions(client, workspace, campaign_id)
        assert figures["sent"]["users"] == 5
        assert figures["sent"]["conversions"] == 0
        clock.advance(hours=1)
        # Two matching events (separate requests): one conversion, the first event's revenue.
        await event(client, workspace, users[0], order(50))
        await event(client, workspace, users[0], order(70))
        await event(client, workspace, users[1], order(30.5))
        await event(client, workspace, users[2], order(5))  # the attribute condition is not met
        await event(client, workspace, users[3], order("99"))  # a string is no number: no match
        await event(client, workspace, users[0], opened())  # another goal: a conversion of its own
        figures = await conversions(client, workspace, campaign_id)
        assert figures["goals"] == ["Purchase", "Open"]
        assert figures["attribution_window_in_hours"] == 24
        assert figures["sent"] == {
            "users": 5,
            "converted_users": 2,
            "conversions": 3,
            "revenue": 80.5,
            "conversion_rate": 0.4,
            "uplift": None,  # no control group
        }
        assert figures["control"]["users"] == 0
        assert figures["control"]["conversion_rate"] is None
        assert [v["variation"] for v in figures["variations"]] == ["variation_1"]
        assert figures["variations"][0]["conversions"] == 3
        # The window is [sent, sent + 24 h): at 25 h after the send nothing converts any more.
        clock.advance(hours=24)
        await event(client, workspace, users[4], order(40))
        await event(
            client, workspace, users[4], order(40, current_time=rfc3339(clock.now() - timedelta(hours=2)))
        )
        figures = await conversions(client, workspace, campaign_id)
        assert figures["sent"]["conversions"] == 4  # the event timed 23 h after the send counts
        assert figures["sent"]["revenue"] == 120.5

    async def test_events_before_the_send_do_not_convert_and_imports_inside_the_window_do(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        tmp_path: Path,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 3)
        await event(client, workspace, users[0], opened())  # before any send
        clock.advance(minutes=1)
        campaign_id = await publish(client, workspace, with_goals(OPENED, hours=2))
        await tick(app, workspace)
        assert (await conversions(client, workspace, campaign_id))["sent"]["conversions"] == 0
        sent = clock.now()
        clock.advance(hours=5)
        lines = [
            {
                "customer_id": users[1],
                "action": "App Opened",
                "occurred_at": rfc3339(sent + timedelta(hours=1)),
            },
            {
                "customer_id": users[2],
                "action": "App Opened",
                "occurred_at": rfc3339(sent + timedelta(hours=3)),
            },
        ]
        (tmp_path / "users.jsonl").write_text("")
        (tmp_path / "events.jsonl").write_text(
            "\n".join(orjson.dumps(line).decode() for line in lines) + "\n"
        )
        await herald(
            settings,
            "audience",
            "import",
            str(tmp_path / "users.jsonl"),
            str(tmp_path / "events.jsonl"),
            "-w",
            workspace.workspace_id,
            "--no-progress",
        )
        figures = await conversions(client, workspace, campaign_id)
        assert (figures["sent"]["converted_users"], figures["sent"]["conversions"]) == (1, 1)


class TestExactlyOnce:
    async def test_concurrent_requests_with_the_same_goal_event_convert_once(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # On PostgreSQL the requests run in transactions side by side; the conversions' primary
        # key leaves one row whatever their interleaving.
        await push_connector(app, workspace, webhook)
        [user] = await push_users(app, workspace, 1)
        campaign_id = await publish(client, workspace, with_goals(PURCHASE))
        await tick(app, workspace)
        clock.advance(minutes=5)
        await asyncio.gather(*(event(client, workspace, user, order(20 + i)) for i in range(8)))
        figures = await conversions(client, workspace, campaign_id)
        assert (figures["sent"]["conversions"], figures["sent"]["converted_users"]) == (1, 1)
        assert figures["sent"]["revenue"] in {20.0 + i for i in range(8)}


class TestControlGroups:
    async def test_control_users_convert_from_when_they_were_held_out_and_uplift_is_per_variation(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 40)
        body = with_variations(with_goals(OPENED))
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 25,
        }
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        received = sent_to(webhook)
        control = sorted(set(users) - set(received))
        first = sorted(c for c, v in received.items() if v == "variation_1")
        second = sorted(c for c, v in received.items() if v == "variation_2")
        assert (len(control), len(first), len(second)) == (10, 15, 15)
        clock.advance(minutes=30)
        converting = control[:2] + first[:6] + second[:3]
        await transition(client, workspace, [(c, opened()) for c in converting])
        await transition(client, workspace, [(c, opened()) for c in converting])  # again: still once each
        figures = await conversions(client, workspace, campaign_id)
        assert figures["control"] == {
            "users": 10,
            "converted_users": 2,
            "conversions": 2,
            "revenue": 0.0,
            "conversion_rate": 0.2,
        }
        by_name = {v["variation"]: v for v in figures["variations"]}
        assert (by_name["variation_1"]["users"], by_name["variation_1"]["conversions"]) == (15, 6)
        assert (by_name["variation_2"]["users"], by_name["variation_2"]["conversions"]) == (15, 3)
        assert by_name["variation_1"]["conversion_rate"] == pytest.approx(0.4)
        assert by_name["variation_1"]["uplift"] == pytest.approx(1.0)  # (0.4 - 0.2) / 0.2
        assert by_name["variation_2"]["uplift"] == pytest.approx(0.0)  # (0.2 - 0.2) / 0.2
        assert figures["sent"]["conversion_rate"] == pytest.approx(0.3)
        assert figures["sent"]["uplift"] == pytest.approx(0.5)
        table = await herald(
            app.state.herald.settings, "campaigns", "stats", campaign_id, "-w", workspace.workspace_id
        )
        assert "conversions variation_1: uplift" in table
        assert "1.0000" in table
        # The rate's numerator is shown too: a reader checks 0.2 = 2 / 10 from the table alone.
        shown = dict(line.rsplit(None, 1) for line in table.splitlines() if line.startswith("conversions "))
        assert (shown["conversions control: converted_users"], shown["conversions control: users"]) == (
            "2",
            "10",
        )

    async def test_global_control_users_count_as_control(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 30)
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "global-control", "30")
        held = sorted(u for u in users if in_global_control(workspace.workspace_id, u, 30))
        assert 0 < len(held) < 30
        body = with_goals(OPENED)
        body["control_group_details"] = {"is_global_control_group_enabled": True}
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        received = sorted(sent_to(webhook))
        assert received == sorted(set(users) - set(held))
        await transition(client, workspace, [(c, opened()) for c in [*held, *received[:1]]])
        figures = await conversions(client, workspace, campaign_id)
        assert (figures["control"]["users"], figures["control"]["converted_users"]) == (len(held), len(held))
        assert figures["control"]["conversion_rate"] == 1.0
        assert figures["sent"]["converted_users"] == 1
        assert figures["sent"]["uplift"] == pytest.approx(1 / len(received) - 1)

    async def test_with_a_send_time_of_their_own_control_users_are_held_out_at_it(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # 09:00 in each user's timezone: Los Angeles at 17:00 UTC; Kiritimati's 09:00 (19:00 UTC
        # the day before) has passed when the campaign is published, so its users are never sent.
        await push_connector(app, workspace, webhook)
        la = await push_users(app, workspace, 16, timezone="America/Los_Angeles")
        kiritimati = [f"k{i}" for i in range(8)]
        await add_users(
            app,
            workspace.workspace_id,
            *(
                {
                    "customer_id": c,
                    "push_id": f"tok-{c}",
                    "platform": "ANDROID",
                    "timezone": "Pacific/Kiritimati",
                }
                for c in kiritimati
            ),
        )
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "global-control", "25")
        body = with_goals(OPENED, hours=2)
        body["scheduling_details"] = {
            "delivery_type": "SEND_IN_USER_TIMEZONE",
            "start_time": "2026-03-02T09:00:00",
            "timezone": "UTC",
            "user_timezone_details": {
                "send_in_user_timezone": True,
                "send_if_user_timezone_has_passed": False,
            },
        }
        body["control_group_details"] = {
            "is_global_control_group_enabled": True,
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 25,
        }
        clock.set(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
        campaign_id = await publish(client, workspace, body)
        clock.set(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        await tick(app, workspace)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        # Nobody is held out before their moment, and a user who would never have been sent is
        # not a control user: the two groups are alike but for the message.
        assert run["held_out"] == {"control_group": 0, "global_control": 0}
        assert run["suppressed"]["timezone_passed"] == len(kiritimati)
        clock.set(datetime(2026, 3, 2, 16, 0, tzinfo=UTC))
        await transition(client, workspace, [(c, opened()) for c in la])  # before anyone's window
        clock.set(datetime(2026, 3, 2, 17, 0, tzinfo=UTC))
        await tick(app, workspace)
        held = sorted(set(la) - set(sent_to(webhook)))
        global_held = [c for c in la if in_global_control(workspace.workspace_id, c, 25)]
        assert held
        assert set(global_held) <= set(held)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["held_out"]["global_control"] == len(global_held)
        assert sum(run["held_out"].values()) == len(held)
        # Their windows opened at 17:00, as the sent users' did: an event an hour later converts.
        clock.set(datetime(2026, 3, 2, 18, 0, tzinfo=UTC))
        await transition(client, workspace, [(c, opened()) for c in la])
        figures = await conversions(client, workspace, campaign_id)
        assert figures["control"]["users"] == len(held)
        assert figures["control"]["converted_users"] == len(held)
        assert figures["sent"]["converted_users"] == len(la) - len(held)


class TestTriggeredCampaigns:
    async def test_each_message_opens_a_window_of_its_own_and_an_event_counts_for_the_latest(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await push_connector(app, workspace, webhook)
        [user] = await push_users(app, workspace, 1)
        campaign_id = await publish(client, workspace, with_goals(PURCHASE, hours=24, body=EVENT))
        await event(client, workspace, user, {"action": "added_to_cart", "attributes": {}})
        await tick(app, workspace)
        clock.advance(days=3)  # the first message's window closed with no purchase
        await event(client, workspace, user, {"action": "added_to_cart", "attributes": {}})
        await tick(app, workspace)
        clock.advance(minutes=10)
        await event(client, workspace, user, order(40))
        figures = await conversions(client, workspace, campaign_id)
        assert (figures["sent"]["conversions"], figures["sent"]["revenue"]) == (1, 40.0)
        # Two more messages within a day: a purchase after both counts once, for the later one,
        # and the user converts again (each message has its goal once), still one user.
        clock.advance(days=3)
        for _ in range(2):
            await event(client, workspace, user, {"action": "added_to_cart", "attributes": {}})
            await tick(app, workspace)
            clock.advance(minutes=5)
        await event(client, workspace, user, order(60))
        assert len(webhook.received) == 4
        figures = await conversions(client, workspace, campaign_id)
        assert figures["sent"]["users"] == 1
        assert figures["sent"]["converted_users"] == 1
        assert (figures["sent"]["conversions"], figures["sent"]["revenue"]) == (2, 100.0)

    async def test_control_users_of_a_triggered_campaign_convert_from_their_firing(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # A firing held out (campaign control group) opens its window as a sent one does: the
        # control side of the uplift. Its own triggering event is not its conversion.
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 20)
        body = with_goals(OPENED, hours=24, body=EVENT)
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 50,
        }
        campaign_id = await publish(client, workspace, body)
        await transition(
            client, workspace, [(u, {"action": "added_to_cart", "attributes": {}}) for u in users]
        )
        await tick(app, workspace)
        received = set(sent_to(webhook))
        control = sorted(set(users) - received)
        assert 0 < len(control) < 20
        figures = await conversions(client, workspace, campaign_id)
        assert (figures["control"]["users"], figures["control"]["converted_users"]) == (len(control), 0)
        clock.advance(minutes=30)
        await transition(client, workspace, [(u, opened()) for u in control[:3]])
        figures = await conversions(client, workspace, campaign_id)
        assert (figures["control"]["users"], figures["control"]["converted_users"]) == (len(control), 3)
        assert figures["control"]["conversion_rate"] == pytest.approx(3 / len(control))
        assert figures["sent"]["uplift"] == pytest.approx(-1.0)  # no sent user converted

    async def test_a_firing_without_its_anchor_holds_nobody_out(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # BEFORE an anchor the event lacks, or one already past: no message would ever go, to a
        # control user either, so the control side gets no user and no conversion from it.
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 20)
        body = with_goals(OPENED, hours=24, body=EVENT)
        body["trigger_condition"] = {
            **body["trigger_condition"],
            "trigger_delay_type": "DELAY",
            "trigger_delay_value": 1,
            "trigger_delay_granularity": "HOURS",
            "trigger_relation": "BEFORE",
            "trigger_attr": {"name": "departure"},
        }
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 50,
        }
        campaign_id = await publish(client, workspace, body)
        past = rfc3339(clock.now() - timedelta(hours=1))
        await transition(
            client,
            workspace,
            [
                (u, {"action": "added_to_cart", "attributes": {"departure": past} if i % 2 else {}})
                for i, u in enumerate(users)
            ],
        )
        await tick(app, workspace)
        clock.advance(minutes=30)
        await transition(client, workspace, [(u, opened()) for u in users])
        await tick(app, workspace)
        assert webhook.received == []
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["suppressed"]["trigger_time"]) == (20, 20)
        assert run["held_out"] == {"control_group": 0, "global_control": 0}
        figures = run["conversions"]
        assert (figures["control"]["users"], figures["control"]["conversions"]) == (0, 0)
        assert (figures["sent"]["users"], figures["sent"]["conversions"]) == (0, 0)

    async def test_the_event_that_fired_a_message_is_not_its_conversion(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        clock: FrozenClock,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # A thank-you message for a purchase, whose goal is a purchase: on the frozen clock the
        # triggering purchase and the send share their instant; only a later purchase converts.
        await push_connector(app, workspace, webhook)
        [user] = await push_users(app, workspace, 1)
        body = with_goals(PURCHASE, hours=24, body=EVENT)
        body["trigger_condition"]["included_filters"] = {
            "filter_operator": "and",
            "filters": [{"filter_type": "actions", "action_name": "Order Completed"}],
        }
        campaign_id = await publish(client, workspace, body)
        await event(client, workspace, user, order(50))
        await tick(app, workspace)
        assert len(webhook.received) == 1
        assert (await conversions(client, workspace, campaign_id))["sent"]["conversions"] == 0


class TestIsolation:
    async def test_events_of_another_workspace_never_convert(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        other = await make_tenant(app, rate_limits=OPEN_LIMITS)
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 2)
        await push_users(app, other, 2)  # the same customer ids
        campaign_id = await publish(client, workspace, with_goals(OPENED))
        await tick(app, workspace)
        await transition(client, other, [(c, opened()) for c in users])
        assert (await conversions(client, workspace, campaign_id))["sent"]["conversions"] == 0
        await event(client, workspace, users[0], opened())
        assert (await conversions(client, workspace, campaign_id))["sent"]["conversions"] == 1
        response = await client.get(
            f"/v5/campaigns/{campaign_id}/stats", headers=other.headers(campaigns=True)
        )
        assert response.status_code == 404

    async def test_a_campaign_without_goals_has_no_conversions_block(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 1)
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["conversions"] is None


# --- side by side (PostgreSQL) -----------------------------------------------------------------

SIDE_BY_SIDE = pytest.mark.skipif(
    not PG_URL, reason="transactions side by side on PostgreSQL (SQLite has one writer)"
)


async def _pid(connection: AsyncConnection) -> int:
    return int(await connection.scalar(text("SELECT pg_backend_pid()")) or 0)


async def _waits_for_a_lock(database: Database, pid: int) -> bool:
    async with database.reader() as session:
        found = await session.scalar(
            text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        )
    return found == "Lock"


async def _advisory_locks(database: Database, pid: int) -> list[tuple[int, bool]]:
    """(key, granted) of the advisory locks of backend `pid`: a 64-bit key is classid:objid."""
    async with database.reader() as session:
        rows = await session.execute(
            text(
                "SELECT classid::bigint, objid::bigint, granted FROM pg_locks"
                " WHERE pid = :pid AND locktype = 'advisory'"
            ),
            {"pid": pid},
        )
        found = []
        for high, low, granted in rows.all():
            key = (int(high) << 32) | int(low)
            found.append((key - (1 << 64) if key >= 1 << 63 else key, bool(granted)))
    return sorted(found)


async def _alongside(
    database: Database,
    holding: Callable[[], Awaitable[Any]],
    pid: asyncio.Future[int],
    second: asyncio.Task[Any],
) -> None:
    """Let `second` run while the first transaction is held open, until it ends or waits for a lock
    (the first's turn), then commit the first (`holding`) and let the second finish."""
    try:
        waiting = await asyncio.wait_for(pid, timeout=60)
        while not second.done() and not await _waits_for_a_lock(database, waiting):
            await asyncio.wait([second], timeout=0.01)
        await holding()
        await asyncio.wait_for(second, timeout=60)  # a safety net: the second never waits for more
    finally:
        if not second.done():
            second.cancel()


class TestSideBySide:
    """A user's window opened by the engine and the user's goal event stored by an ingestion, in two
    transactions at once: whichever reads second must see the other's write, whatever the order."""

    @staticmethod
    async def _ready(
        app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver, *, windows: bool
    ) -> tuple[Database, attribution.Opening, datetime]:
        await push_connector(app, workspace, webhook)
        body = with_goals(OPENED)
        campaign_id = await publish(client, workspace, body)
        database: Database = app.state.herald.database
        now = app.state.herald.clock.now()
        execution = Execution(workspace_id=workspace.workspace_id, id=object_id(now), campaign_id=campaign_id)
        details = attribution.goals_of(body)
        assert details is not None
        if windows:  # another user's window, committed: the workspace has windows
            async with database.engine.begin() as connection:
                elsewhere = attribution.Opening(execution, details, [("elsewhere", None, None, "")], now)
                await attribution.open_windows(connection, [elsewhere])
        return database, attribution.Opening(execution, details, [("ana", None, None, "")], now), now

    @staticmethod
    async def _converted(database: Database, workspace_id: str) -> int:
        async with database.reader() as session:
            found = await session.scalar(
                select(func.count())
                .select_from(Conversion)
                .where(Conversion.workspace_id == workspace_id, Conversion.customer_id == "ana")
            )
        return int(found or 0)

    @SIDE_BY_SIDE
    @pytest.mark.parametrize("windows", [True, False], ids=["windows", "first-window"])
    async def test_an_event_stored_while_its_window_opens_converts(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver, windows: bool
    ) -> None:
        # The engine has opened ana's window and read her events (none yet), and not committed,
        # when her goal event is ingested. The ingestion must wait for the engine's commit and see
        # the window (before, it read the windows at once, found none, and nobody counted it).
        database, opening, now = await self._ready(app, client, workspace, webhook, windows=windows)
        ws = workspace.workspace_id
        pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def ingest() -> None:
            async with database.writer() as session:
                pid.set_result(await _pid(await session.connection()))
                raw = {"type": "event", "customer_id": "ana", "actions": [opened()]}
                await audience_service.ingest_event(session, ws, raw, now + timedelta(minutes=1))
                await session.commit()

        async with database.engine.connect() as engine:
            await engine.begin()
            await attribution.open_windows(engine, [opening])
            await _alongside(database, engine.commit, pid, asyncio.create_task(ingest()))
        assert await self._converted(database, ws) == 1

    @SIDE_BY_SIDE
    @pytest.mark.parametrize("windows", [True, False], ids=["windows", "first-window"])
    async def test_a_window_opened_while_its_event_is_stored_converts(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver, windows: bool
    ) -> None:
        # The other order: ana's goal event is stored and her windows read (none yet), not
        # committed, when the engine opens her window. The engine must wait for the ingestion's
        # commit and see the event (before, it read her events at once, found none, and nobody
        # counted it).
        database, opening, now = await self._ready(app, client, workspace, webhook, windows=windows)
        ws = workspace.workspace_id
        pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def open_window() -> None:
            async with database.engine.begin() as engine:
                pid.set_result(await _pid(engine))
                await attribution.open_windows(engine, [opening])

        async with database.writer() as session:
            raw = {"type": "event", "customer_id": "ana", "actions": [opened()]}
            await audience_service.ingest_event(session, ws, raw, now + timedelta(minutes=1))
            await _alongside(database, session.commit, pid, asyncio.create_task(open_window()))
        assert await self._converted(database, ws) == 1

    @SIDE_BY_SIDE
    async def test_turns_are_taken_in_key_order_and_only_where_there_are_windows(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        database, opening, now = await self._ready(app, client, workspace, webhook, windows=False)
        ws = workspace.workspace_id
        users = [f"user-{n}" for n in range(40)]
        raw = {
            "type": "transition",
            "elements": [{"type": "event", "customer_id": c, "actions": [opened()]} for c in users],
        }
        # No window in the workspace: ingestion takes no turn at all.
        async with database.writer() as session:
            await audience_service.ingest_transition(session, ws, raw, now)
            assert await _advisory_locks(database, await _pid(await session.connection())) == []
            await session.commit()
        async with database.engine.begin() as connection:
            await attribution.open_windows(connection, [opening])
        keys = attribution._keys(ws, users)
        assert len(keys) > 3
        # With windows, it takes its users' keys (shared) in key order: holding one of the middle
        # keys, it has taken those below it, and waits for that one before taking the others.
        middle = keys[len(keys) // 2]
        async with database.engine.begin() as holder:
            await holder.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": middle})
            pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

            async def ingest() -> None:
                async with database.writer() as session:
                    pid.set_result(await _pid(await session.connection()))
                    await audience_service.ingest_transition(session, ws, raw, now)
                    await session.commit()

            task = asyncio.create_task(ingest())
            try:
                waiting = await asyncio.wait_for(pid, timeout=60)
                while not task.done() and not await _waits_for_a_lock(database, waiting):
                    await asyncio.wait([task], timeout=0.01)
                assert not task.done()
                assert await _advisory_locks(database, waiting) == [
                    *((key, True) for key in keys if key < middle),
                    (middle, False),
                ]
            finally:
                await holder.commit()
                await asyncio.wait_for(task, timeout=60)
