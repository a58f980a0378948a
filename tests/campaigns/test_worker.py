"""Scheduled transitions: advance the frozen clock, run one worker tick, look through the API.

The ticks here are scoped to the test's own workspaces (other tests' campaigns live in the same
database); `run_tick` without workspaces walks every workspace, as the `herald worker` command does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from sqlalchemy import select

from herald import wake
from herald.campaigns import worker
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import Database, create_database
from herald.main import create_app
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import PAYLOADS, variant
from tests.factories import Tenant


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


async def tick(app: FastAPI, tenant: Tenant) -> int:
    services = app.state.herald
    return await worker.run_tick(
        services.database, services.clock.now(), [tenant.workspace_id], services.settings
    )


async def status(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str) -> str:
    return str((await h.get(client, tenant, campaign_id))["status"])


def starting(payload: dict[str, object], start: str, expiry: str | None = None) -> dict[str, object]:
    changes: dict[str, object] = {"scheduling_details.start_time": start}
    if expiry is not None:
        changes["scheduling_details.expiry_time"] = expiry
    return variant(payload, changes)


class TestTransitions:
    async def test_periodic_goes_active_at_its_start_time(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        payload = starting(PAYLOADS["push_periodic"], "2026-01-15T18:00:00+05:30")  # 12:30 UTC
        campaign_id = await h.create(client, ws, payload)
        await h.publish(client, ws, campaign_id)
        assert await status(client, ws, campaign_id) == "SCHEDULED"
        clock.advance(minutes=29, seconds=59)
        assert await tick(app, ws) == 0
        assert await status(client, ws, campaign_id) == "SCHEDULED"
        clock.advance(seconds=1)
        assert await tick(app, ws) == 1
        assert await status(client, ws, campaign_id) == "ACTIVE"
        assert await tick(app, ws) == 0

    async def test_triggered_campaign_runs_from_start_to_expiry(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        payload = starting(
            PAYLOADS["push_event_triggered_delay"], "2026-01-16T00:00:00Z", "2026-01-20T00:00:00Z"
        )
        campaign_id = await h.create(client, ws, payload)
        await h.publish(client, ws, campaign_id)
        assert await status(client, ws, campaign_id) == "SCHEDULED"
        clock.set(clock.now().replace(day=16, hour=0))
        assert await tick(app, ws) == 1
        assert await status(client, ws, campaign_id) == "ACTIVE"
        clock.set(clock.now().replace(day=19, hour=23, minute=59))
        assert await tick(app, ws) == 0
        clock.advance(minutes=1)
        assert await tick(app, ws) == 1
        assert await status(client, ws, campaign_id) == "SENT"

    async def test_one_time_campaign_sends_at_its_start_and_is_sent_when_its_audience_is_settled(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        # SENDING → SENT is no longer a clock step: the delivery engine settles the audience (here
        # none: the workspace has no users), then the same tick marks the campaign SENT.
        payload = starting(PAYLOADS["email_one_time_promotional"], "2026-01-15T13:00:00Z")
        campaign_id = await h.create(client, ws, payload)
        await h.publish(client, ws, campaign_id)
        clock.advance(minutes=59, seconds=59)
        assert await tick(app, ws) == 0
        clock.advance(seconds=1)
        assert await tick(app, ws) == 2
        stored = await h.get(client, ws, campaign_id)
        assert (stored["status"], stored["sent_time"]) == ("SENT", "2026-01-15 13:00:00.000000")
        assert await tick(app, ws) == 0

    async def test_asap_one_time_campaign_sends_at_the_next_tick(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_multi_locale_ab"])
        await h.publish(client, ws, campaign_id)
        assert await status(client, ws, campaign_id) == "ACTIVE"
        assert await tick(app, ws) == 2  # ACTIVE → SENDING → SENT (nobody to send to)
        assert await status(client, ws, campaign_id) == "SENT"

    async def test_an_imported_campaign_of_a_channel_herald_does_not_send_is_settled(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        # An SMS one-time campaign imported ACTIVE goes SENDING, and with nothing Herald could send
        # it is SENT in the same tick (it stayed SENDING for ever).
        [campaign_id] = await h.seed(app, ws, h.line(channel="SMS", status="ACTIVE"))
        assert await tick(app, ws) == 2
        assert await status(client, ws, campaign_id) == "SENT"

    async def test_paused_stopped_and_draft_campaigns_wait(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        past = {"start_time": "2026-01-01T00:00:00Z"}
        paused, stopped, draft = await h.seed(
            app,
            ws,
            h.line(
                campaign_delivery_type="PERIODIC",
                status="PAUSED",
                paused_from="SCHEDULED",
                scheduling_details=past,
            ),
            h.line(status="STOPPED", scheduling_details=past),
            h.line(status="DRAFT", scheduling_details=past),
        )
        assert await tick(app, ws) == 0
        # Expiry ends a paused campaign too.
        [expiring] = await h.seed(
            app,
            ws,
            h.line(
                campaign_delivery_type="PERIODIC",
                status="PAUSED",
                scheduling_details={"expiry_time": "2026-01-15T11:00:00Z"},
            ),
        )
        assert await tick(app, ws) == 1
        assert [await status(client, ws, i) for i in (paused, stopped, draft, expiring)] == [
            "PAUSED",
            "STOPPED",
            "DRAFT",
            "SENT",
        ]

    async def test_a_resumed_campaign_past_its_start_goes_active(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        payload = starting(PAYLOADS["push_periodic"], "2026-01-15T13:00:00Z")
        campaign_id = await h.create(client, ws, payload)
        await h.publish(client, ws, campaign_id)
        assert (await h.action(client, ws, campaign_id, "PAUSE")).status_code == 200
        clock.advance(hours=2)
        assert await tick(app, ws) == 0
        assert (await h.action(client, ws, campaign_id, "RESUME")).status_code == 200
        assert await status(client, ws, campaign_id) == "SCHEDULED"
        assert await tick(app, ws) == 1
        assert await status(client, ws, campaign_id) == "ACTIVE"

    async def test_the_latest_version_moves_and_the_earlier_ones_follow(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant, clock: FrozenClock
    ) -> None:
        ids = [f"{n:024x}" for n in (7, 8)]
        past = {"start_time": "2026-01-01T00:00:00Z"}
        await h.seed(
            app,
            ws,
            h.line(id=ids[0], campaign_delivery_type="PERIODIC", status="SCHEDULED", scheduling_details=past),
            h.line(
                id=ids[1],
                campaign_id=ids[0],
                version_number=2,
                campaign_delivery_type="PERIODIC",
                status="SCHEDULED",
                scheduling_details=past,
            ),
        )
        assert await tick(app, ws) == 1  # one transition: the latest version's
        rows = await h.stored(app, ws, ids[0])
        assert [(r.version_number, r.status) for r in rows] == [(1, "ACTIVE"), (2, "ACTIVE")]
        assert rows[0].revision == 1  # the earlier version's content did not change

    async def test_ticks_stay_in_their_workspaces(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        other = await h.workspace(app)
        past = {"start_time": "2026-01-01T00:00:00Z"}
        [mine] = await h.seed(
            app, ws, h.line(campaign_delivery_type="PERIODIC", status="SCHEDULED", scheduling_details=past)
        )
        [theirs] = await h.seed(
            app, other, h.line(campaign_delivery_type="PERIODIC", status="SCHEDULED", scheduling_details=past)
        )
        assert await tick(app, ws) == 1
        assert await status(client, other, theirs) == "SCHEDULED"
        assert await status(client, ws, mine) == "ACTIVE"


async def test_two_workers_never_apply_a_transition_twice(
    app: FastAPI, client: httpx.AsyncClient, settings: Settings, clock: FrozenClock
) -> None:
    """Two worker processes (two engines, two connection pools) tick at the same moment over the
    same due campaigns: every transition is applied exactly once. On SQLite the two serialize on
    the database's single writer; on PostgreSQL they truly overlap (SKIP LOCKED plus the
    compare-and-set)."""
    tenants = [await h.workspace(app) for _ in range(3)]
    past = {"start_time": "2026-01-01T00:00:00Z"}
    expired = {"start_time": "2026-01-01T00:00:00Z", "expiry_time": "2026-01-10T00:00:00Z"}
    for tenant in tenants:
        await h.seed(
            app,
            tenant,
            *(
                h.line(campaign_delivery_type="PERIODIC", status="SCHEDULED", scheduling_details=past)
                for _ in range(15)
            ),
            *(
                h.line(campaign_delivery_type="EVENT_TRIGGERED", status="ACTIVE", scheduling_details=expired)
                for _ in range(10)
            ),
        )
    workspace_ids = [tenant.workspace_id for tenant in tenants]
    first, second = app.state.herald.database, create_database(settings)
    try:
        results = await asyncio.gather(
            worker.tick(first, clock.now(), workspace_ids), worker.tick(second, clock.now(), workspace_ids)
        )
    finally:
        await second.dispose()
    applied = [change for result in results for change in result]
    assert len(applied) == 3 * 25
    assert len({(c.row_id, c.before, c.after) for c in applied}) == len(applied)
    for tenant in tenants:
        rows = await h.found(client, tenant, limit=15, page=1, campaign_fields={"status": ["ACTIVE"]})
        assert len(rows) == 15
        assert (
            len(await h.found(client, tenant, limit=15, page=1, campaign_fields={"status": ["SENT"]})) == 10
        )
    assert await worker.run_tick(first, clock.now() + timedelta(seconds=1), workspace_ids) == 0


async def test_the_compare_and_set_alone_refuses_a_second_application(
    app: FastAPI, settings: Settings, clock: FrozenClock
) -> None:
    """Without the row lock of the due query, two transactions that both decided SCHEDULED -> ACTIVE
    for one campaign: only the first UPDATE ... WHERE status = 'SCHEDULED' changes it."""
    tenant = await h.workspace(app)
    [row_id] = await h.seed(app, tenant, h.line(campaign_delivery_type="PERIODIC", status="SCHEDULED"))
    first, second = app.state.herald.database, create_database(settings)
    scheduled, active = CampaignStatus.SCHEDULED, CampaignStatus.ACTIVE

    async def attempt(database: Database, hold: asyncio.Event | None, go: asyncio.Event | None) -> bool:
        async with database.writer() as session:
            if go is not None:
                await go.wait()
            changed = await worker._step(session, tenant.workspace_id, row_id, scheduled, active, clock.now())
            if hold is not None:
                hold.set()
                await asyncio.sleep(0)  # let the other transaction run into the row while this one holds it
            await session.commit()
            return changed

    try:
        started = asyncio.Event()
        results = await asyncio.gather(attempt(first, started, None), attempt(second, None, started))
    finally:
        await second.dispose()
    assert sorted(results) == [False, True]


class _Watch(logging.Handler):
    """Sets `seen` when the worker logs a transition of `row_id` (on the worker's thread: `seen` is
    set on the loop it was made on)."""

    def __init__(self, row_id: str, seen: asyncio.Event) -> None:
        super().__init__(logging.INFO)
        self.row_id, self.seen = row_id, seen
        self.loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if self.row_id in record.getMessage():
            self.loop.call_soon_threadsafe(self.seen.set)


@pytest.mark.own_database  # the app's tick scans every workspace
async def test_the_api_process_runs_the_worker_when_told(
    settings: Settings, clock: FrozenClock, client: httpx.AsyncClient, app: FastAPI
) -> None:
    """`herald serve` on SQLite with one process sets HERALD_IN_PROCESS_WORKER: the app's lifespan
    then ticks at start-up and every interval until shutdown."""
    tenant = await h.workspace(app)
    [campaign_id] = await h.seed(
        app,
        tenant,
        h.line(
            campaign_delivery_type="PERIODIC",
            status="SCHEDULED",
            scheduling_details={"start_time": "2026-01-01T00:00:00Z"},
        ),
    )
    serving = create_app(
        dataclasses.replace(settings, in_process_worker=True, worker_interval_seconds=3600), clock=clock
    )
    # A shutdown stops the worker after the batch in hand, so the test waits, while the app
    # serves, for the worker to log the transition.
    applied = asyncio.Event()
    watch = _Watch(campaign_id, applied)
    worker_log = logging.getLogger("herald.worker")
    level = worker_log.level
    worker_log.addHandler(watch)
    worker_log.setLevel(logging.INFO)
    try:
        async with LifespanManager(serving, startup_timeout=120, shutdown_timeout=120):
            await asyncio.wait_for(applied.wait(), timeout=120)
    finally:
        worker_log.removeHandler(watch)
        worker_log.setLevel(level)
    assert await status(client, tenant, campaign_id) == "ACTIVE"
    idle = create_app(settings, clock=clock)
    [other] = await h.seed(
        app,
        tenant,
        h.line(
            campaign_delivery_type="PERIODIC",
            status="SCHEDULED",
            scheduling_details={"start_time": "2026-01-01T00:00:00Z"},
        ),
    )
    async with LifespanManager(idle, startup_timeout=120, shutdown_timeout=120):
        pass
    assert await status(client, tenant, other) == "SCHEDULED"


async def test_a_failed_tick_does_not_stop_the_worker(
    monkeypatch: pytest.MonkeyPatch, app: FastAPI, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    stop = asyncio.Event()

    async def flaky(*_args: object, **_kwargs: object) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("database restarting")
        stop.set()
        return 0

    monkeypatch.setattr(worker, "run_tick", flaky)
    await worker.run_forever(app.state.herald.database, clock, 0, stop)
    assert len(calls) == 2
    assert "tick failed" in caplog.text


class _SetOnceLooked(asyncio.Event):
    """A stop signal that arrives while the first batch is being applied (it reads as set from the
    second look on)."""

    looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > 1


async def test_a_stopping_worker_finishes_the_batch_in_hand_and_takes_no_other(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    first, second = await h.workspace(app), await h.workspace(app)
    due = h.line(
        campaign_delivery_type="PERIODIC",
        status="SCHEDULED",
        scheduling_details={"start_time": "2026-01-01T00:00:00Z"},
    )
    batch = await h.seed(app, first, due, due, due)
    [waiting] = await h.seed(app, second, due)
    services = app.state.herald
    applied = await worker.run_tick(
        services.database,
        services.clock.now(),
        [first.workspace_id, second.workspace_id],
        stop=_SetOnceLooked(),
    )
    assert applied == 3
    assert [await status(client, first, campaign_id) for campaign_id in batch] == ["ACTIVE"] * 3
    assert await status(client, second, waiting) == "SCHEDULED"


async def test_a_campaign_a_writer_holds_is_looked_at_again_in_a_moment(
    app: FastAPI,
    client: httpx.AsyncClient,
    settings: Settings,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tick passes over a row a writer holds (SKIP LOCKED on PostgreSQL): the campaign's step is
    tried again a moment later, not at the next poll (an ASAP publish waited 15 s when a patch held
    its row as the publish's wake-up tick came)."""
    if not settings.database_url.startswith("postgresql"):
        pytest.skip("SQLite has no row locks: a tick waits for the writer")
    ws = await h.workspace(app)
    campaign_id = await h.create(client, ws, PAYLOADS["push_multi_locale_ab"])
    await h.publish(client, ws, campaign_id)
    monkeypatch.setattr(wake, "_noted", [])
    writer = create_database(settings)
    try:
        async with writer.writer() as session:
            await session.execute(
                select(Campaign.id).where(Campaign.campaign_id == campaign_id).with_for_update()
            )
            assert await worker.tick(app.state.herald.database, clock.now(), [ws.workspace_id]) == []
        assert wake.next_noted(clock.now()) == clock.now() + worker.LOCKED_RETRY
    finally:
        await writer.dispose()
    clock.advance(worker.LOCKED_RETRY)
    assert await tick(app, ws) == 2  # ACTIVE → SENDING → SENT (nobody to send to)


def test_a_moment_noted_while_an_earlier_one_is_ahead_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ticks a moment apart each note a campaign a writer held for a second later: once the
    first moment passed, the second was lost with it (one slot kept the earliest), and the worker
    slept the whole poll instead (an ASAP publish amid concurrent patches, 15 s late)."""
    monkeypatch.setattr(wake, "_noted", [])
    start = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
    wake.due_at(start + timedelta(seconds=1))
    wake.due_at(start + timedelta(seconds=1.5))
    wake.due_at(start + timedelta(seconds=1.2))
    assert wake.next_noted(start) == start + timedelta(seconds=1)
    assert wake.next_noted(start + timedelta(seconds=1)) == start + timedelta(seconds=1.2)
    assert wake.next_noted(start + timedelta(seconds=1.3)) == start + timedelta(seconds=1.5)
    assert wake.next_noted(start + timedelta(seconds=2)) is None
