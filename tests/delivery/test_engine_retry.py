"""Failures at send time: transient ones are attempted again with backoff on the frozen clock,
permanent ones are final, and a connector that keeps failing pauses the execution until an
operator resumes it. Real sinks (an HTTP receiver, aiosmtpd); time moves only when the test says."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from typer.testing import CliRunner

from herald import wake
from herald.campaigns import worker
from herald.campaigns.schemas.common import Channel
from herald.cli import app as cli
from herald.clock import FrozenClock
from herald.config import Settings
from herald.delivery import outbox
from herald.delivery.config import ConnectorInput
from herald.delivery.engine.models import Execution
from herald.delivery.engine.pause import pause, resume
from herald.delivery.engine.throttle import WINDOW as THROTTLE_WINDOW
from herald.delivery.messages import Envelope, Outcome, Recipient, Slot
from herald.delivery.models import Connector, OutboxEntry
from herald.delivery.streaks import Streaks
from herald.services import Services
from herald.timefmt import rfc3339
from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import HOOK_SECRET, outbox_rows, push_connector, smtp_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver, SmtpServer
from tests.delivery.test_engine_send import EMAIL, PUSH, publish, stats, status, tick
from tests.delivery.test_engine_wake import HOUR, _until
from tests.factories import Tenant, add_connector

RETRY = timedelta(seconds=30)  # the first wait; doubled after each failed attempt


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The suite's settings (a database of its own for a test marked `own_database`: written here
    as its own, this fixture gave such a test the shared one, whose every workspace its worker then
    scanned) with few attempts, a short wait and a low error threshold."""
    return dataclasses.replace(
        settings,
        delivery_max_attempts=3,
        delivery_retry_seconds=RETRY.total_seconds(),
        delivery_error_threshold=3,
    )


def _android(*names: str) -> list[dict[str, Any]]:
    return [{"customer_id": name, "push_id": f"tok-{name}", "platform": "ANDROID"} for name in names]


async def _answered_once(
    app: FastAPI,
    client: httpx.AsyncClient,
    workspace: Tenant,
    webhook: HttpReceiver,
    status: int,
    retry_after: str,
) -> OutboxEntry:
    """One user's message of a published Push campaign, answered `status` with `retry_after` as
    its Retry-After by the first tick: its outbox row."""
    await push_connector(app, workspace, webhook)
    await add_users(app, workspace.workspace_id, *_android("ana"))
    webhook.status = status
    webhook.answer_headers = {"Retry-After": retry_after}
    await publish(client, workspace, PUSH)
    await tick(app, workspace)
    [row] = await outbox_rows(app, workspace)
    return row


async def _status_is(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str, status: str) -> bool:
    [run] = (await stats(client, tenant, campaign_id))["executions"]
    return bool(run["status"] == status)


