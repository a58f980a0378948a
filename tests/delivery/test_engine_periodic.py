"""PERIODIC campaigns end to end: published through the API, driven by worker ticks on the frozen
clock, each run delivered to a real HTTP receiver and visible as a child campaign (C6, C7, stats)."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from herald import wake
from herald.campaigns import worker
from herald.cli import app as cli
from herald.clock import FrozenClock
from herald.services import Services
from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import push_connector
from tests.delivery.conftest import OPEN_LIMITS
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_controls import push_users, receivers, with_controls
from tests.delivery.test_engine_send import PUSH, publish, stats, status, tick
from tests.factories import Tenant, make_tenant


def periodic(start_time: str, timezone: str = "Europe/Paris", **details: Any) -> dict[str, Any]:
    body = copy.deepcopy(PUSH)
    body["campaign_delivery_type"] = "PERIODIC"
    body["scheduling_details"] = {
        "delivery_type": "AT_FIXED_TIME",
        "start_time": start_time,
        "timezone": timezone,
        "periodic_details": {"sending_frequency": "DAILY", "repeat_frequency": 1, **details},
    }
    return body


def runs_of(webhook: HttpReceiver) -> Counter[str]:
    """Messages received per customer."""
    return Counter(r.json()["recipient"]["customer_id"] for r in webhook.received)


async def at(app: FastAPI, clock: FrozenClock, tenant: Tenant, moment: datetime) -> None:
    clock.set(moment)
    await tick(app, tenant)


async def children(client: httpx.AsyncClient, tenant: Tenant, parent: str) -> list[dict[str, Any]]:
    rows = await h.found(client, tenant, include_child_campaigns=True)
    return sorted((r for r in rows if r.get("parent_id") == parent), key=lambda r: r["campaign_id"])


async def throttled_run_begun(
    app: FastAPI,
    client: httpx.AsyncClient,
    tenant: Tenant,
    webhook: HttpReceiver,
    clock: FrozenClock,
    users: int,
) -> str:
    """A daily campaign to `users` users, throttled to 2 a minute, whose first run (2 March 09:00
    UTC) has sent 2 messages and left the rest pending: a run in flight."""
    await push_connector(app, tenant, webhook)
    await push_users(app, tenant, users)
    clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    body = with_controls(periodic("2026-03-02T09:00:00", "UTC"), campaign_throttle_rpm=2)
    campaign_id = await publish(client, tenant, body)
    await at(app, clock, tenant, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    assert len(webhook.received) == 2
    return campaign_id


async def change_title(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, title: str) -> None:
    """C3 on the live campaign: its Android title changed."""
    content = copy.deepcopy(PUSH["campaign_content"])
    content["content"]["push"]["android"]["basic_details"]["title"] = title
    response = await client.patch(
        f"/v5/campaigns/{campaign_id}",
        json={"campaign_content": content},
        headers=tenant.write_headers(campaigns=True),
    )
    assert response.status_code == 200, response.text


class TestDaily:
    async def test_three_occurrences_send_three_runs_seen_as_children(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        monkeypatch: pytest.MonkeyPatch,
        database_url: str,
    ) -> None:
        monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
        monkeypatch.delenv("HERALD_REDIS_URL", raising=False)
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 3)
        clock.set(datetime(2026, 3, 2, 7, 0, tzinfo=UTC))
        campaign_id = await publish(client, workspace, periodic("2026-03-02T10:00:00", no_of_occurences=3))
        assert await status(client, workspace, campaign_id) == "SCHEDULED"
        await at(app, clock, workspace, datetime(2026, 3, 2, 8, 59, tzinfo=UTC))  # Paris 09:59
        assert webhook.received == []
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert receivers(webhook) == users
        assert await status(client, workspace, campaign_id) == "ACTIVE"
        # A run's messages are listed under the campaign, and its child's id says so.
        [child] = await children(client, workspace, campaign_id)
        args = ["outbox", "list", "-w", workspace.workspace_id, "--campaign"]
        listed = await asyncio.to_thread(CliRunner().invoke, cli, [*args, campaign_id])
        assert (listed.exit_code, len(listed.output.splitlines())) == (0, 3), listed.output
        refused = await asyncio.to_thread(CliRunner().invoke, cli, [*args, child["campaign_id"]])
        assert refused.exit_code == 1
        assert f"a run of the periodic campaign {campaign_id}" in refused.output
        wake.next_noted(datetime.max.replace(tzinfo=UTC))  # (what earlier tests noted: let go)
        await at(app, clock, workspace, datetime(2026, 3, 2, 15, 0, tzinfo=UTC))
        # The tick notes the next run's moment: a worker sleeps until then at most.
        assert wake.next_noted(clock.now()) == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
        await at(app, clock, workspace, datetime(2026, 3, 3, 8, 59, tzinfo=UTC))
        assert len(webhook.received) == 3  # nothing between occurrences
        await at(app, clock, workspace, datetime(2026, 3, 3, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 6
        await at(app, clock, workspace, datetime(2026, 3, 4, 9, 30, tzinfo=UTC))
        assert runs_of(webhook) == dict.fromkeys(users, 3)
        assert len({r.json()["id"] for r in webhook.received}) == 9  # one id per run and user
        assert await status(client, workspace, campaign_id) == "SENT"
        await at(app, clock, workspace, datetime(2026, 3, 5, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 9

        executions = (await stats(client, workspace, campaign_id))["executions"]
        assert [(e["run"], e["status"], e["sent"]) for e in executions] == [(n, "DONE", 3) for n in (1, 2, 3)]
        assert [e["scheduled_for"] for e in executions] == [
            "2026-03-02T09:00:00Z",
            "2026-03-03T09:00:00Z",
            "2026-03-04T09:00:00Z",
        ]
        # C6: children only with include_child_campaigns.
        kids = await children(client, workspace, campaign_id)
        assert [k["status"] for k in kids] == ["SENT"] * 3
        assert {k["campaign_id"] for k in kids} == {e["child_campaign_id"] for e in executions}
        assert all(k["campaign_delivery_type"] == "PERIODIC" for k in kids)
        plain = await h.found(client, workspace)
        assert [r["campaign_id"] for r in plain] == [campaign_id]
        # C7: the parent counts its children, each child names its parent.
        meta = await h.meta_rows(client, workspace, include_child_campaigns=True)
        by_id = {row["campaign_id"]: row for row in meta}
        assert by_id[campaign_id]["total_child_campaigns"] == 3
        assert all(by_id[k["campaign_id"]]["parent_campaign_id"] == campaign_id for k in kids)
        # Each run has one name wherever it is read.
        runs = {e["child_campaign_id"]: e["run"] for e in executions}
        for kid in kids:
            name = f"{PUSH['basic_details']['name']} #{runs[kid['campaign_id']]}"
            assert by_id[kid["campaign_id"]]["campaign_name"] == name
            assert (await h.get(client, workspace, kid["campaign_id"]))["basic_details"]["name"] == name
        assert len(await h.meta_rows(client, workspace)) == 1
        child_stats = await stats(client, workspace, kids[0]["campaign_id"])
        assert [e["id"] for e in child_stats["executions"]] == [
            e["id"] for e in executions if e["child_campaign_id"] == kids[0]["campaign_id"]
        ]
        # A run follows its parent: no status action on it.
        response = await h.action(client, workspace, kids[0]["campaign_id"], "PAUSE")
        assert response.status_code == 422, response.text

    async def test_the_wall_clock_is_kept_across_a_dst_change(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 2)
        clock.set(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
        # 09:00 in Paris: 08:00 UTC on 28 March, 07:00 UTC from 29 March (summer time).
        campaign_id = await publish(client, workspace, periodic("2026-03-28T09:00:00", no_of_occurences=3))
        await at(app, clock, workspace, datetime(2026, 3, 28, 8, 0, tzinfo=UTC))
        assert len(webhook.received) == 2
        await at(app, clock, workspace, datetime(2026, 3, 29, 6, 59, tzinfo=UTC))
        assert len(webhook.received) == 2
        await at(app, clock, workspace, datetime(2026, 3, 29, 7, 0, tzinfo=UTC))
        assert len(webhook.received) == 4
        await at(app, clock, workspace, datetime(2026, 3, 30, 7, 0, tzinfo=UTC))
        assert len(webhook.received) == 6
        executions = (await stats(client, workspace, campaign_id))["executions"]
        assert [e["scheduled_for"] for e in executions] == [
            "2026-03-28T08:00:00Z",
            "2026-03-29T07:00:00Z",
            "2026-03-30T07:00:00Z",
        ]
        assert await status(client, workspace, campaign_id) == "SENT"


class TestPublishedLate:
    async def test_occurrences_before_the_publish_never_run(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Published 30 s after the day's 10:00 occurrence, months after its start: that occurrence
        # predates the campaign (no send to everyone at once); the next day's is its first run.
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 2)
        clock.set(datetime(2027, 11, 15, 10, 0, 30, tzinfo=UTC))
        campaign_id = await publish(client, workspace, periodic("2027-01-01T10:00:00", "UTC"))
        await tick(app, workspace)
        await at(app, clock, workspace, datetime(2027, 11, 15, 12, 0, tzinfo=UTC))
        assert webhook.received == []
        assert await status(client, workspace, campaign_id) == "ACTIVE"
        await at(app, clock, workspace, datetime(2027, 11, 16, 10, 0, tzinfo=UTC))
        assert len(webhook.received) == 2
        [execution] = (await stats(client, workspace, campaign_id))["executions"]
        assert execution["scheduled_for"] == "2027-11-16T10:00:00Z"


class TestPauseResume:
    async def test_runs_due_while_paused_are_skipped_and_resume_does_not_catch_up(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 2)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        campaign_id = await publish(
            client, workspace, periodic("2026-03-02T09:00:00", "UTC", no_of_occurences=4)
        )
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 2
        assert (await h.action(client, workspace, campaign_id, "PAUSE")).status_code == 200
        await at(app, clock, workspace, datetime(2026, 3, 3, 9, 0, tzinfo=UTC))
        await at(app, clock, workspace, datetime(2026, 3, 4, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 2
        clock.set(datetime(2026, 3, 4, 12, 0, tzinfo=UTC))
        assert (await h.action(client, workspace, campaign_id, "RESUME")).status_code == 200
        await tick(app, workspace)
        assert len(webhook.received) == 2  # the run of 4 March at 09:00 is not caught up
        await at(app, clock, workspace, datetime(2026, 3, 5, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 4
        # `no_of_occurences` counts sends ("Total sends"): the two dates skipped while PAUSED used
        # none up, so the fourth send is on 7 March, and then the campaign is done.
        assert await status(client, workspace, campaign_id) == "ACTIVE"
        for day in (6, 7, 8):
            await at(app, clock, workspace, datetime(2026, 3, day, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 8
        executions = (await stats(client, workspace, campaign_id))["executions"]
        assert [e["run"] for e in executions] == [1, 4, 5, 6]
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_a_pause_ends_the_run_in_flight_even_when_resumed_before_any_tick(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The throttle leaves most of the run pending. PAUSE then RESUME, with no worker tick in
        # between: the run ended at the PAUSE, so its unsent users stay unsent (the README: "PAUSE
        # ends the run in flight"), and the next run is the next occurrence's.
        campaign_id = await throttled_run_begun(app, client, workspace, webhook, clock, 6)
        assert (await h.action(client, workspace, campaign_id, "PAUSE")).status_code == 200
        assert (await h.action(client, workspace, campaign_id, "RESUME")).status_code == 200
        for minute in range(1, 5):
            await at(app, clock, workspace, datetime(2026, 3, 2, 9, minute, tzinfo=UTC))
        assert len(webhook.received) == 2
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["sent"], run["pending"], run["unsent"]) == ("STOPPED", 2, 0, 4)
        [child] = await children(client, workspace, campaign_id)
        assert child["status"] == "STOPPED"
        await at(app, clock, workspace, datetime(2026, 3, 3, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 4  # the next day's run, throttled as the first


async def change_schedule(
    client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, **periodic_details: Any
) -> None:
    """C3 on the live campaign: its whole `scheduling_details` with these `periodic_details` set."""
    scheduling = (await h.get(client, tenant, campaign_id))["scheduling_details"]
    scheduling["periodic_details"].update(periodic_details)
    response = await client.patch(
        f"/v5/campaigns/{campaign_id}",
        json={"scheduling_details": scheduling},
        headers=tenant.write_headers(campaigns=True),
    )
    assert response.status_code == 200, response.text


class TestScheduleChanges:
    async def test_a_longer_interval_runs_every_date_of_the_new_schedule(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Daily runs 1-3, then every third day: the dates of the new schedule counted from the start
        # (1, 4, 7, 10 March) are its first, second, third and fourth; 4 and 7 March must not be
        # taken for runs 2 and 3, done already, and left unsent.
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 1)
        clock.set(datetime(2026, 2, 28, 12, 0, tzinfo=UTC))
        campaign_id = await publish(client, workspace, periodic("2026-03-01T09:00:00", "UTC"))
        for day in (1, 2, 3):
            await at(app, clock, workspace, datetime(2026, 3, day, 9, 0, tzinfo=UTC))
        clock.set(datetime(2026, 3, 3, 12, 0, tzinfo=UTC))
        await change_schedule(client, workspace, campaign_id, repeat_frequency=3)
        for day in range(4, 11):
            await at(app, clock, workspace, datetime(2026, 3, day, 9, 0, tzinfo=UTC))
        executions = (await stats(client, workspace, campaign_id))["executions"]
        assert [(e["run"], e["scheduled_for"][:10]) for e in executions] == [
            (1, "2026-03-01"),
            (2, "2026-03-02"),
            (3, "2026-03-03"),
            (4, "2026-03-04"),
            (5, "2026-03-07"),
            (6, "2026-03-10"),
        ]
        assert len(webhook.received) == 6

    async def test_a_date_the_change_adds_before_now_is_not_sent_late(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 1)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        body = periodic("2026-03-02T09:00:00", "UTC", sending_frequency="WEEKLY")
        body["scheduling_details"]["periodic_details"]["repeat_on_days_of_week"] = ["MONDAY"]
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))  # Monday
        clock.set(datetime(2026, 3, 5, 12, 0, tzinfo=UTC))  # Thursday: Wednesdays too from now on
        await change_schedule(client, workspace, campaign_id, repeat_on_days_of_week=["MONDAY", "WEDNESDAY"])
        await tick(app, workspace)
        assert len(webhook.received) == 1  # not yesterday's Wednesday, at once
        for day in (9, 11):
            await at(app, clock, workspace, datetime(2026, 3, day, 9, 0, tzinfo=UTC))
        executions = (await stats(client, workspace, campaign_id))["executions"]
        assert [(e["run"], e["scheduled_for"][:10]) for e in executions] == [
            (1, "2026-03-02"),
            (3, "2026-03-09"),
            (4, "2026-03-11"),
        ]

    async def test_a_content_change_keeps_an_occurrence_due_but_not_yet_started(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Only a change of the schedule moves the moment runs count from: a content change made
        # after 09:00, before the worker's tick reached the run, still has it sent.
        await push_connector(app, workspace, webhook)
        await push_users(app, workspace, 1)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        campaign_id = await publish(client, workspace, periodic("2026-03-02T09:00:00", "UTC"))
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        clock.set(datetime(2026, 3, 3, 9, 0, 5, tzinfo=UTC))
        await change_title(client, workspace, campaign_id, "Changed")
        await tick(app, workspace)
        titles = [r.json()["message"]["basic_details"]["title"] for r in webhook.received]
        assert titles == ["Hi you", "Changed"]

    async def test_a_content_change_during_a_run_applies_from_the_next_run(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The spec: "periodic campaigns apply changes from the next run". The throttle leaves most
        # of the first run pending when its content changes: the rest of that run is sent as it
        # began, and the next run with the change.
        campaign_id = await throttled_run_begun(app, client, workspace, webhook, clock, 4)
        # The run's child campaign is the record of what the run sends: it cannot be changed.
        [child] = await children(client, workspace, campaign_id)
        assert child["status"] == "SENDING"
        content = copy.deepcopy(PUSH["campaign_content"])
        content["content"]["push"]["android"]["basic_details"]["title"] = "Child"
        refused = await client.patch(
            f"/v5/campaigns/{child['campaign_id']}",
            json={"campaign_content": content},
            headers=workspace.write_headers(campaigns=True),
        )
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert campaign_id in error["message"]
        assert [(d["code"], d["target"]) for d in error["details"]] == [("NOT_EDITABLE", "campaign_content")]
        kept = await h.get(client, workspace, child["campaign_id"])
        assert kept["campaign_content"] == PUSH["campaign_content"]
        await change_title(client, workspace, campaign_id, "Changed")
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 1, tzinfo=UTC))
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 2, tzinfo=UTC))
        titles = [r.json()["message"]["basic_details"]["title"] for r in webhook.received]
        assert titles == ["Hi you"] * 4
        await at(app, clock, workspace, datetime(2026, 3, 3, 9, 0, tzinfo=UTC))
        titles = [r.json()["message"]["basic_details"]["title"] for r in webhook.received]
        assert titles == ["Hi you"] * 4 + ["Changed"] * 2


async def monthly(
    app: FastAPI,
    client: httpx.AsyncClient,
    workspace: Tenant,
    webhook: HttpReceiver,
    start_time: str,
    users: int = 1,
    **details: Any,
) -> str:
    """A MONTHLY campaign in UTC from `start_time` (`periodic_details` as given) published to
    `users` users through a push connector to `webhook`."""
    await push_connector(app, workspace, webhook)
    await push_users(app, workspace, users)
    body = periodic(start_time, "UTC")
    body["scheduling_details"]["periodic_details"] = {"sending_frequency": "MONTHLY", **details}
    return await publish(client, workspace, body)


class TestMonthly:
    async def test_the_31st_runs_only_in_months_that_have_one(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(datetime(2026, 1, 30, 12, 0, tzinfo=UTC))
        campaign_id = await monthly(
            app,
            client,
            workspace,
            webhook,
            "2026-01-31T10:00:00",
            repeat_frequency=1,
            no_of_occurences=2,
            repeat_on_date_of_month=[31],
        )
        await at(app, clock, workspace, datetime(2026, 1, 31, 10, 0, tzinfo=UTC))
        assert len(webhook.received) == 1
        for day in (datetime(2026, 2, 28, 10, 0, tzinfo=UTC), datetime(2026, 3, 1, 10, 0, tzinfo=UTC)):
            await at(app, clock, workspace, day)  # February has no 31st
        assert len(webhook.received) == 1
        await at(app, clock, workspace, datetime(2026, 3, 31, 10, 0, tzinfo=UTC))
        assert len(webhook.received) == 2
        executions = (await stats(client, workspace, campaign_id))["executions"]
        assert [e["scheduled_for"] for e in executions] == ["2026-01-31T10:00:00Z", "2026-03-31T10:00:00Z"]
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_a_frequency_whose_next_run_is_past_the_calendar_runs_once_and_ends(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Every millionth month: the second run would be in the year 85,000. Before, every tick's
        # arithmetic overflowed: the first run never went and the campaign stayed ACTIVE.
        clock.set(datetime(2026, 1, 30, 12, 0, tzinfo=UTC))
        campaign_id = await monthly(
            app,
            client,
            workspace,
            webhook,
            "2026-01-31T10:00:00",
            users=2,
            repeat_frequency=1_000_000,
            no_of_occurences=2,
        )
        await at(app, clock, workspace, datetime(2026, 1, 31, 10, 0, tzinfo=UTC))
        await at(app, clock, workspace, datetime(2026, 1, 31, 10, 1, tzinfo=UTC))
        assert len(webhook.received) == 2
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_a_date_no_month_of_the_pattern_has_ends_the_campaign_without_a_run(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        clock.set(datetime(2026, 3, 30, 12, 0, tzinfo=UTC))
        campaign_id = await monthly(
            app,
            client,
            workspace,
            webhook,
            "2026-04-01T10:00:00",
            repeat_frequency=12,
            repeat_on_date_of_month=[31],  # every April: never
        )
        await at(app, clock, workspace, datetime(2026, 4, 1, 10, 0, tzinfo=UTC))
        assert webhook.received == []
        assert await status(client, workspace, campaign_id) == "SENT"


class TestRuns:
    async def test_the_instance_limit_counts_per_run_and_the_audience_is_read_at_each_run(
        self, app: FastAPI, client: httpx.AsyncClient, webhook: HttpReceiver, clock: FrozenClock
    ) -> None:
        tenant = await make_tenant(app, features={"campaign_audience_limit": True}, rate_limits=OPEN_LIMITS)
        await push_connector(app, tenant, webhook)
        await push_users(app, tenant, 3)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        body = periodic("2026-03-02T09:00:00", "UTC", no_of_occurences=2)
        body["campaign_audience_limit"] = {
            "is_campaign_audience_limit_enabled": True,
            "metric": "SENT",
            "frequency": "INSTANCE",
            "limit": 2,
        }
        campaign_id = await publish(client, tenant, body)
        await at(app, clock, tenant, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 2
        clock.set(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
        await push_users(app, tenant, 5)  # two users more for the next run
        await at(app, clock, tenant, datetime(2026, 3, 3, 9, 0, tzinfo=UTC))
        assert len(webhook.received) == 4
        executions = (await stats(client, tenant, campaign_id))["executions"]
        assert [(e["audience"], e["sent"], e["suppressed"]["audience_limit"]) for e in executions] == [
            (3, 2, 1),
            (5, 2, 3),
        ]

    async def test_several_workers_start_each_run_once(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        services: Services = app.state.herald
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 4)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        campaign_id = await publish(
            client, workspace, periodic("2026-03-02T09:00:00", "UTC", no_of_occurences=2)
        )

        async def worker_tick() -> None:
            await worker.run_tick(services.database, clock.now(), [workspace.workspace_id], services.settings)

        for day in (2, 3):
            clock.set(datetime(2026, 3, day, 9, 0, tzinfo=UTC) + timedelta(seconds=1))
            await asyncio.gather(worker_tick(), worker_tick(), worker_tick())
        assert runs_of(webhook) == dict.fromkeys(users, 2)
        assert len(await children(client, workspace, campaign_id)) == 2
