"""Resolution in chunks: the database ranks users exactly as `rank.rank_of` does (on the engine
under test), and an execution prepared and half written is already DISPATCHING, shows every user of
its audience in its stats, and ends with each user sent once and the control group exact."""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, literal, select

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import Channel, DeliveryType
from herald.campaigns.validation import load_document
from herald.delivery.engine.models import ExecutionUser
from herald.delivery.engine.rank import rank_of
from herald.delivery.engine.ranking import in_global_control_sql, rank_sql
from herald.delivery.engine.resolve import (
    LiveCampaign,
    prepare,
    resolve_chunk,
    start_execution,
)
from herald.delivery.engine.split import control_group_size, in_global_control
from herald.services import Services
from tests.delivery.builders import push_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver
from tests.delivery.test_engine_controls import push_users, receivers
from tests.delivery.test_engine_send import PUSH, publish, stats, tick
from tests.factories import Tenant

# Ids with the characters that could make two hashes of different inputs meet: separators, NUL's
# neighbours, multi-byte UTF-8.
IDS = ["u1", "a:b", "a\x01b", "ü-ß-漢字", "x" * 200, " ", "\U0001f600", "0", "-1"]


async def _sql_ranks(app: FastAPI, key: str, ids: list[str], percentage: float) -> list[tuple[int, bool]]:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        dialect = session.get_bind().dialect.name
        found = []
        for customer_id in ids:
            held = in_global_control_sql(dialect, key, literal(customer_id), percentage)
            assert held is not None
            row = (await session.execute(select(rank_sql(dialect, key, literal(customer_id)), held))).one()
            found.append((int(row[0]), bool(row[1])))
        return found


class TestRankInSql:
    async def test_the_database_ranks_as_python_does(self, app: FastAPI) -> None:
        found = await _sql_ranks(app, "6560f0c2a1b2c3d4e5f60718", IDS, 37.5)
        assert found == [
            (rank_of("6560f0c2a1b2c3d4e5f60718", c), in_global_control("6560f0c2a1b2c3d4e5f60718", c, 37.5))
            for c in IDS
        ]

    async def test_any_id_ranks_the_same_in_sql(self, app: FastAPI) -> None:
        # Seeded: ids over the whole of Unicode but NUL (a text value on PostgreSQL cannot hold it)
        # and surrogates (not encodable).
        chosen = random.Random(13)
        alphabet = [chr(c) for c in (*range(1, 0xD800), *range(0xE000, 0x110000, 97))]
        ids = ["".join(chosen.choices(alphabet, k=chosen.randint(1, 40))) for _ in range(200)]
        for key, percentage in (("WS", 0.01), ("6560f0c2a1b2c3d4e5f60718", 50.0), ("k:\u00e9", 99.99)):
            found = await _sql_ranks(app, key, ids, percentage)
            assert found == [(rank_of(key, c), in_global_control(key, c, percentage)) for c in ids]


async def _live(app: FastAPI, workspace: Tenant, campaign_id: str) -> LiveCampaign:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        row = await session.scalar(
            select(Campaign).where(
                Campaign.workspace_id == workspace.workspace_id,
                Campaign.campaign_id == campaign_id,
                Campaign.is_latest,
            )
        )
        assert row is not None
    document, problems = load_document(Channel.PUSH, DeliveryType.ONE_TIME, row.components)
    assert document is not None, problems
    return LiveCampaign(workspace.workspace_id, campaign_id, "PUSH", document, dict(row.components or {}))


async def _written(app: FastAPI, execution_id: str) -> int:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        return int(
            await session.scalar(select(func.count()).where(ExecutionUser.execution_id == execution_id)) or 0
        )


