"""Per-user send times: SEND_IN_USER_TIMEZONE and SEND_IN_BTS, end to end (published through the API,
worker ticks on the frozen clock, a real HTTP receiver) and their pure rules."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import httpx
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.audience import service as audience_service
from herald.campaigns.lifecycle import first_local_moment
from herald.campaigns.schemas.scheduling import SchedulingDetails
from herald.clock import FrozenClock
from herald.delivery.engine.send_time import (
    BTS,
    USER_TIMEZONE,
    Moment,
    SendTimeRule,
    best_hour,
    moment_for,
    rule_of,
)
from herald.services import Services
from tests.delivery.builders import push_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_controls import receivers
from tests.delivery.test_engine_send import PUSH, publish, stats, status, tick
from tests.factories import Tenant

UTC_ZONE = ZoneInfo("UTC")
TOKYO = ZoneInfo("Asia/Tokyo")
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")


def scheduled(**scheduling: Any) -> dict[str, Any]:
    body = copy.deepcopy(PUSH)
    body["scheduling_details"] = scheduling
    return body


async def users(app: FastAPI, tenant: Tenant, **zones: str | None) -> None:
    await add_users(
        app,
        tenant.workspace_id,
        *(
            {
                "customer_id": name,
                "push_id": f"tok-{name}",
                "platform": "ANDROID",
                **({"timezone": zone} if zone else {}),
            }
            for name, zone in zones.items()
        ),
    )


async def add_events(app: FastAPI, tenant: Tenant, customer_id: str, *moments: datetime) -> None:
    services: Services = app.state.herald
    now = services.clock.now()
    async with services.database.writer() as session:
        raw = {
            "type": "event",
            "customer_id": customer_id,
            "actions": [
                {"action": "app_opened", "current_time": m.strftime("%Y-%m-%dT%H:%M:%SZ")} for m in moments
            ],
        }
        await audience_service.ingest_event(session, tenant.workspace_id, raw, now)
        await session.commit()


async def at(app: FastAPI, clock: FrozenClock, tenant: Tenant, moment: datetime) -> None:
    clock.set(moment)
    await tick(app, tenant)


async def known_and_unknown(
    app: FastAPI, tenant: Tenant, webhook: HttpReceiver, clock: FrozenClock, *, known_hour: int
) -> dict[str, Any]:
    """Users `known` (one event, at `known_hour` UTC the day before) and `unknown` (none), and a
    SEND_IN_BTS body from 2026-03-02T06:00Z that skips users without a best time."""
    await push_connector(app, tenant, webhook)
    await users(app, tenant, known=None, unknown=None)
    clock.set(datetime(2026, 3, 1, 23, 0, tzinfo=UTC))
    await add_events(app, tenant, "known", datetime(2026, 3, 1, known_hour, 15, tzinfo=UTC))
    return scheduled(
        delivery_type="SEND_IN_BTS",
        start_time="2026-03-02T06:00:00",
        timezone="UTC",
        bts_details={"send_in_bts": True, "if_user_bts_is_not_available": "DO_NOT_SEND"},
    )


class TestUserTimezone:
    async def test_each_user_at_the_local_wall_clock_and_passed_users_skipped(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        # 09:00 local: Tokyo 00:00 UTC (passed when the campaign starts at 09:00 UTC), London 09:00
        # UTC, the default timezone (UTC) 09:00, New York 14:00 UTC.
        await users(
            app, workspace, tokyo="Asia/Tokyo", london="Europe/London", plain=None, ny="America/New_York"
        )
        clock.set(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
        body = scheduled(
            delivery_type="SEND_IN_USER_TIMEZONE",
            start_time="2026-03-02T09:00:00",
            user_timezone_details={"send_in_user_timezone": True, "send_if_user_timezone_has_passed": False},
        )
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert receivers(webhook) == ["london", "plain"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"]["timezone_passed"] == 1
        assert (run["deferred"], run["pending"]) == (1, 1)
        await at(app, clock, workspace, datetime(2026, 3, 2, 13, 59, tzinfo=UTC))
        assert len(webhook.received) == 2
        await at(app, clock, workspace, datetime(2026, 3, 2, 14, 0, tzinfo=UTC))
        assert receivers(webhook) == ["london", "ny", "plain"]
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_published_ahead_every_user_is_sent_at_their_own_wall_clock(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Published the day before: 09:00 comes first on the Line Islands (UTC+14, 19:00 UTC the
        # day before), then Tokyo (00:00 UTC), London and UTC (09:00), New York (14:00). Nobody
        # east of the campaign's timezone is passed: the campaign begins at the first of them.
        await push_connector(app, workspace, webhook)
        await users(
            app,
            workspace,
            kiritimati="Pacific/Kiritimati",
            tokyo="Asia/Tokyo",
            london="Europe/London",
            ny="America/New_York",
        )
        clock.set(datetime(2026, 3, 1, 8, 0, tzinfo=UTC))
        body = scheduled(
            delivery_type="SEND_IN_USER_TIMEZONE",
            start_time="2026-03-02T09:00:00",
            user_timezone_details={"send_in_user_timezone": True, "send_if_user_timezone_has_passed": False},
        )
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 1, 18, 59, tzinfo=UTC))
        assert await status(client, workspace, campaign_id) == "SCHEDULED"
        await at(app, clock, workspace, datetime(2026, 3, 1, 19, 0, tzinfo=UTC))
        assert await status(client, workspace, campaign_id) == "SENDING"
        await at(app, clock, workspace, datetime(2026, 3, 1, 19, 0, tzinfo=UTC))
        assert receivers(webhook) == ["kiritimati"]
        await at(app, clock, workspace, datetime(2026, 3, 1, 23, 59, tzinfo=UTC))
        assert receivers(webhook) == ["kiritimati"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 0, 0, tzinfo=UTC))
        assert receivers(webhook) == ["kiritimati", "tokyo"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert receivers(webhook) == ["kiritimati", "london", "tokyo"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 14, 0, tzinfo=UTC))
        assert receivers(webhook) == ["kiritimati", "london", "ny", "tokyo"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"].get("timezone_passed", 0) == 0
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_a_tick_after_the_start_skips_only_users_whose_moment_was_before_it(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The worker reaches the run five seconds late: users whose moment is the start itself
        # (the campaign's timezone, the default one) were not passed when the run was due.
        await push_connector(app, workspace, webhook)
        await users(app, workspace, tokyo="Asia/Tokyo", london="Europe/London", plain=None)
        clock.set(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
        body = scheduled(
            delivery_type="SEND_IN_USER_TIMEZONE",
            start_time="2026-03-02T09:00:00",
            user_timezone_details={"send_in_user_timezone": True, "send_if_user_timezone_has_passed": False},
        )
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC))
        assert receivers(webhook) == ["london", "plain"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"]["timezone_passed"] == 1

    async def test_passed_users_are_sent_at_once_when_allowed(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await users(app, workspace, tokyo="Asia/Tokyo", ny="America/New_York")
        clock.set(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
        body = scheduled(
            delivery_type="SEND_IN_USER_TIMEZONE",
            start_time="2026-03-02T09:00:00",
            user_timezone_details={"send_in_user_timezone": True, "send_if_user_timezone_has_passed": True},
        )
        await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
        assert receivers(webhook) == ["tokyo"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 14, 0, tzinfo=UTC))
        assert receivers(webhook) == ["ny", "tokyo"]


class TestBestTimeToSend:
    async def test_users_at_their_cluster_hour_else_at_the_fallbacks(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await users(app, workspace, evening=None, fresh=None, late=None, paris="Europe/Paris")
        clock.set(datetime(2026, 3, 1, 23, 0, tzinfo=UTC))
        for day in range(20, 28):
            base = datetime(2026, 2, day, tzinfo=UTC)
            await add_events(
                app,
                workspace,
                "evening",
                base + timedelta(hours=18, minutes=5),
                base + timedelta(hours=18, minutes=50),
                base + timedelta(hours=7),  # fewer mornings than evenings
            )
            await add_events(app, workspace, "late", base + timedelta(hours=22, minutes=30))
            await add_events(
                app, workspace, "paris", base + timedelta(hours=19, minutes=40)
            )  # 20:40 in Paris
        body = scheduled(
            delivery_type="SEND_IN_BTS",
            start_time="2026-03-02T06:00:00",
            timezone="UTC",
            bts_details={
                "send_in_bts": True,
                "if_user_bts_is_not_available": "SEND_AT_START_TIME",
                "if_user_bts_outside_time_window": "SEND_AT_WINDOW_END",
                "window_end_time": "2026-03-02T21:00:00Z",
            },
        )
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 6, 0, tzinfo=UTC))
        assert receivers(webhook) == ["fresh"]  # no events: at the start
        await at(app, clock, workspace, datetime(2026, 3, 2, 17, 59, tzinfo=UTC))
        assert receivers(webhook) == ["fresh"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 18, 0, tzinfo=UTC))
        assert receivers(webhook) == ["evening", "fresh"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 19, 0, tzinfo=UTC))  # 20:00 in Paris
        assert receivers(webhook) == ["evening", "fresh", "paris"]
        await at(app, clock, workspace, datetime(2026, 3, 2, 20, 59, tzinfo=UTC))
        assert len(webhook.received) == 3
        await at(app, clock, workspace, datetime(2026, 3, 2, 21, 0, tzinfo=UTC))  # 22:00 is past the window
        assert receivers(webhook) == ["evening", "fresh", "late", "paris"]
        assert await status(client, workspace, campaign_id) == "SENT"

    async def test_users_without_a_best_time_can_be_skipped(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        body = await known_and_unknown(app, workspace, webhook, clock, known_hour=10)
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        assert receivers(webhook) == ["known"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert run["suppressed"]["bts_not_available"] == 1

    async def test_a_business_event_run_sends_each_user_at_their_best_time_from_the_raise(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # A business event's run has no schedule of its own: its rule was dropped, and every user
        # went out at the raise, the one DO_NOT_SEND skips included.
        body = await known_and_unknown(app, workspace, webhook, clock, known_hour=12)
        body["campaign_delivery_type"] = "BUSINESS_EVENT_TRIGGERED"
        body["basic_details"]["business_event"] = "price_drop"
        body["basic_details"]["platforms"] = ["ANDROID"]
        body["campaign_content"]["content"]["push"].pop("ios")
        campaign_id = await publish(client, workspace, body)
        await at(app, clock, workspace, datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        assert await status(client, workspace, campaign_id) == "ACTIVE"
        raised = await client.post(
            f"/v1/business-event/{workspace.workspace_id}",
            json={"name": "price_drop", "attributes": {}},
            headers=workspace.write_headers(),
        )
        assert raised.status_code == 202, raised.text
        await at(app, clock, workspace, datetime(2026, 3, 2, 10, 1, tzinfo=UTC))
        assert receivers(webhook) == []  # known's best hour is 12:00
        await at(app, clock, workspace, datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
        assert receivers(webhook) == ["known"]
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["trigger"], run["sent"], run["suppressed"]["bts_not_available"]) == ("BUSINESS", 1, 1)

    async def test_a_users_first_events_count_at_the_next_run_the_same_day(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Nothing is kept of a user without events: a best time is kept for a day once there is one
        # to keep, but "none yet" is not, so events that arrive after a run count at the next.
        await push_connector(app, workspace, webhook)
        await users(app, workspace, newcomer=None)
        clock.set(datetime(2026, 3, 2, 5, 0, tzinfo=UTC))
        bts = {"send_in_bts": True, "window_end_time": "2026-03-02T21:00:00Z"}
        first = scheduled(
            delivery_type="SEND_IN_BTS", start_time="2026-03-02T06:00:00", timezone="UTC", bts_details=bts
        )
        await publish(client, workspace, first)
        await at(app, clock, workspace, datetime(2026, 3, 2, 6, 0, tzinfo=UTC))
        assert receivers(webhook) == ["newcomer"]  # no events: at the start
        # Yesterday's events, received after the first run.
        for moment in ((1, 18, 10), (1, 18, 40), (1, 9, 0)):
            await add_events(app, workspace, "newcomer", datetime(2026, 3, *moment, tzinfo=UTC))
        second = scheduled(
            delivery_type="SEND_IN_BTS", start_time="2026-03-02T07:00:00", timezone="UTC", bts_details=bts
        )
        await publish(client, workspace, second)
        await at(app, clock, workspace, datetime(2026, 3, 2, 7, 0, tzinfo=UTC))
        assert len(webhook.received) == 1
        await at(app, clock, workspace, datetime(2026, 3, 2, 17, 59, tzinfo=UTC))
        assert len(webhook.received) == 1
        await at(app, clock, workspace, datetime(2026, 3, 2, 18, 0, tzinfo=UTC))
        assert receivers(webhook) == ["newcomer", "newcomer"]


START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class TestRules:
    def test_user_timezone_moments(self) -> None:
        rule = SendTimeRule(USER_TIMEZONE, START, UTC_ZONE)
        assert moment_for(rule, TOKYO, None) == Moment(skipped="TIMEZONE_PASSED")
        assert moment_for(rule, NEW_YORK, None) == Moment(at=datetime(2026, 3, 2, 14, 0, tzinfo=UTC))
        assert moment_for(rule, UTC_ZONE, None) == Moment(at=START)

    @settings(max_examples=300, deadline=None)
    @given(
        zone=st.sampled_from(sorted(available_timezones())),
        campaign_zone=st.sampled_from(
            ["UTC", "America/New_York", "Asia/Tokyo", "Pacific/Kiritimati", "Pacific/Pago_Pago"]
        ),
        start=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31)),
    )
    def test_published_before_the_campaign_begins_no_user_has_passed(
        self, zone: str, campaign_zone: str, start: datetime
    ) -> None:
        """Whatever the zones, a campaign published before it begins (`lifecycle.begins_at`) sends
        every user at their own wall clock: none is passed, none is sent before it begins."""
        at = start.replace(tzinfo=ZoneInfo(campaign_zone)).astimezone(UTC)
        details = SchedulingDetails.model_validate(
            {
                "delivery_type": "SEND_IN_USER_TIMEZONE",
                "start_time": at.isoformat(),
                "timezone": campaign_zone,
                "user_timezone_details": {
                    "send_in_user_timezone": True,
                    "send_if_user_timezone_has_passed": False,
                },
            }
        )
        begins = first_local_moment(at, ZoneInfo(campaign_zone))
        rule = rule_of(details, at, published_at=begins - timedelta(seconds=1))
        assert rule is not None
        moment = moment_for(rule, ZoneInfo(zone), None)
        assert moment.skipped is None
        assert moment.at is not None
        assert moment.at >= begins

    def test_bts_fallbacks(self) -> None:
        end = START + timedelta(hours=5)
        rule = SendTimeRule(BTS, START, UTC_ZONE, window_end=end, if_outside="SEND_AT_WINDOW_END")
        assert moment_for(rule, UTC_ZONE, None) == Moment(at=START)  # default: the start time
        assert moment_for(rule, UTC_ZONE, 11) == Moment(at=START + timedelta(hours=2))
        assert moment_for(rule, UTC_ZONE, 8) == Moment(at=end)  # 08:00 is tomorrow: outside
        skipping = SendTimeRule(BTS, START, UTC_ZONE, window_end=end, if_outside="DO_NOT_SEND")
        assert moment_for(skipping, UTC_ZONE, 20) == Moment(skipped="BTS_OUTSIDE_WINDOW")
        # A run that begins within a user's best hour sends them at once, not a day later.
        midway = SendTimeRule(
            BTS, START + timedelta(minutes=30), UTC_ZONE, window_end=end, if_outside="DO_NOT_SEND"
        )
        assert moment_for(midway, UTC_ZONE, 9) == Moment(at=START + timedelta(minutes=30))
        assert moment_for(midway, PARIS, 10) == Moment(at=START + timedelta(minutes=30))  # 10:30 there

    @settings(max_examples=100, deadline=None)
    @given(
        st.lists(
            st.datetimes(
                min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)
            ),
            max_size=40,
        ),
        st.sampled_from([UTC_ZONE, TOKYO, NEW_YORK, PARIS]),
    )
    def test_the_best_hour_is_a_most_frequent_local_hour(
        self, moments: list[datetime], zone: ZoneInfo
    ) -> None:
        hour = best_hour(moments, zone)
        if not moments:
            assert hour is None
            return
        local = [m.astimezone(zone).hour for m in moments]
        assert hour is not None
        assert local.count(hour) == max(local.count(h) for h in local)

    @settings(max_examples=100, deadline=None)
    @given(st.integers(0, 23), st.sampled_from([UTC_ZONE, TOKYO, NEW_YORK, PARIS]), st.integers(0, 300))
    def test_a_bts_moment_is_at_the_hour_within_a_day_of_the_start(
        self, hour: int, zone: ZoneInfo, days: int
    ) -> None:
        start = START + timedelta(days=days, minutes=17)
        rule = SendTimeRule(BTS, start, UTC_ZONE, if_outside="SEND_AT_WINDOW_END")
        moment = moment_for(rule, zone, hour)
        assert moment.at is not None
        assert start <= moment.at <= start + timedelta(days=1)
        if start.astimezone(zone).hour == hour:
            assert moment.at == start  # begun within the best hour: at once
        elif moment.at < start + timedelta(days=1):
            local = moment.at.astimezone(zone)
            assert local.minute == 0
            assert local.hour in (hour, hour + 1)