async def _until_async(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """`_until` for a condition read through the API (a bound against hanging, not a speed
    assertion)."""
    for _ in range(3000):
        if await condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def _ids(webhook: HttpReceiver) -> list[str]:
    return [str(request.json()["id"]) for request in webhook.received]


async def _run(stats_of: dict[str, Any]) -> dict[str, Any]:
    [run] = stats_of["executions"]
    return dict(run)


class TestWebhook:
    async def test_a_5xx_is_attempted_again_after_the_backoff_under_the_same_id(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana"))
        webhook.status = 503
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENDING"
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.failure_reason) == ("PENDING", 1, "The webhook answered 503.")
        assert row.next_attempt_at == clock.now() + RETRY
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["pending"], run["retrying"], run["sent"]) == ("DISPATCHING", 1, 1, 0)

        webhook.status = 204
        clock.advance(RETRY - timedelta(seconds=1))
        await tick(app, workspace)  # not due yet: nothing is attempted
        assert len(webhook.received) == 1
        clock.advance(seconds=1)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        ids = _ids(webhook)
        assert len(ids) == 2
        assert ids[0] == ids[1] == row.id
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.next_attempt_at) == ("SENT", 2, None)
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["pending"], run["sent"], run["failed"]) == ("DONE", 0, 1, 0)

    async def test_the_wait_runs_from_the_failed_answer_not_from_the_attempts_start(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # A receiver slow to fail (up to the time limit) had its message due again as it failed.
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana"))
        webhook.status = 503
        webhook.hold()
        await publish(client, workspace, PUSH)
        services: Services = app.state.herald
        # The worker's clock moves during its tick (as a worker process's does).
        sending = asyncio.create_task(
            worker.run_tick(
                services.database,
                clock.now(),
                [workspace.workspace_id],
                services.settings,
                clock=services.clock,
                streaks=Streaks(),
            )
        )
        assert await asyncio.to_thread(webhook.entered.wait, 10)
        clock.advance(seconds=8)  # the receiver takes 8 s to answer
        answered = clock.now()
        webhook.release()
        await sending
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.next_attempt_at) == ("PENDING", 1, answered + RETRY)

    async def test_a_message_not_handed_over_keeps_its_last_attempts_reason(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Not handed over the next time (its connector down earlier in that batch): the row still
        # says why its attempt failed, not only that nothing was tried this time.
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana"))
        webhook.status = 503
        await publish(client, workspace, PUSH)
        await tick(app, workspace)
        [row] = await outbox_rows(app, workspace)
        slot = Slot(Channel.PUSH, None, "default", "variation_1")
        envelope = Envelope(
            row.id, row.workspace_id, row.campaign_id, False, slot, Recipient("ana", "t"), {}, clock.now()
        )
        down = Outcome(
            False, "Not attempted: connector 'hooks' failed earlier", transient=True, attempted=False
        )
        services: Services = app.state.herald
        due = clock.now() + RETRY
        await outbox.record_settled(services.database, [outbox.Settled(envelope, down, due, 1)], clock.now())
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.failure_reason) == ("PENDING", 1, "The webhook answered 503.")
        # One never attempted says why it waits.
        await outbox.record_settled(services.database, [outbox.Settled(envelope, down, due, 0)], clock.now())
        [row] = await outbox_rows(app, workspace)
        assert (row.attempts, row.failure_reason) == (0, down.reason)

    async def test_a_retry_keeps_the_messages_first_moment_and_push_expiry(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        """The message a receiver gets again (same id) says when it was made, and expires when it
        would have: its second attempt is not a new message. The signature's timestamp is the
        attempt's own (a receiver bounds how old a signature may be)."""
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana"))
        body = copy.deepcopy(PUSH)
        body["advanced"] = {
            "expiration_settings": {
                "expire_notification_after_value": 2,
                "expire_notification_after_type": "HOUR",
            }
        }
        webhook.status = 503
        made = clock.now()
        await publish(client, workspace, body)
        await tick(app, workspace)
        webhook.status = 204
        clock.advance(RETRY)
        await tick(app, workspace)
        first, second = (request.json() for request in webhook.received)
        assert first["id"] == second["id"]
        assert first["created_at"] == second["created_at"] == rfc3339(made)
        expires = rfc3339(made + timedelta(hours=2))
        assert first["advanced"]["expires_at"] == second["advanced"]["expires_at"] == expires
        stamps = [request.headers["X-Herald-Timestamp"] for request in webhook.received]
        assert stamps == [str(int(made.timestamp())), str(int((made + RETRY).timestamp()))]

    async def test_attempts_are_bounded_and_the_wait_doubles(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana"))
        webhook.status = 429
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        clock.advance(RETRY)
        await tick(app, workspace)
        [row] = await outbox_rows(app, workspace)
        assert (row.attempts, row.next_attempt_at) == (2, clock.now() + 2 * RETRY)
        clock.advance(2 * RETRY)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert len(webhook.received) == 3
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts) == ("FAILED", 3)
        assert row.failure_reason == "Gave up after 3 attempts: The webhook answered 429."
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["sent"], run["failed"]) == (0, 1)
        # Why, without the outbox: the reason its users failed with, counted.
        assert run["failures"] == [{"reason": row.failure_reason, "users": 1}]

    @pytest.mark.parametrize(
        ("retry_after", "wait"),
        [
            ("120", timedelta(seconds=120)),  # longer than the backoff: as asked
            ("5", RETRY),  # shorter: never sooner than the backoff
            ("Tue, 15 Nov 1994 08:12:31 GMT", RETRY),  # a date gone by: the backoff
            ("soon", RETRY),  # unreadable: the backoff
            ("99999999", timedelta(hours=1)),  # within the longest wait (3,600 s by default)
            ("9" * 5000, timedelta(hours=1)),
            ("\u00b2", RETRY),  # a digit to str.isdigit, not to int(): unreadable
        ],
    )
    async def test_a_retry_after_is_honoured_within_the_longest_wait(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        retry_after: str,
        wait: timedelta,
    ) -> None:
        # The receiver said when to come back; it was asked again after the usual 30 s.
        row = await _answered_once(app, client, workspace, webhook, 429, retry_after)
        assert (row.attempts, row.next_attempt_at) == (1, clock.now() + wait)

    async def test_a_retry_after_date_is_read_against_the_clock(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        later = format_datetime(clock.now() + timedelta(minutes=10), usegmt=True)
        row = await _answered_once(app, client, workspace, webhook, 503, later)
        assert row.next_attempt_at == clock.now() + timedelta(minutes=10)
        clock.advance(minutes=9)
        await tick(app, workspace)
        assert len(webhook.received) == 1
        webhook.status, webhook.answer_headers = 204, {}
        clock.advance(minutes=1)
        await tick(app, workspace)
        assert len(webhook.received) == 2
        [row] = await outbox_rows(app, workspace)
        assert row.status == "SENT"

    async def test_a_4xx_is_final(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana"))
        webhook.status = 400
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.failure_reason) == ("FAILED", 1, "The webhook answered 400.")


class TestSmtp:
    async def test_a_4xx_reply_is_attempted_again_and_a_5xx_is_final(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        clock: FrozenClock,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        sink = smtp_server.controller.handler
        sink.refuse_rcpt = "451 4.3.0 Try again later"
        first = await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts) == ("PENDING", 1)
        assert "451" in (row.failure_reason or "")
        sink.refuse_rcpt = None
        clock.advance(RETRY)
        await tick(app, workspace)
        assert await status(client, workspace, first) == "SENT"
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["ana@example.com"]]

        sink.refuse_rcpt = "550 5.1.1 No such user"
        body = copy.deepcopy(EMAIL)
        body["basic_details"]["name"] = "Summer"
        second = await publish(client, workspace, body)
        await tick(app, workspace)
        assert await status(client, workspace, second) == "SENT"
        rows = [r for r in await outbox_rows(app, workspace) if r.campaign_id == second]
        assert [(r.status, r.attempts) for r in rows] == [("FAILED", 1)]
        assert "550" in (rows[0].failure_reason or "")

    @pytest.mark.parametrize("reply", ["450 4.2.1 Try later", "550 5.1.1 No such mailbox"])
    async def test_a_refused_cc_neither_fails_nor_repeats_the_users_mail(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        clock: FrozenClock,
        reply: str,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        smtp_server.sink.refuse_addresses = {"cc@shop.example": reply}
        body = copy.deepcopy(EMAIL)
        body["campaign_content"]["content"]["email"]["cc_ids"] = ["cc@shop.example"]
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        clock.advance(RETRY * 4)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["ana@example.com"]]
        assert smtp_server.received[0].message["Cc"] == "cc@shop.example"
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.failure_reason) == ("SENT", 1, None)
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["retrying"], run["sent"], run["failed"]) == ("DONE", 0, 1, 0)