class TestStart:
    async def test_workers_racing_to_start_a_run_start_it_once_and_log_it_once(
        self,
        app: FastAPI,
        client: httpx.AsyncClient,
        workspace: Tenant,
        webhook: HttpReceiver,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        await push_connector(app, workspace, webhook)
        campaign_id = await publish(client, workspace, copy.deepcopy(PUSH))
        services: Services = app.state.herald
        campaign = await _live(app, workspace, campaign_id)
        caplog.set_level(logging.INFO, logger="herald.delivery.engine")
        both = await asyncio.gather(
            *(start_execution(services.database, campaign, services.clock.now()) for _ in range(2))
        )
        assert both[0].id == both[1].id
        started = [record for record in caplog.records if "started (execution" in record.getMessage()]
        assert [record.getMessage().endswith(f"(execution {both[0].id})") for record in started] == [True]


class TestStreamedResolution:
    async def test_a_half_written_audience_is_sending_counted_and_finished_exactly_once(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 40)
        body: dict[str, Any] = copy.deepcopy(PUSH)
        body["control_group_details"] = {
            "is_campaign_control_group_enabled": True,
            "campaign_control_group_percentage": 20,
        }
        campaign_id = await publish(client, workspace, body)
        services: Services = app.state.herald
        now = services.clock.now()
        campaign = await _live(app, workspace, campaign_id)
        # A worker that prepared the execution and wrote its first chunk, then died.
        execution = await start_execution(services.database, campaign, now)
        execution = await prepare(services.database, campaign, execution, now, streaming=True)
        assert await resolve_chunk(services.database, campaign, execution, now, 10) is False
        assert await _written(app, execution.id) == 10
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["audience"], run["pending"]) == ("DISPATCHING", len(users), len(users))
        await tick(app, workspace)
        size = control_group_size(len(users), 20)
        held = set(sorted(users, key=lambda user: rank_of(campaign_id, user))[:size])
        assert receivers(webhook) == sorted(set(users) - held)  # each once, the control group left out
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["pending"], run["sent"]) == ("DONE", 0, len(users) - size)
        assert run["held_out"] == {"control_group": size, "global_control": 0}

    async def test_without_a_control_group_the_counts_come_with_the_second_chunk(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 30)
        await add_users(
            app,
            workspace.workspace_id,
            {"customer_id": "opted", "push_id": "tok-opted", "platform": "ANDROID", "push_opt_out": True},
            {"customer_id": "silent"},  # no push token
        )
        campaign_id = await publish(client, workspace, PUSH)
        services: Services = app.state.herald
        now = services.clock.now()
        campaign = await _live(app, workspace, campaign_id)
        execution = await start_execution(services.database, campaign, now)
        execution = await prepare(services.database, campaign, execution, now, streaming=True)
        assert execution.status == "DISPATCHING"  # nothing counted: the first chunk may go at once
        # Nobody known yet: nothing settled (not 100, as if nobody were left to send to).
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["audience"], run["pending"], run["progress"]) == ("DISPATCHING", 0, 0, 0.0)
        assert await resolve_chunk(services.database, campaign, execution, now, 10) is False
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        # Until the counts are taken, the stats show the users written so far.
        assert (run["audience"], run["pending"], run["suppressed"]["opted_out"]) == (10, 10, 0)
        assert await resolve_chunk(services.database, campaign, execution, now, 10) is False
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        suppressed = (run["suppressed"]["opted_out"], run["suppressed"]["no_address"])
        assert (run["audience"], run["pending"], suppressed) == (len(users) + 2, len(users), (1, 1))
        await tick(app, workspace)
        assert receivers(webhook) == sorted(users)
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["status"], run["audience"], run["sent"], run["pending"]) == ("DONE", 32, 30, 0)

    async def test_an_audience_within_the_first_chunk_is_counted_with_it(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
    ) -> None:
        await push_connector(app, workspace, webhook)
        users = await push_users(app, workspace, 5)
        await add_users(app, workspace.workspace_id, {"customer_id": "silent"})
        campaign_id = await publish(client, workspace, PUSH)
        services: Services = app.state.herald
        now = services.clock.now()
        campaign = await _live(app, workspace, campaign_id)
        execution = await start_execution(services.database, campaign, now)
        execution = await prepare(services.database, campaign, execution, now, streaming=True)
        assert await resolve_chunk(services.database, campaign, execution, now, 10) is True
        [run] = (await stats(client, workspace, campaign_id))["executions"]
        assert (run["audience"], run["pending"], run["suppressed"]["no_address"]) == (6, 5, 1)
        assert len(users) == 5
