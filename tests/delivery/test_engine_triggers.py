"""Event- and business-event-triggered campaigns end to end: events through /v1/event and
/v1/transition, business events through /v1/business-event and the CLI, worker ticks on the frozen
clock, messages counted at the real HTTP receiver."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import worker
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import Database
from herald.delivery.engine import triggers
from herald.delivery.engine.abandoned import ORPHANED
from herald.delivery.engine.models import Execution
from herald.services import Services
from tests.campaigns import lifecycle_helpers as h
from tests.conftest import PG_URL
from tests.delivery.builders import outbox_rows, push_connector
from tests.delivery.conftest import OPEN_LIMITS, add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_controls import herald
from tests.delivery.test_engine_reach import ingest
from tests.delivery.test_engine_send import (
    PUSH,
    _dies_with_its_first_message_in_flight,
    _Gate,
    _publish_to_gate,
    publish,
    stats,
    status,
    tick,
)
from tests.delivery.test_engine_send_time import add_events
from tests.delivery.test_engine_wake import HOUR, _until
from tests.factories import Tenant, make_tenant

CART = {"filter_operator": "and", "filters": [{"filter_type": "actions", "action_name": "added_to_cart"}]}

EVENT: dict[str, Any] = {
    **copy.deepcopy(PUSH),
    "campaign_delivery_type": "EVENT_TRIGGERED",
    "basic_details": {"name": "Cart", "platforms": ["ANDROID"]},
    "campaign_content": {
        "content": {
            "push": {
                "android": {
                    "template_type": "BASIC",
                    "basic_details": {
                        "title": "Still want {{ event.product | default('it') }}?",
                        "message": "Hi {{UserAttribute['first_name'] | default('you')}}",
                    },
                }
            }
        }
    },
    "trigger_condition": {"included_filters": CART, "trigger_delay_type": "ASAP"},
    "delivery_controls": {"bypass_dnd": False},
}
EVENT.pop("scheduling_details")
EVENT.pop("utm_params")

BUSINESS: dict[str, Any] = {
    **copy.deepcopy(EVENT),
    "campaign_delivery_type": "BUSINESS_EVENT_TRIGGERED",
    "basic_details": {"name": "Drop", "platforms": ["ANDROID"], "business_event": "price_drop"},
}
BUSINESS.pop("trigger_condition")
BUSINESS.pop("delivery_controls")
BUSINESS["campaign_content"]["content"]["push"]["android"]["basic_details"]["title"] = (
    "{{ event.product }} now {{ event.price }}"
)


def event_body(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(EVENT)
    for key, value in changes.items():
        body[key] = value
    return body


async def send_event(
    client: httpx.AsyncClient,
    tenant: Tenant,
    customer_id: str,
    action: str,
    *,
    at: datetime | None = None,
    **attributes: Any,
) -> None:
    """The event, at `at` (`current_time`: an event the SDK sends late) or now."""
    sent: dict[str, Any] = {"action": action, "attributes": attributes}
    if at is not None:
        sent["current_time"] = int(at.timestamp())
    body = {"type": "event", "customer_id": customer_id, "actions": [sent]}
    response = await client.post(
        f"/v1/event/{tenant.workspace_id}", json=body, headers=tenant.write_headers()
    )
    assert response.status_code == 200, response.text


async def send_transition(client: httpx.AsyncClient, tenant: Tenant, elements: list[dict[str, Any]]) -> None:
    response = await client.post(
        f"/v1/transition/{tenant.workspace_id}",
        json={"type": "transition", "elements": elements},
        headers=tenant.write_headers(),
    )
    assert response.status_code == 200, response.text


def titles(webhook: HttpReceiver, campaign_id: str | None = None) -> list[tuple[str, str]]:
    """(customer, title) of each message received (of `campaign_id` only, when given)."""
    return [
        (r.json()["recipient"]["customer_id"], r.json()["message"]["basic_details"]["title"])
        for r in webhook.received
        if campaign_id is None or r.json()["campaign_id"] == campaign_id
    ]


def counted(kind: str, count: int, action: str = "purchase") -> dict[str, Any]:
    """An EVENT_TRIGGERED campaign fired by `action` done `kind` (atleast, exactly, atmost) `count`
    times, as of the event."""
    done = {"filter_type": "actions", "action_name": action, "execution": {"type": kind, "count": count}}
    included = {"filter_operator": "and", "filters": [done]}
    return event_body(trigger_condition={"included_filters": included, "trigger_delay_type": "ASAP"})


async def users(app: FastAPI, tenant: Tenant, *ids: str, **extra: Any) -> None:
    await add_users(
        app,
        tenant.workspace_id,
        *({"customer_id": c, "push_id": f"tok-{c}", "platform": "ANDROID", **extra} for c in ids),
    )


async def ready(app: FastAPI, tenant: Tenant, webhook: HttpReceiver, *ids: str) -> None:
    await push_connector(app, tenant, webhook)
    await users(app, tenant, *ids)


class TestEventTriggered:
    async def test_a_matching_event_sends_once_with_its_attributes(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await ready(app, workspace, webhook, "ana", "bo")
        campaign_id = await publish(client, workspace, EVENT)
        await send_event(client, workspace, "ana", "added_to_cart", product="Boots")
        await send_event(client, workspace, "bo", "viewed_page")  # another action: nothing
        await tick(app, workspace)
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "Still want Boots?")]
        # A second event is a second firing: one more message.
        await send_event(client, workspace, "ana", "added_to_cart", product="Hat")
        await tick(app, workspace)
        assert titles(webhook)[1:] == [("ana", "Still want Hat?")]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["sent"], run["pending"], run["trigger"]) == (2, 2, 0, "EVENT")
        assert len({r.json()["id"] for r in webhook.received}) == 2

    async def test_two_firings_of_a_user_in_one_batch_both_go_out_in_one_tick(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        # A claim takes one firing per user; the second is claimed by the next round of the same
        # tick (a lane is left out of the next round only when its claim found nobody else).
        await ready(app, workspace, webhook, "ana", "bo")
        await publish(client, workspace, EVENT)
        await send_event(client, workspace, "ana", "added_to_cart", product="Boots")
        await send_event(client, workspace, "bo", "added_to_cart", product="Scarf")
        await send_event(client, workspace, "ana", "added_to_cart", product="Hat")
        await tick(app, workspace)
        assert sorted(titles(webhook)) == [
            ("ana", "Still want Boots?"),
            ("ana", "Still want Hat?"),
            ("bo", "Still want Scarf?"),
        ]

    async def test_transition_events_fire_and_two_workers_send_each_firing_once(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await ready(app, workspace, webhook, *(f"u{i}" for i in range(20)))
        await publish(client, workspace, EVENT)
        elements = [
            {"type": "event", "customer_id": f"u{i}", "actions": [{"action": "added_to_cart"}]}
            for i in range(20)
        ]
        await send_transition(client, workspace, elements)
        await asyncio.gather(tick(app, workspace), tick(app, workspace))
        await tick(app, workspace)
        assert sorted(c for c, _ in titles(webhook)) == sorted(f"u{i}" for i in range(20))

    async def test_two_workers_send_the_firings_of_several_campaigns_each_once(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        # The EVENT executions of a workspace are claimed and sent together (one window for all
        # campaigns): still one message per firing, whichever worker takes which lane.
        customers = [f"u{i}" for i in range(12)]
        await ready(app, workspace, webhook, *customers)
        viewed = {"filter_operator": "and", "filters": [{"filter_type": "actions", "action_name": "viewed"}]}
        cart_id = await publish(client, workspace, EVENT)
        viewed_id = await publish(
            client,
            workspace,
            event_body(trigger_condition={"included_filters": viewed, "trigger_delay_type": "ASAP"}),
        )
        elements = [
            {"type": "event", "customer_id": c, "actions": [{"action": action}]}
            for c in customers
            for action in ("added_to_cart", "viewed", "added_to_cart")
        ]
        await send_transition(client, workspace, elements)
        await asyncio.gather(tick(app, workspace), tick(app, workspace))
        await tick(app, workspace)
        await tick(app, workspace)
        assert sorted(c for c, _ in titles(webhook, cart_id)) == sorted(customers * 2)
        assert sorted(c for c, _ in titles(webhook, viewed_id)) == sorted(customers)
        assert len({r.json()["id"] for r in webhook.received}) == len(webhook.received) == 36

    async def test_attribute_count_and_secondary_filters_and_the_audience_decide(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await ready(app, workspace, webhook, "ana", "bo", "cy")
        await add_users(app, workspace.workspace_id, {"customer_id": "bo", "vip": True})
        await add_users(app, workspace.workspace_id, {"customer_id": "cy", "vip": True, "banned": True})
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "vip": True})
        included = {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "actions",
                    "action_name": "purchase",
                    "execution": {"type": "atleast", "count": 2},
                    "attributes": {
                        "filter_operator": "and",
                        "filters": [
                            {
                                "filter_type": "user_attributes",
                                "data_type": "double",
                                "name": "amount",
                                "operator": "greaterThan",
                                "value": 10,
                            }
                        ],
                    },
                }
            ],
        }
        vip = {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "bool",
                    "name": "vip",
                    "operator": "is",
                    "value": True,
                }
            ],
        }
        body = event_body(
            trigger_condition={
                "included_filters": included,
                "secondary_included_filters": vip,
                "trigger_delay_type": "ASAP",
            },
            segmentation_details={
                "is_all_user_campaign": True,
                "excluded_filters": {
                    "filter_operator": "and",
                    "filters": [
                        {
                            "filter_type": "user_attributes",
                            "data_type": "bool",
                            "name": "banned",
                            "operator": "is",
                            "value": True,
                        }
                    ],
                },
            },
        )
        await publish(client, workspace, body)
        await send_event(client, workspace, "ana", "purchase", amount=50)  # first time: not yet twice
        await send_event(client, workspace, "ana", "purchase", amount=5)  # too small
        await tick(app, workspace)
        assert titles(webhook) == []
        await send_event(client, workspace, "ana", "purchase", amount=20)  # second above 10: fires
        await send_event(client, workspace, "cy", "purchase", amount=20)
        await send_event(client, workspace, "cy", "purchase", amount=20)  # excluded by the audience
        await add_users(app, workspace.workspace_id, {"customer_id": "bo", "vip": False})
        await send_event(client, workspace, "bo", "purchase", amount=20)
        await send_event(client, workspace, "bo", "purchase", amount=20)  # not vip: secondary fails
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["ana"]

    async def test_an_execution_count_is_the_users_as_of_each_event_however_late_it_is_read(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Both purchases are stored before any worker reads the first (it lagged, or another
        # worker had it): "at least twice" still fires on the second only, "exactly once" on the
        # first only, as they would have had each event been read as it came.
        await ready(app, workspace, webhook, "ana")
        twice_id = await publish(client, workspace, counted("atleast", 2))
        once_id = await publish(client, workspace, counted("exactly", 1))
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await send_event(client, workspace, "ana", "purchase", product="Boots")
        clock.set(datetime(2026, 3, 2, 10, 1, tzinfo=UTC))
        await send_event(client, workspace, "ana", "purchase", product="Hat")
        await tick(app, workspace)
        await tick(app, workspace)
        assert titles(webhook, twice_id) == [("ana", "Still want Hat?")]
        assert titles(webhook, once_id) == [("ana", "Still want Boots?")]

    async def test_a_relative_time_window_is_read_at_each_batch(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The statement that matches a batch is kept per campaign version; one whose filters read
        # the clock must still be evaluated at each batch's instant, not at the first one's.
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana", "bo")
        for customer_id in ("ana", "bo"):
            await add_users(
                app,
                workspace.workspace_id,
                {"customer_id": customer_id, "trial_ends": "2026-03-03T09:00:00Z"},
            )
        ending_soon = {
            "filter_operator": "and",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "datetime",
                    "name": "trial_ends",
                    "operator": "inTheNext",
                    "value": {"value": 1, "unit": "days"},
                }
            ],
        }
        trigger = {**EVENT["trigger_condition"], "secondary_included_filters": ending_soon}
        await publish(client, workspace, event_body(trigger_condition=trigger))
        await send_event(client, workspace, "ana", "added_to_cart")  # ends within the next day
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["ana"]
        clock.set(datetime(2026, 3, 3, 9, 30, tzinfo=UTC))  # the trial has ended
        await send_event(client, workspace, "bo", "added_to_cart")
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["ana"]

    async def test_delay_after_the_event_and_before_an_attribute(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana", "bo")
        after = {
            **EVENT["trigger_condition"],
            "trigger_delay_type": "DELAY",
            "trigger_delay_value": 30,
            "trigger_delay_granularity": "MINUTES",
            "trigger_relation": "AFTER",
        }
        before = {
            "included_filters": {
                "filter_operator": "and",
                "filters": [{"filter_type": "actions", "action_name": "booked"}],
            },
            "trigger_delay_type": "DELAY",
            "trigger_delay_value": 2,
            "trigger_delay_granularity": "HOURS",
            "trigger_relation": "BEFORE",
            "trigger_attr": "departure",  # contract: a plain string names the attribute
        }
        await publish(client, workspace, event_body(trigger_condition=after))
        await publish(
            client,
            workspace,
            event_body(trigger_condition=before, basic_details={"name": "Trip", "platforms": ["ANDROID"]}),
        )
        await send_event(client, workspace, "ana", "added_to_cart")
        await send_event(client, workspace, "bo", "booked", departure="2026-03-02T15:00:00Z")
        await send_event(
            client, workspace, "ana", "booked", departure="2026-03-02T09:00:00Z"
        )  # past: dropped
        await tick(app, workspace)
        assert titles(webhook) == []
        clock.advance(minutes=29)
        await tick(app, workspace)
        assert titles(webhook) == []
        clock.advance(minutes=1)  # 10:30
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["ana"]
        clock.set(datetime(2026, 3, 2, 12, 59, tzinfo=UTC))
        await tick(app, workspace)
        assert len(webhook.received) == 1
        clock.advance(minutes=1)  # 13:00, two hours before departure
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["ana", "bo"]

    async def test_a_user_who_opts_out_or_loses_the_token_while_the_firing_waits_gets_nothing(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Three firings wait half an hour; meanwhile Ana opts out of push and Bo's token goes.
        # Each is suppressed at the send, counted as the resolution counts such users (not a
        # failure), and Cy alone is sent.
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana", "bo", "cy")
        after = {
            **EVENT["trigger_condition"],
            "trigger_delay_type": "DELAY",
            "trigger_delay_value": 30,
            "trigger_delay_granularity": "MINUTES",
            "trigger_relation": "AFTER",
        }
        campaign_id = await publish(client, workspace, event_body(trigger_condition=after))
        for customer_id in ("ana", "bo", "cy"):
            await send_event(client, workspace, customer_id, "added_to_cart")
        await tick(app, workspace)
        await ingest(client, workspace, "ana", push_opt_out=True)
        await ingest(client, workspace, "bo", push_id=None)
        clock.advance(minutes=30)
        await tick(app, workspace)
        assert [c for c, _ in titles(webhook)] == ["cy"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["sent"], run["failed"], run["pending"]) == (1, 0, 0)
        assert (run["suppressed"]["opted_out"], run["suppressed"]["no_address"]) == (1, 1)

    async def test_an_anchor_no_date_holds_drops_its_own_firing_only(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # An SDK sending milliseconds since the epoch: read as seconds, a year past 9999. That
        # firing has no time to be sent at; the other events read with it still fire.
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana", "bo", "cy")
        before = {
            "included_filters": {
                "filter_operator": "and",
                "filters": [{"filter_type": "actions", "action_name": "booked"}],
            },
            "trigger_delay_type": "DELAY",
            "trigger_delay_value": 2,
            "trigger_delay_granularity": "HOURS",
            "trigger_relation": "BEFORE",
            "trigger_attr": {"name": "departure"},
        }
        campaign_id = await publish(client, workspace, event_body(trigger_condition=before))
        departure = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
        elements = [
            {"type": "event", "customer_id": customer_id, "actions": [{"action": "booked", "attributes": at}]}
            for customer_id, at in (
                ("ana", {"departure": departure.isoformat()}),
                ("bo", {"departure": departure.timestamp() * 1000}),
                ("cy", {"departure": departure.timestamp()}),
            )
        ]
        await send_transition(client, workspace, elements)
        await tick(app, workspace)
        clock.set(departure - timedelta(hours=2))
        await tick(app, workspace)
        assert sorted(c for c, _ in titles(webhook)) == ["ana", "cy"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["sent"], run["suppressed"]["trigger_time"]) == (3, 2, 1)

    async def test_intelligent_delay_sends_at_the_users_best_hour_within_the_window(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The best hour is SEND_IN_BTS's: the hour of the day, in the user's timezone, most of their
        # events fall in (the one that fires counts too: 08:00 UTC). The window: one to six hours
        # after the event (09:00-14:00 UTC). Bo's only event is the one that fires: his hour, 08:00,
        # is not in the window, and he is sent when it opens.
        clock.set(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
        await push_connector(app, workspace, webhook)
        await users(app, workspace, "ana", timezone="Asia/Kolkata")
        await users(app, workspace, "bo", "cy", "dee")
        for day in (25, 26, 27):
            # Ana: 18:10 in Kolkata (12:40 UTC) most days, once 10:30; Cy: 07:10 UTC, before the
            # window opens, so no moment of it is Cy's hour.
            await add_events(app, workspace, "ana", datetime(2026, 2, day, 12, 40, tzinfo=UTC))
            await add_events(app, workspace, "cy", datetime(2026, 2, day, 7, 10, tzinfo=UTC))
        await add_events(app, workspace, "ana", datetime(2026, 2, 28, 5, 0, tzinfo=UTC))
        for day in (27, 28):
            await add_events(app, workspace, "dee", datetime(2026, 2, day, 10, 10, tzinfo=UTC))
        intelligent = {
            **EVENT["trigger_condition"],
            "trigger_delay_type": "INTELLIGENT_DELAY",
            "intelligent_delay_optimization": {
                "min_delay_value": 1,
                "min_delay_granularity": "HOURS",
                "max_delay_value": 6,
                "max_delay_granularity": "HOURS",
            },
        }
        await publish(client, workspace, event_body(trigger_condition=intelligent))
        for customer_id in ("ana", "bo", "cy", "dee"):
            await send_event(client, workspace, customer_id, "added_to_cart")
        await tick(app, workspace)
        clock.set(datetime(2026, 3, 2, 8, 59, tzinfo=UTC))
        await tick(app, workspace)
        assert titles(webhook) == []
        clock.set(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))  # the window opens: no best hour in it
        await tick(app, workspace)
        assert sorted(c for c, _ in titles(webhook)) == ["bo", "cy"]
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await tick(app, workspace)
        assert sorted(c for c, _ in titles(webhook)) == ["bo", "cy", "dee"]
        clock.set(datetime(2026, 3, 2, 12, 29, tzinfo=UTC))
        await tick(app, workspace)
        assert len(webhook.received) == 3
        clock.set(datetime(2026, 3, 2, 12, 30, tzinfo=UTC))  # 18:00 in Kolkata
        await tick(app, workspace)
        assert sorted(c for c, _ in titles(webhook)) == ["ana", "bo", "cy", "dee"]

    async def test_quiet_hours_hold_within_the_queue_duration_else_drop(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        tenant = await make_tenant(app, rate_limits=OPEN_LIMITS, features={"queuing": True})
        await ready(app, tenant, webhook, "ana")
        await herald(settings, "workspaces", "set", "-w", tenant.workspace_id, "dnd", "22:00-08:00")
        clock.set(datetime(2026, 3, 2, 23, 0, tzinfo=UTC))  # DND ends in 9 hours
        held = event_body(
            delivery_controls={"bypass_dnd": False, "queuing_enabled": True, "queue_duration": 10}
        )
        dropped = event_body(
            delivery_controls={"bypass_dnd": False, "queuing_enabled": True, "queue_duration": 2},
            basic_details={"name": "Short", "platforms": ["ANDROID"]},
        )
        bypass = event_body(
            delivery_controls={"bypass_dnd": True}, basic_details={"name": "Now", "platforms": ["ANDROID"]}
        )
        held_id = await publish(client, tenant, held)
        dropped_id = await publish(client, tenant, dropped)
        bypass_id = await publish(client, tenant, bypass)
        await send_event(client, tenant, "ana", "added_to_cart")
        await tick(app, tenant)
        assert [r.json()["campaign_id"] for r in webhook.received] == [bypass_id]
        [run] = (await stats(client, tenant, dropped_id))["executions"]
        assert run["suppressed"]["dnd"] == 1
        [run] = (await stats(client, tenant, held_id))["executions"]
        assert (run["pending"], run["deferred"]) == (1, 1)
        clock.set(datetime(2026, 3, 3, 8, 0, tzinfo=UTC))
        await tick(app, tenant)
        assert [r.json()["campaign_id"] for r in webhook.received] == [bypass_id, held_id]

    async def test_campaign_and_workspace_minimum_delays(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana")
        spaced = await publish(
            client,
            workspace,
            event_body(
                delivery_controls={
                    "bypass_dnd": False,
                    "minimum_delay_between_two_notification_in_hour": 3,
                    "ignore_global_minimum_delay": True,
                }
            ),
        )
        await send_event(client, workspace, "ana", "added_to_cart")
        await tick(app, workspace)
        assert [r.json()["campaign_id"] for r in webhook.received] == [spaced]
        clock.advance(hours=1)  # inside the campaign's 3 hours: dropped
        await send_event(client, workspace, "ana", "added_to_cart")
        await tick(app, workspace)
        assert len(webhook.received) == 1
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "minimum-delay", "2")
        plain = await publish(
            client, workspace, event_body(basic_details={"name": "Plain", "platforms": ["ANDROID"]})
        )
        exempt = await publish(
            client,
            workspace,
            event_body(
                basic_details={"name": "Exempt", "platforms": ["ANDROID"]},
                delivery_controls={"bypass_dnd": False, "ignore_global_minimum_delay": True},
            ),
        )
        clock.advance(minutes=30)  # 11:30: the last message (10:00) is inside the workspace's 2 hours
        await send_event(client, workspace, "ana", "added_to_cart")
        await tick(app, workspace)
        assert [r.json()["campaign_id"] for r in webhook.received] == [spaced, exempt]
        for campaign_id, dropped in ((spaced, 2), (plain, 1), (exempt, 0)):
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert run["suppressed"]["minimum_delay"] == dropped, campaign_id

    async def test_one_event_firing_several_campaigns_sends_one_within_the_workspace_minimum_delay(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The campaigns are claimed in one round, none of their messages in the outbox yet: the
        # second sees the first one's user claimed, and drops its message.
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana")
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "minimum-delay", "2")
        plain = [
            await publish(
                client, workspace, event_body(basic_details={"name": name, "platforms": ["ANDROID"]})
            )
            for name in ("First", "Second")
        ]
        exempt = await publish(
            client,
            workspace,
            event_body(
                basic_details={"name": "Exempt", "platforms": ["ANDROID"]},
                delivery_controls={"bypass_dnd": False, "ignore_global_minimum_delay": True},
            ),
        )
        await send_event(client, workspace, "ana", "added_to_cart")
        await tick(app, workspace)
        received = [r.json()["campaign_id"] for r in webhook.received]
        assert sorted(received) == sorted([exempt, *(c for c in plain if c in received)])
        assert len([c for c in received if c in plain]) == 1, received
        dropped = 0
        for campaign_id in plain:
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            dropped += run["suppressed"]["minimum_delay"]
        assert dropped == 1

    async def test_the_workspace_minimum_delay_counts_event_triggered_messages_only(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        await ready(app, workspace, webhook, "ana")
        await herald(settings, "workspaces", "set", "-w", workspace.workspace_id, "minimum-delay", "4")
        one_time = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        triggered = await publish(client, workspace, EVENT)
        clock.advance(hours=1)  # 11:00: a one-time message an hour ago, no event-triggered one
        await send_event(client, workspace, "ana", "added_to_cart")
        await tick(app, workspace)
        clock.advance(hours=1)  # 12:00: the event-triggered message an hour ago
        await send_event(client, workspace, "ana", "added_to_cart")
        await tick(app, workspace)
        assert [r.json()["campaign_id"] for r in webhook.received] == [one_time, triggered]
        [run] = (await stats(client, workspace, triggered))["executions"]
        assert run["suppressed"]["minimum_delay"] == 1

    async def test_events_while_paused_do_not_fire_after_resume(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await ready(app, workspace, webhook, "ana")
        campaign_id = await publish(client, workspace, EVENT)
        await h.action(client, workspace, campaign_id, "PAUSE")
        await send_event(client, workspace, "ana", "added_to_cart", product="Paused")
        await tick(app, workspace)
        await h.action(client, workspace, campaign_id, "RESUME")
        await tick(app, workspace)
        assert titles(webhook) == []
        await send_event(client, workspace, "ana", "added_to_cart", product="Live")
        await tick(app, workspace)
        assert titles(webhook) == [("ana", "Still want Live?")]

    async def test_a_worker_beaten_to_one_new_execution_still_has_every_campaigns(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Two campaigns' EVENT executions created at first need, while another worker creates one
        of them first: the refused insert must not take the other with it (its campaign's
        firings then failed the tick with a KeyError, and waited for the next)."""
        await ready(app, workspace, webhook, "ana")
        first = await publish(client, workspace, EVENT)
        second = await publish(client, workspace, EVENT)
        services: Services = app.state.herald
        now = services.clock.now()
        find = triggers._find
        raced = False

        async def beaten(
            database: Database, workspace_id: str, campaign_ids: list[str]
        ) -> dict[str, Execution]:
            nonlocal raced
            if not raced:  # the other worker writes the first one between this one's read and write
                raced = True
                async with database.writer() as session:
                    session.add(
                        Execution.starting(workspace_id, first, 1, "DISPATCHING", now, trigger="EVENT")
                    )
                    await session.commit()
                return {}
            return await find(database, workspace_id, campaign_ids)

        monkeypatch.setattr(triggers, "_find", beaten)
        monkeypatch.setattr(triggers, "_executions", {})
        executions = await triggers.event_executions(
            services.database, workspace.workspace_id, [first, second], now
        )
        assert sorted(executions) == sorted([first, second])
        assert {execution.campaign_id for execution in executions.values()} == {first, second}

    async def test_a_campaign_whose_firing_fails_in_the_database_holds_back_no_other(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """One campaign's statement refused by the database while its events fire: that campaign's
        firings are dropped (logged), the others' are sent. On PostgreSQL the refused statement
        aborted the batch's transaction, and every campaign's firings failed at every tick."""
        await ready(app, workspace, webhook, "ana")
        broken = await publish(client, workspace, EVENT)
        working = await publish(client, workspace, EVENT)
        fire = triggers._fire_campaign

        async def refused_for_one(session: AsyncSession, firings: Any, campaign: Any, *rest: Any) -> None:
            if campaign.campaign_id == broken:
                await session.execute(text("SELECT * FROM no_such_table"))
            await fire(session, firings, campaign, *rest)

        monkeypatch.setattr(triggers, "_fire_campaign", refused_for_one)
        await send_event(client, workspace, "ana", "added_to_cart", product="Hat")
        await tick(app, workspace)
        await tick(app, workspace)
        assert titles(webhook, working) == [("ana", "Still want Hat?")]
        assert titles(webhook, broken) == []

    async def test_a_dead_workers_firing_of_an_expired_campaign_is_settled_once_its_lease_passes(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, clock: FrozenClock
    ) -> None:
        """A worker dies with a firing's message on the wire, then the campaign reaches its
        `expiry_time`: nobody takes over an ended run's firings, so once the claim's lease has
        passed the rows it wrote (the message held, and the window written ahead of it) are settled
        FAILED (outcome unknown), each found by its delivery id (a user's rows there are one per
        firing)."""
        body = copy.deepcopy(EVENT)
        expiry = clock.now() + timedelta(minutes=10)
        body["scheduling_details"] = {
            "delivery_type": "ASAP",
            "expiry_time": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        gate = _Gate()
        try:
            campaign_id = await _publish_to_gate(app, client, workspace, gate, body, users=2)
            await send_event(client, workspace, "u0", "added_to_cart", product="Hat")
            await send_event(client, workspace, "u1", "added_to_cart", product="Scarf")
            await _dies_with_its_first_message_in_flight(app, workspace, gate)
            gate.release.set()
            clock.advance(minutes=2)
            await tick(app, workspace)  # within the claims' lease: the firings are the dead worker's
            rows = await outbox_rows(app, workspace)
            assert [row.status for row in rows] == ["PENDING", "PENDING"]  # the one held, one ahead

            clock.advance(minutes=10)  # past the expiry and the lease
            await tick(app, workspace)
            rows = await outbox_rows(app, workspace)
            assert {(row.status, row.failure_reason) for row in rows} == {("FAILED", f"{ORPHANED}.")}
            assert len(rows) == 2
            assert gate.count == 1  # nothing sent again
            [run] = (await stats(client, workspace, campaign_id))["executions"]
            assert (run["status"], run["sent"], run["failed"], run["pending"]) == ("STOPPED", 0, 2, 0)
        finally:
            gate.stop()

    async def test_an_event_wakes_the_worker(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await ready(app, workspace, webhook, "ana")
        campaign_id = await publish(client, workspace, EVENT)
        services: Services = app.state.herald
        stop = asyncio.Event()
        task = asyncio.create_task(
            worker.run_forever(services.database, services.clock, HOUR, stop, services.settings)
        )
        try:
            await asyncio.sleep(0)
            await send_event(client, workspace, "ana", "added_to_cart", product="Now")
            # This worker's ticks also walk the other tests' workspaces in the shared database (whose
            # connectors may name this receiver's port again): only this campaign's messages count.
            await _until(lambda: bool(titles(webhook, campaign_id)), "the event is delivered")
            assert titles(webhook, campaign_id) == [("ana", "Still want Now?")]
        finally:
            stop.set()
            await task


MINUTE = timedelta(minutes=1)
TEN = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


class TestEventsInTimeOrder:
    """An event stored late (an offline SDK's batch: its `current_time` earlier than events already
    judged) counts among the user's events in (time, id) order, for itself and for those later ones."""

    async def test_a_late_earlier_purchase_makes_the_judged_one_the_second(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana")
        once_id = await publish(client, workspace, counted("exactly", 1))
        twice_id = await publish(client, workspace, counted("atleast", 2))
        await send_event(client, workspace, "ana", "purchase", product="Now")
        await tick(app, workspace)
        assert titles(webhook, once_id) == [("ana", "Still want Now?")]
        assert titles(webhook, twice_id) == []
        # Ten minutes earlier, stored after: in time order the user bought twice. "At least twice"
        # fires for the purchase it now holds for, with its attributes; "exactly once" fired for
        # the first purchase already, and the late one standing in its place does not fire again.
        await send_event(client, workspace, "ana", "purchase", at=TEN - 10 * MINUTE, product="Earlier")
        await tick(app, workspace)
        await tick(app, workspace)
        assert titles(webhook, once_id) == [("ana", "Still want Now?")]
        assert titles(webhook, twice_id) == [("ana", "Still want Now?")]
        # A third purchase, in order: the third time.
        clock.set(TEN + 5 * MINUTE)
        await send_event(client, workspace, "ana", "purchase", product="Third")
        await tick(app, workspace)
        assert titles(webhook, once_id) == [("ana", "Still want Now?")]
        assert titles(webhook, twice_id) == [("ana", "Still want Now?"), ("ana", "Still want Third?")]
        [run] = (await stats(client, workspace, twice_id))["executions"]
        assert (run["audience"], run["sent"]) == (2, 2)
        assert len({r.json()["id"] for r in webhook.received}) == len(webhook.received) == 3

    async def test_in_order_purchases_fire_as_each_is_judged(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana")
        once_id = await publish(client, workspace, counted("exactly", 1))
        twice_id = await publish(client, workspace, counted("atleast", 2))
        at_most_id = await publish(client, workspace, counted("atmost", 2))
        for minute, product in enumerate(("First", "Second", "Third")):
            clock.set(TEN + minute * MINUTE)
            await send_event(client, workspace, "ana", "purchase", product=product)
            await tick(app, workspace)
        assert titles(webhook, once_id) == [("ana", "Still want First?")]
        assert titles(webhook, twice_id) == [("ana", "Still want Second?"), ("ana", "Still want Third?")]
        assert titles(webhook, at_most_id) == [("ana", "Still want First?"), ("ana", "Still want Second?")]

    async def test_a_late_purchase_between_two_judged_ones_keeps_each_count(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana")
        twice_id = await publish(client, workspace, counted("exactly", 2))
        three_id = await publish(client, workspace, counted("atleast", 3))
        at_most_id = await publish(client, workspace, counted("atmost", 1))
        await send_event(client, workspace, "ana", "purchase", product="First")
        await tick(app, workspace)
        clock.set(TEN + 10 * MINUTE)
        await send_event(client, workspace, "ana", "purchase", product="Second")
        await tick(app, workspace)
        assert titles(webhook, twice_id) == [("ana", "Still want Second?")]
        assert titles(webhook, at_most_id) == [("ana", "Still want First?")]
        # Stored at 10:10, done at 10:05: the second purchase in time, and "Second" the third.
        await send_event(client, workspace, "ana", "purchase", at=TEN + 5 * MINUTE, product="Between")
        await tick(app, workspace)
        # "At least three times" now holds as of "Second"; "exactly twice" fired for "Second", and
        # "Between", now the second, stands in its place; "at most once" is over either way.
        assert titles(webhook, three_id) == [("ana", "Still want Second?")]
        assert titles(webhook, twice_id) == [("ana", "Still want Second?")]
        assert titles(webhook, at_most_id) == [("ana", "Still want First?")]

    async def test_a_late_first_purchase_moves_exactly_onto_one_not_yet_fired(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana")
        twice_id = await publish(client, workspace, counted("exactly", 2))
        at_least_id = await publish(client, workspace, counted("atleast", 2))
        await send_event(client, workspace, "ana", "purchase", product="First")
        await tick(app, workspace)
        clock.set(TEN + 10 * MINUTE)
        await send_event(client, workspace, "ana", "purchase", product="Second")
        await tick(app, workspace)
        assert titles(webhook, twice_id) == titles(webhook, at_least_id) == [("ana", "Still want Second?")]
        await send_event(client, workspace, "ana", "purchase", at=TEN - 10 * MINUTE, product="Earliest")
        await tick(app, workspace)
        # In time order "First" is now the second purchase: "at least twice" fires for it too;
        # "exactly twice" sent for "Second" already, and "First" takes its place without a message.
        assert titles(webhook, at_least_id) == [("ana", "Still want Second?"), ("ana", "Still want First?")]
        assert titles(webhook, twice_id) == [("ana", "Still want Second?")]

    async def test_two_late_purchases_judged_in_two_batches_fire_every_event_they_turn(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana")
        three_id = await publish(client, workspace, counted("atleast", 3))
        await send_event(client, workspace, "ana", "purchase", product="First")
        await tick(app, workspace)
        clock.set(TEN + 10 * MINUTE)
        await send_event(client, workspace, "ana", "purchase", product="Second")
        await tick(app, workspace)
        assert titles(webhook, three_id) == []
        # Two purchases done before both, stored together and judged one batch each (several
        # workers, or a full inbox): "First" and "Second" are now the third and fourth. The first
        # batch counted the second late purchase, still waiting, in "Second"'s verdict before it,
        # and the second batch its own predecessor: "Second" never fired.
        monkeypatch.setattr(triggers, "INBOX_BATCH", 1)
        await send_event(client, workspace, "ana", "purchase", at=TEN - 10 * MINUTE, product="Late")
        await send_event(client, workspace, "ana", "purchase", at=TEN - 20 * MINUTE, product="Later")
        await tick(app, workspace)
        await tick(app, workspace)
        assert sorted(titles(webhook, three_id)) == [
            ("ana", "Still want First?"),
            ("ana", "Still want Second?"),
        ]

    async def test_an_event_from_before_the_campaign_is_not_judged_again(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana")
        await send_event(client, workspace, "ana", "purchase", product="Before")
        clock.set(TEN + 5 * MINUTE)
        twice_id = await publish(client, workspace, counted("atleast", 2))
        await send_event(client, workspace, "ana", "purchase", at=TEN - 10 * MINUTE, product="Late")
        await tick(app, workspace)
        # The user's second purchase came before the campaign was published: no message, as had
        # the events come in order.
        assert titles(webhook, twice_id) == []

    @pytest.mark.skipif(not PG_URL, reason="two workers side by side on PostgreSQL (SQLite has one writer)")
    async def test_two_workers_judging_a_users_purchases_side_by_side_count_both(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The first worker judges "Now" before the late purchase is stored and writes its firing;
        # the second takes the late one while the first has not committed. It waits for the first
        # (the user's firings are written one transaction at a time), then sees "Now" judged.
        clock.set(TEN)
        await ready(app, workspace, webhook, "ana", "bo")
        once_id = await publish(client, workspace, counted("exactly", 1))
        twice_id = await publish(client, workspace, counted("atleast", 2))
        await send_event(client, workspace, "bo", "purchase")  # the EVENT executions are made
        await tick(app, workspace)
        database: Database = app.state.herald.database
        await send_event(client, workspace, "ana", "purchase", product="Now")
        async with database.engine.connect() as holder:
            async with holder.begin():
                # The first worker's firing waits for this row once written, before its commit.
                await holder.execute(
                    text(
                        "SELECT id FROM delivery_executions WHERE workspace_id = :ws"
                        " AND campaign_id = :campaign FOR UPDATE"
                    ),
                    {"ws": workspace.workspace_id, "campaign": once_id},
                )
                first = asyncio.create_task(tick(app, workspace))
                [waiting] = await _until_waiting(database, first, 1)
                assert waiting.startswith("UPDATE delivery_executions")
                await send_event(
                    client, workspace, "ana", "purchase", at=TEN - 10 * MINUTE, product="Earlier"
                )
                second = asyncio.create_task(tick(app, workspace))
                # It waits for the user's turn, before judging anything (without one, it found "Now"
                # still in the inbox, as if to be judged later with the late purchase counted).
                assert "pg_advisory_xact_lock" in "".join(await _until_waiting(database, second, 2))
                assert not first.done()
            await asyncio.wait_for(asyncio.gather(first, second), timeout=60)
        await tick(app, workspace)
        assert titles(webhook, once_id) == [("bo", "Still want it?"), ("ana", "Still want Now?")]
        assert titles(webhook, twice_id) == [("ana", "Still want Now?")]


async def _until_waiting(database: Database, task: asyncio.Task[Any], count: int) -> list[str]:
    """Once `count` backends wait for a lock, the statements they run (a bound against hanging, not
    a speed assertion); fails when `task` ends first."""
    for _ in range(6000):
        if task.done():
            await task
            raise AssertionError("ended without waiting for a lock")
        async with database.reader() as session:
            found = await session.scalars(
                text(
                    "SELECT query FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock' ORDER BY query"
                )
            )
            waiting = list(found.all())
        if len(waiting) >= count:
            return waiting
        await asyncio.wait([task], timeout=0.01)
    raise AssertionError("never waited for a lock")


class TestBusinessEvent:
    async def test_a_raise_sends_to_the_audience_with_the_event_and_each_raise_is_a_run(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        await ready(app, workspace, webhook, "ana", "bo")
        await users(app, workspace, "cy", push_opt_out=True)
        campaign_id = await publish(client, workspace, BUSINESS)
        other = copy.deepcopy(BUSINESS)
        other["basic_details"]["business_event"] = "restock"
        await publish(client, workspace, other)
        response = await client.post(
            f"/v1/business-event/{workspace.workspace_id}",
            json={"name": "price_drop", "attributes": {"product": "Boots", "price": 30}},
            headers=workspace.write_headers(),
        )
        assert response.status_code == 202, response.text
        data = response.json()["data"]
        assert data["campaigns_started"] == 1
        assert [(r["campaign_id"], r["run"]) for r in data["runs"]] == [(campaign_id, 1)]
        # Not resolved yet: nothing of it is settled, whatever its audience turns out to be.
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["pending"], run["progress"]) == ("RESOLVING", 0, 0.0)
        await tick(app, workspace)
        assert sorted(titles(webhook)) == [("ana", "Boots now 30"), ("bo", "Boots now 30")]
        webhook.reset()
        output = await herald(
            settings,
            "events",
            "business",
            "price_drop",
            "-w",
            workspace.workspace_id,
            "--attr",
            "product=Hat",
            "--attr",
            "price=12",
        )
        assert output.startswith("1 campaign(s) started")
        await tick(app, workspace)
        assert sorted(titles(webhook)) == [("ana", "Hat now 12"), ("bo", "Hat now 12")]
        runs = (await stats(client, workspace, campaign_id))["executions"]
        assert [(r["run"], r["status"], r["sent"]) for r in runs] == [(1, "DONE", 2), (2, "DONE", 2)]
        assert [r["trigger"] for r in runs] == ["BUSINESS", "BUSINESS"]
        # Values read as the API reads a body: NaN is no JSON number (the text, not a null), a
        # whole number beyond 64 bits the double nearest it, and one no double holds refused.
        webhook.reset()
        base = ("events", "business", "price_drop", "-w", workspace.workspace_id, "--attr", "product=NaN")
        refused = await herald(settings, *base, "--attr", "price=1e999", ok=False)
        assert "price=1e999: numbers must fit a double" in refused
        assert len((await stats(client, workspace, campaign_id))["executions"]) == 2
        await herald(settings, *base, "--attr", "price=100000000000000000000")
        await tick(app, workspace)
        assert sorted(titles(webhook)) == [("ana", "NaN now 1e+20"), ("bo", "NaN now 1e+20")]

    async def test_a_campaign_past_its_expiry_is_not_started(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Raised after the expiry, before a worker's tick has marked the campaign SENT: the answer
        # starts nothing (it said one campaign started, and the worker stopped that run at once).
        await ready(app, workspace, webhook, "ana")
        clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        body = copy.deepcopy(BUSINESS)
        body["scheduling_details"] = {"delivery_type": "ASAP", "expiry_time": "2026-03-03T10:00:00Z"}
        campaign_id = await publish(client, workspace, body)
        clock.set(datetime(2026, 3, 3, 10, 0, tzinfo=UTC))
        response = await client.post(
            f"/v1/business-event/{workspace.workspace_id}",
            json={"name": "price_drop", "attributes": {"product": "Boots", "price": 30}},
            headers=workspace.write_headers(),
        )
        assert response.status_code == 202, response.text
        assert response.json()["data"]["campaigns_started"] == 0
        await tick(app, workspace)
        assert webhook.received == []
        assert (await stats(client, workspace, campaign_id))["executions"] == []
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_bad_input(self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant) -> None:
        path = f"/v1/business-event/{workspace.workspace_id}"
        for body, target in [
            ({"attributes": {}}, "name"),
            ({"name": "x", "attributes": {"a": {"nested": {"too": "deep"}}}}, "attributes.a"),
            ({"name": "x", "colour": 1}, "colour"),
            ({"name": 5}, "name"),
            ({"name": "   "}, "name"),
            ({"name": "price\ndrop"}, "name"),
        ]:
            response = await client.post(path, json=body, headers=workspace.write_headers())
            assert response.status_code == 400, response.text
            targets = [d["target"] for d in response.json()["error"]["details"]]
            assert any(t.startswith(target) for t in targets), (body, targets)
        other = await make_tenant(app)
        response = await client.post(
            f"/v1/business-event/{other.workspace_id}", json={"name": "x"}, headers=workspace.write_headers()
        )
        assert response.status_code == 401
        assert response.json()["code"] == "ER001"
        response = await client.post(path, json={"name": "nobody_waits"}, headers=workspace.write_headers())
        assert response.status_code == 202
        assert response.json()["data"] == {"name": "nobody_waits", "campaigns_started": 0, "runs": []}


@pytest.mark.own_database  # `next_due` reads every workspace
async def test_a_worker_sleeps_until_the_next_delayed_firing_or_start_falls_due(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver, clock: FrozenClock
) -> None:
    """A worker that would otherwise sleep its interval sleeps until the next moment known work
    falls due: here a campaign scheduled for 11:00, and firings delayed by 30 minutes. (What the
    worker does with the moment is `_sleep_for`'s, below; nothing here waits on the wall clock.)"""
    services: Services = app.state.herald
    database = services.database
    clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    await ready(app, workspace, webhook, "ana", "bo")
    assert await worker.next_due(database, clock.now()) is None
    scheduled = copy.deepcopy(PUSH)
    scheduled["scheduling_details"] = {
        "delivery_type": "AT_FIXED_TIME",
        "start_time": "2026-03-02T11:00:00Z",
        "timezone": "UTC",
    }
    await publish(client, workspace, scheduled)
    assert await worker.next_due(database, clock.now()) == datetime(2026, 3, 2, 11, 0, tzinfo=UTC)
    delayed = {
        **EVENT["trigger_condition"],
        "trigger_delay_type": "DELAY",
        "trigger_delay_value": 30,
        "trigger_delay_granularity": "MINUTES",
        "trigger_relation": "AFTER",
    }
    await publish(client, workspace, event_body(trigger_condition=delayed))
    await send_event(client, workspace, "ana", "added_to_cart")
    await tick(app, workspace)
    clock.set(datetime(2026, 3, 2, 10, 10, tzinfo=UTC))
    await send_event(client, workspace, "bo", "added_to_cart")
    await tick(app, workspace)
    assert titles(webhook) == []
    assert await worker.next_due(database, clock.now()) == datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    clock.set(datetime(2026, 3, 2, 10, 30, tzinfo=UTC))
    await tick(app, workspace)
    assert [customer for customer, _ in titles(webhook)] == ["ana"]
    # Sent: the next moment is Bo's.
    assert await worker.next_due(database, clock.now()) == datetime(2026, 3, 2, 10, 40, tzinfo=UTC)
    clock.set(datetime(2026, 3, 2, 10, 40, tzinfo=UTC))
    await tick(app, workspace)
    assert await worker.next_due(database, clock.now()) == datetime(2026, 3, 2, 11, 0, tzinfo=UTC)
    clock.set(datetime(2026, 3, 2, 11, 0, tzinfo=UTC))
    await tick(app, workspace)  # the scheduled campaign starts
    assert await worker.next_due(database, clock.now()) is None


def test_the_sleep_after_a_tick_ends_at_the_next_moment_due() -> None:
    now = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    assert worker._sleep_for(15.0, now, None, True) == 15.0  # nothing known: the interval
    assert worker._sleep_for(15.0, now, now + timedelta(seconds=4), True) == 4.0
    assert worker._sleep_for(15.0, now, now + timedelta(minutes=5), True) == 15.0  # the poll first
    assert worker._sleep_for(15.0, now, now + timedelta(microseconds=10), True) == worker._SOONEST
    # A clock that did not move since the tick before (a clock file held still): the interval.
    assert worker._sleep_for(15.0, now, now + timedelta(seconds=4), False) == 15.0