class TestErrorThreshold:
    async def test_a_failing_connector_pauses_the_execution_until_resumed(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
        database_url: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i:02d}" for i in range(10))))
        webhook.status = 502
        campaign_id = await publish(client, workspace, PUSH)
        # One message at a time: three failed attempts in a row (the threshold), then nobody else
        # is attempted. (With more in flight, those already on their way are answered first.)
        await tick(app, workspace, one_at_a_time=True)
        assert len(webhook.received) == 3
        assert await status(client, workspace, campaign_id) == "SENDING"
        run = await _run(await stats(client, workspace, campaign_id))
        assert run["status"] == "PAUSED"
        assert run["reason"] == (
            "Connector 'push-gw' failed 3 attempts in a row; the last: The webhook answered 502."
        )
        assert (run["pending"], run["retrying"], run["sent"], run["failed"]) == (10, 3, 0, 0)
        clock.advance(hours=1)
        await tick(app, workspace)  # paused: even the retries that are due wait
        assert len(webhook.received) == 3

        webhook.status = 204  # the receiver is fixed; an operator resumes the delivery
        monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
        runner = CliRunner()
        args = ["campaigns", "resume-delivery", campaign_id, "-w", workspace.workspace_id]
        resumed = await asyncio.to_thread(runner.invoke, cli, args)
        assert resumed.exit_code == 0, resumed.output
        assert f"resumed the delivery of {campaign_id}" in resumed.output
        again = await asyncio.to_thread(runner.invoke, cli, args)
        assert again.exit_code == 1
        assert "no paused delivery" in again.output

        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        ids = _ids(webhook)
        assert len(ids) == 13
        assert len(set(ids)) == 10
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["reason"], run["sent"]) == ("DONE", None, 10)

    async def test_failures_over_several_ticks_add_up_to_the_threshold(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        clock: FrozenClock,
    ) -> None:
        # Two users answered 451 at every attempt: two failures a tick, below the threshold (3).
        # The first retry at the next tick makes three in a row through the connector: the other
        # is not attempted, and the execution pauses instead of spending their last attempts.
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "ana", "email": "ana@example.com"},
            {"customer_id": "bo", "email": "bo@example.com"},
        )
        smtp_server.controller.handler.refuse_rcpt = "451 4.3.0 Try again later"
        campaign_id = await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["retrying"]) == ("DISPATCHING", 2)

        clock.advance(RETRY)
        await tick(app, workspace)
        run = await _run(await stats(client, workspace, campaign_id))
        assert run["status"] == "PAUSED"
        assert run["reason"].startswith("Connector 'mail' failed 3 attempts in a row; the last: ")
        assert "451" in run["reason"]
        # Both wait for their next attempt, the one not attempted again too (released by the
        # pause as it was: decided, its message written, not a user to decide again).
        assert (run["pending"], run["retrying"]) == (2, 2)
        clock.advance(hours=1)
        await tick(app, workspace)  # paused: the retries due wait
        assert sorted(row.attempts for row in await outbox_rows(app, workspace)) == [1, 2]

    async def test_an_execution_paused_while_its_last_users_were_on_the_wire_is_done(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # Another worker's failures reach the threshold while this one's window carries the last
        # two users: it pauses the execution, and then the two are refused for good (two failures
        # here, under the threshold). Nobody is left to pause for: the next tick ends it, and the
        # campaign is SENT rather than SENDING until someone resumes a delivery with nothing left.
        services: Services = app.state.herald
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("u0", "u1"))
        webhook.status = 400
        campaign_id = await publish(client, workspace, PUSH)
        webhook.hold()
        ticking = asyncio.create_task(tick(app, workspace))
        try:
            await _until(lambda: webhook.held == 2, "the last two users on the wire")
            async with services.database.reader() as session:
                execution = await session.scalar(
                    select(Execution).where(Execution.workspace_id == workspace.workspace_id)
                )
                connector = await session.scalar(
                    select(Connector).where(Connector.workspace_id == workspace.workspace_id)
                )
            assert execution is not None
            assert connector is not None
            await pause(services.database, execution, connector, "failing", services.clock.now())
        finally:
            webhook.release()
            await ticking
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["pending"], run["failed"]) == ("PAUSED", 0, 2)

        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["reason"], run["failed"], run["progress"]) == ("DONE", None, 2, 100.0)
        assert len(webhook.received) == 2

    async def test_a_pause_leaves_the_retries_it_did_not_reach_retrying(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Ten users answered 502 under a threshold of 10: all ten wait for a retry, and the
        # execution pauses. Resumed (the receiver still failing) with a threshold of 3, their
        # retries are claimed, three fail, and the pause leaves the other seven as they were:
        # waiting for their next attempt, not users to decide again.
        services: Services = app.state.herald
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i}" for i in range(10))))
        webhook.status = 502
        campaign_id = await publish(client, workspace, PUSH)
        one_at_a_time = dataclasses.replace(settings, delivery_concurrency=1)
        first = dataclasses.replace(one_at_a_time, delivery_error_threshold=10)
        now = services.clock.now()
        await worker.run_tick(services.database, now, [workspace.workspace_id], first, streaks=Streaks())
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["pending"], run["retrying"]) == ("PAUSED", 10, 10)

        async with services.database.writer() as session:
            assert await resume(session, workspace.workspace_id, campaign_id, services.clock.now()) == 1
            await session.commit()
        clock.advance(RETRY)
        now = services.clock.now()
        await worker.run_tick(
            services.database, now, [workspace.workspace_id], one_at_a_time, streaks=Streaks()
        )
        assert len(webhook.received) == 13
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["pending"], run["retrying"]) == ("PAUSED", 10, 10)

        webhook.status = 204  # fixed and resumed: each user's one message, under its one id
        async with services.database.writer() as session:
            await resume(session, workspace.workspace_id, campaign_id, services.clock.now())
            await session.commit()
        clock.advance(RETRY * 2)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert len(set(_ids(webhook))) == 10
        assert len(webhook.received) == 23
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["sent"], run["pending"]) == ("DONE", 10, 0)

    async def test_a_throttled_campaign_pauses_when_its_failures_reach_the_threshold(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Two messages a minute, each refused for good: the third refusal, a minute after the
        # first two, reaches the threshold; the fourth message is not attempted, and the rest of
        # the audience is kept.
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i}" for i in range(8))))
        webhook.status = 400
        body = copy.deepcopy(PUSH)
        body["delivery_controls"] = {"campaign_throttle_rpm": 2}
        campaign_id = await publish(client, workspace, body)
        await tick(app, workspace)
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["failed"], run["pending"]) == ("DISPATCHING", 2, 6)

        clock.advance(THROTTLE_WINDOW)
        await tick(app, workspace)
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["failed"], run["pending"]) == ("PAUSED", 3, 5)
        assert run["reason"] == (
            "Connector 'push-gw' failed 3 attempts in a row; the last: The webhook answered 400."
        )
        clock.advance(THROTTLE_WINDOW)
        await tick(app, workspace)
        assert len(webhook.received) == 3

    async def test_the_failures_of_every_worker_add_up_to_the_threshold(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # Two worker processes (each with its own view of the streaks) take turns, two messages a
        # minute. The threshold is 3.
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i}" for i in range(10))))
        body = copy.deepcopy(PUSH)
        body["delivery_controls"] = {"campaign_throttle_rpm": 2}
        campaign_id = await publish(client, workspace, body)
        services: Services = app.state.herald
        first, second, third = Streaks(), Streaks(), Streaks()

        async def turn(streaks: Streaks, answer: int) -> dict[str, Any]:
            webhook.status = answer
            now = services.clock.now()
            await worker.run_tick(
                services.database, now, [workspace.workspace_id], services.settings, streaks=streaks
            )
            clock.advance(THROTTLE_WINDOW)
            return await _run(await stats(client, workspace, campaign_id))

        assert (await turn(first, 400))["status"] == "DISPATCHING"  # two refusals
        # The second worker's successes end the streak, for every worker: its own two refusals
        # after them make two in a row, not four.
        assert (await turn(second, 204))["sent"] == 2
        assert (await turn(second, 400))["status"] == "DISPATCHING"
        # A third worker, which saw none of them itself, has room for one request only (the
        # shared row holds the two in a row): its refusal makes three, and nothing more is sent.
        run = await turn(third, 400)
        assert (run["status"], run["failed"], run["sent"], run["pending"]) == ("PAUSED", 5, 2, 3)
        assert run["reason"] == (
            "Connector 'push-gw' failed 3 attempts in a row; the last: The webhook answered 400."
        )
        assert len(webhook.received) == 7

    async def test_no_request_is_made_once_the_threshold_is_reached(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # The connector answers well, so every lane is used and more requests are let on their
        # way than there are lanes; then the receiver fails every request in flight. Those waiting
        # for a lane went out too, after the threshold (3) was reached: 16 of them on 32 lanes.
        engine_settings = dataclasses.replace(settings, delivery_concurrency=8)
        services: Services = app.state.herald
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i:03d}" for i in range(200))))
        campaign_id = await publish(client, workspace, PUSH)
        webhook.hold()
        ticking = asyncio.create_task(
            worker.run_tick(
                services.database, services.clock.now(), [workspace.workspace_id], engine_settings
            )
        )
        try:
            await _until(lambda: webhook.held == 3, "the first requests, the threshold's worth")
            webhook.release()  # answered well: every lane may be used
            webhook.hold()
            await _until(lambda: webhook.held == 8, "every lane in flight")
            in_flight = len(webhook.received)
            webhook.status = 502
        finally:
            webhook.release()
            await ticking
        run = await _run(await stats(client, workspace, campaign_id))
        assert run["status"] == "PAUSED"
        # Each answer counts as it comes: while the first two failures were counted, a lane freed
        # by one may have carried one more request; none after the third.
        assert len(webhook.received) - in_flight <= 2

    async def test_a_success_gives_the_connector_every_lane_again(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        settings: Settings,
        workspace: Tenant,
        webhook: HttpReceiver,
    ) -> None:
        # A streak under the threshold, read from the shared row, then successes: the worker kept
        # the count it had read, and with it held its requests under what it left of the
        # threshold (4 of 8 lanes here; 4 of 32 after a streak of 16), for good.
        engine_settings = dataclasses.replace(settings, delivery_error_threshold=10, delivery_concurrency=8)
        services: Services = app.state.herald
        streaks = Streaks()  # one worker's, across its ticks

        async def worker_tick() -> None:
            now = services.clock.now()
            await worker.run_tick(
                services.database, now, [workspace.workspace_id], engine_settings, streaks=streaks
            )

        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i:02d}" for i in range(6))))
        webhook.status = 503
        await publish(client, workspace, PUSH)
        await worker_tick()
        assert len(webhook.received) == 6  # six in a row, under the threshold
        webhook.reset()
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i:02d}" for i in range(6, 20))))
        second = await publish(client, workspace, PUSH)
        await worker_tick()
        assert (await _run(await stats(client, workspace, second)))["sent"] == 20
        webhook.reset()
        webhook.hold()
        await publish(client, workspace, PUSH)
        ticking = asyncio.create_task(worker_tick())
        try:
            await _until(lambda: len(webhook.received) == 8, "every lane in use")
        finally:
            webhook.release()
            await ticking

    @pytest.mark.own_database  # the worker scans every workspace
    async def test_the_worker_counts_failures_across_its_ticks(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # The worker loop of `herald worker` and of the engine embedded in `herald serve`: one
        # count of failures in a row for its life, not one per tick.
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("ana", "bo"))
        webhook.status = 503
        services: Services = app.state.herald
        stop = asyncio.Event()
        task = asyncio.create_task(
            worker.run_forever(services.database, services.clock, HOUR, stop, services.settings)
        )
        try:
            campaign_id = await publish(client, workspace, PUSH)  # wakes the worker
            await _until(lambda: len(webhook.received) == 2, "the first attempts")

            async def recorded() -> bool:  # the retries' moments run from the answers, recorded
                rows = await outbox_rows(app, workspace)
                return len(rows) == 2 and all(row.next_attempt_at is not None for row in rows)

            await _until_async(recorded, "the first attempts' outcomes are recorded")
            clock.advance(RETRY)
            wake.wake_here(workspace.workspace_id)
            await _until(lambda: len(webhook.received) == 3, "the first retry")
            await _until_async(
                lambda: _status_is(client, workspace, campaign_id, "PAUSED"), "the execution pauses"
            )
        finally:
            stop.set()
            await task

    async def test_no_more_than_the_threshold_fail_before_the_pause(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        # Many lanes, and a connector that has not yet answered well: no more requests are on
        # their way at once than the threshold (3) leaves room for, so exactly three fail before
        # the pause, not every lane's (and every window's written ahead).
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i:03d}" for i in range(200))))
        webhook.status = 502
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        run = await _run(await stats(client, workspace, campaign_id))
        assert run["status"] == "PAUSED"
        assert len(webhook.received) == 3
        assert run["reason"] == (
            "Connector 'push-gw' failed 3 attempts in a row; the last: The webhook answered 502."
        )

    async def test_a_failed_batched_post_is_one_attempt_of_the_threshold(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        clock: FrozenClock,
    ) -> None:
        # One POST carrying 10 messages, answered 502 once: one failed attempt (the threshold is
        # 3), retried whole after the backoff, not a connector failing 10 times in a row.
        given = ConnectorInput(
            "push-gw",
            "CUSTOM_API",
            channel="push",
            url=webhook.url,
            secret=HOOK_SECRET,
            timeout=5,
            batch_size=10,
        )
        await add_connector(app, workspace, given)
        await add_users(app, workspace.workspace_id, *_android(*(f"u{i}" for i in range(10))))
        webhook.status = 502
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["retrying"], run["reason"]) == ("DISPATCHING", 10, None)
        webhook.status = 204
        clock.advance(RETRY)
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        assert [len(request.json()) for request in webhook.received] == [10, 10]

    async def test_stop_ends_a_paused_execution(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("a", "b", "c", "d"))
        webhook.status = 500
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert (await _run(await stats(client, workspace, campaign_id)))["status"] == "PAUSED"
        response = await h.action(client, workspace, campaign_id, "STOP")
        assert response.status_code == 200, response.text
        await tick(app, workspace)
        assert (await _run(await stats(client, workspace, campaign_id)))["status"] == "STOPPED"


class TestRetriesThatNeverCome:
    """A message waiting for its next attempt when nobody will attempt it again: its outbox row
    is settled FAILED with why, rather than left PENDING (outcome unknown) for ever."""

    async def test_stop_of_a_paused_execution_fails_the_rows_waiting_for_a_retry(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        await add_users(app, workspace.workspace_id, *_android("a", "b", "c", "d"))
        webhook.status = 500
        campaign_id = await publish(client, workspace, PUSH)
        await tick(app, workspace)
        assert (await _run(await stats(client, workspace, campaign_id)))["status"] == "PAUSED"
        waiting = [row.id for row in await outbox_rows(app, workspace)]
        assert waiting

        response = await h.action(client, workspace, campaign_id, "STOP")
        assert response.status_code == 200, response.text
        await tick(app, workspace)
        rows = await outbox_rows(app, workspace)
        assert [(row.id, row.status, row.next_attempt_at) for row in rows] == [
            (row_id, "FAILED", None) for row_id in waiting
        ]
        # Three attempted (the threshold), the fourth never handed over.
        reasons = sorted(row.failure_reason or "" for row in rows)
        assert reasons == [
            "Not handed over: connector 'push-gw' failed 3 attempts in a row.",
            *["The campaign was stopped before the next attempt; the last attempt: The webhook answered 500."]
            * 3,
        ]
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["unsent"], run["failed"], run["pending"]) == ("STOPPED", 4, 0, 0)

    async def test_stop_while_retrying_fails_the_row_waiting_for_its_retry(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        clock: FrozenClock,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
        smtp_server.controller.handler.refuse_rcpt = "451 4.3.0 Try again later"
        campaign_id = await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        assert (await _run(await stats(client, workspace, campaign_id)))["retrying"] == 1

        response = await h.action(client, workspace, campaign_id, "STOP")
        assert response.status_code == 200, response.text
        await tick(app, workspace)
        clock.advance(RETRY)
        await tick(app, workspace)
        [row] = await outbox_rows(app, workspace)
        assert (row.status, row.attempts, row.next_attempt_at) == ("FAILED", 1, None)
        assert (row.failure_reason or "").startswith(
            "The campaign was stopped before the next attempt; the last attempt: "
        )
        assert "451" in (row.failure_reason or "")
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["status"], run["unsent"], run["failed"], run["retrying"]) == ("STOPPED", 1, 0, 0)

    async def test_a_connector_removed_while_paused_fails_the_rows_waiting_for_a_retry(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        smtp_server: SmtpServer,
        clock: FrozenClock,
        database_url: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
        people = [{"customer_id": f"u{i}", "email": f"u{i}@example.com"} for i in range(3)]
        await add_users(app, workspace.workspace_id, *people)
        smtp_server.controller.handler.refuse_rcpt = "451 4.3.0 Try again later"
        campaign_id = await publish(client, workspace, EMAIL)
        await tick(app, workspace)
        assert (await _run(await stats(client, workspace, campaign_id)))["status"] == "PAUSED"

        monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
        runner = CliRunner()
        for args in (
            ["connectors", "remove", "-w", workspace.workspace_id, "mail", "--force"],
            ["campaigns", "resume-delivery", campaign_id, "-w", workspace.workspace_id],
        ):
            done = await asyncio.to_thread(runner.invoke, cli, args)
            assert done.exit_code == 0, done.output
        clock.advance(RETRY)  # the retries are due
        await tick(app, workspace)
        assert await status(client, workspace, campaign_id) == "SENT"
        run = await _run(await stats(client, workspace, campaign_id))
        assert (run["failed"], run["pending"]) == (3, 0)
        rows = await outbox_rows(app, workspace)
        assert [(row.status, row.next_attempt_at) for row in rows] == [("FAILED", None)] * 3
        # The reason they failed for, as the users' own: not the last attempt's 451.
        [reason] = {row.failure_reason for row in rows}
        assert reason == "No connector named 'mail' is configured in this workspace (configured: none)."
