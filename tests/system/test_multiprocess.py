"""Exactness across processes: two `herald serve` processes of two workers each on one PostgreSQL + Redis.

These start real servers on loopback and talk HTTP to them. Time is a shared file clock
(HERALD_CLOCK_FILE), moved by the test instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import select

from herald.audience.models import User
from herald.campaigns.models import Campaign
from herald.config import Settings
from herald.db import create_database
from herald.http.idempotency import COMPLETED, IdempotencyRecord
from herald.offers.models import Offer
from herald.workspaces import service as workspaces_service
from herald.workspaces.scopes import Scope
from tests.factories import Tenant
from tests.offers.builders import offer_body
from tests.system.cluster import Cluster, Server, two_servers

PG_URL = os.environ.get("HERALD_TEST_DATABASE_URL")
REDIS_URL = os.environ.get("HERALD_TEST_REDIS_URL")
pytestmark = pytest.mark.skipif(
    not (PG_URL and REDIS_URL),
    reason="multi-process tests need HERALD_TEST_DATABASE_URL and HERALD_TEST_REDIS_URL (shared state)",
)
BODY = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "ana@example.com"}
OPEN = {
    "campaign_create": "100000/second",
    "campaign_create_success": "100000/minute",
    "campaign_ops": "100000/second",
}


@pytest.fixture(scope="module")
def cluster(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with two_servers(database_url, str(REDIS_URL), tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes


def _tenant(
    database_url: str, limits: dict[str, str] | None = None, features: dict[str, bool] | None = None
) -> Tenant:
    async def make() -> Tenant:
        database = create_database(Settings(database_url=database_url))
        try:
            async with database.writer() as session:
                now = datetime.now(UTC)
                workspace = await workspaces_service.create_workspace(
                    session, now, "mp", f"MP{uuid.uuid4().hex[:10].upper()}", features
                )
                for bucket, spec in (limits or {}).items():
                    await workspaces_service.set_rate_limit(session, workspace.id, bucket, spec)
                issued = await workspaces_service.create_api_key(session, now, workspace.id, list(Scope))
                await session.commit()
                return Tenant(workspace.id, issued.secret, issued.key.id)
        finally:
            await database.dispose()

    return asyncio.run(make())


Row = TypeVar("Row", Campaign, Offer, IdempotencyRecord, User)


def _rows(database_url: str, model: type[Row], workspace_id: str) -> list[Row]:
    """Every row of `model` in the workspace, read straight from the database."""

    async def load() -> list[Row]:
        database = create_database(Settings(database_url=database_url))
        try:
            async with database.reader() as session:
                query = select(model).where(model.workspace_id == workspace_id)
                return list((await session.scalars(query)).all())
        finally:
            await database.dispose()

    return asyncio.run(load())


def _campaigns(database_url: str, workspace_id: str) -> list[Campaign]:
    return _rows(database_url, Campaign, workspace_id)


def _offers(database_url: str, workspace_id: str) -> list[Offer]:
    return _rows(database_url, Offer, workspace_id)


def _records(database_url: str, workspace_id: str) -> list[IdempotencyRecord]:
    return _rows(database_url, IdempotencyRecord, workspace_id)


def _burst(servers: list[Server], calls: list[tuple[str, str, dict[str, str], Any]]) -> list[httpx.Response]:
    """Send every call at once, spread round-robin over the servers."""

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30.0) as http:
            return await asyncio.gather(
                *(
                    http.request(method, servers[index % len(servers)].url + path, headers=headers, json=body)
                    for index, (method, path, headers, body) in enumerate(calls)
                )
            )

    return asyncio.run(run())


def test_fifty_identical_creates_with_one_key_make_one_campaign(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, OPEN)
    headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
    responses = _burst(cluster.servers, [("POST", "/v5/campaigns", headers, BODY)] * 50)
    assert {response.status_code for response in responses} <= {201, 409}
    fresh = [r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r.headers]
    assert len(fresh) == 1
    for response in responses:
        if response.status_code == 201:
            assert response.json()["data"] == fresh[0].json()["data"]
        else:
            assert response.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
    assert len(_campaigns(database_url, tenant.workspace_id)) == 1


def test_concurrent_repeats_of_a_completed_keyed_create_are_each_replayed(
    cluster: Cluster, database_url: str
) -> None:
    # Each repeat takes the key's lock only to read its record: those that found the lock busy
    # answered 409 DUPLICATE_IDEMPOTENCY_KEY ("still in progress") for a request long completed.
    tenant = _tenant(database_url, OPEN)
    headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
    [first] = _burst(cluster.servers, [("POST", "/v5/campaigns", headers, BODY)])
    assert first.status_code == 201, first.text
    repeats = _burst(cluster.servers, [("POST", "/v5/campaigns", headers, BODY)] * 40)
    assert [r.status_code for r in repeats] == [201] * 40, [r.text for r in repeats if r.status_code != 201]
    assert all(r.headers.get("Idempotent-Replayed") == "true" for r in repeats)
    assert {r.json()["data"]["id"] for r in repeats} == {first.json()["data"]["id"]}
    other = {**BODY, "created_by": "someone.else@example.com"}
    conflicts = _burst(cluster.servers, [("POST", "/v5/campaigns", headers, other)] * 40)
    assert {r.json()["error"]["code"] for r in conflicts} == {"IDEMPOTENCY_CONFLICT"}
    assert {r.status_code for r in conflicts} == {409}
    assert len(_campaigns(database_url, tenant.workspace_id)) == 1


def test_rate_limit_admits_exactly_the_limit_across_processes(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url)  # C2: 10 per second
    path = f"/v5/campaigns/{'0' * 24}"
    responses = _burst(cluster.servers, [("GET", path, tenant.headers(campaigns=True), None)] * 30)
    statuses = [response.status_code for response in responses]
    assert statuses.count(404) == 10
    assert statuses.count(429) == 20
    retry_after = max(int(r.headers["Retry-After"]) for r in responses if r.status_code == 429)
    assert retry_after == 1
    refused = _burst(cluster.servers, [("GET", path, tenant.headers(campaigns=True), None)])
    assert refused[0].status_code == 429
    cluster.advance(timedelta(seconds=retry_after))
    admitted = _burst(cluster.servers, [("GET", path, tenant.headers(campaigns=True), None)])
    assert admitted[0].status_code == 404


def test_success_quota_is_exact_across_processes(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, {"campaign_create": "100000/second"})
    calls = [("POST", "/v5/campaigns", tenant.write_headers(campaigns=True), BODY) for _ in range(50)]
    statuses = [response.status_code for response in _burst(cluster.servers, calls)]
    assert statuses.count(201) == 5
    assert statuses.count(429) == 45
    assert len(_campaigns(database_url, tenant.workspace_id)) == 5


def test_request_id_reuse_is_blocked_across_processes(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, OPEN)
    body = {**BODY, "request_id": "same-request"}
    calls = [("POST", "/v5/campaigns", tenant.write_headers(campaigns=True), body) for _ in range(50)]
    responses = _burst(cluster.servers, calls)
    statuses = [response.status_code for response in responses]
    assert statuses.count(201) == 1
    assert statuses.count(409) == 49
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"DUPLICATE_REQUEST_ID"}
    assert len(_campaigns(database_url, tenant.workspace_id)) == 1


def _kill_mid_burst(
    victim: Server, path: str, tenant: Tenant, bodies: dict[str, dict[str, Any]], kill_after: int
) -> dict[str, str]:
    """POST every body (keyed by its Idempotency-Key) to `victim`, 12 at a time, and SIGKILL it once
    `kill_after` creates were acknowledged. Returns key -> id of every acknowledged create."""
    acknowledged: dict[str, str] = {}

    async def burst() -> None:
        async with httpx.AsyncClient(timeout=30.0) as http:
            semaphore = asyncio.Semaphore(12)

            async def create(key: str) -> None:
                async with semaphore:
                    try:
                        response = await http.post(
                            victim.url + path,
                            json=bodies[key],
                            headers=tenant.headers(
                                campaigns=path.startswith("/v5/campaigns"), idempotency_key=key
                            ),
                        )
                    except httpx.TransportError:
                        return
                if response.status_code == 201:
                    acknowledged[key] = response.json()["data"]["id"]
                    if len(acknowledged) == kill_after:
                        victim.kill()

            await asyncio.gather(*(create(key) for key in bodies))

    asyncio.run(burst())
    victim.kill()
    assert len(acknowledged) >= kill_after
    return acknowledged


def test_kill_9_mid_burst_leaves_only_whole_rows(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, OPEN)
    victim = cluster.start(workers=1)
    keys = [str(uuid.uuid4()) for _ in range(120)]
    bodies = {key: {**BODY, "basic_details": {"name": key, "tags": ["t1", "t2"]}} for key in keys}
    acknowledged = _kill_mid_burst(victim, "/v5/campaigns", tenant, bodies, kill_after=30)

    rows = _campaigns(database_url, tenant.workspace_id)
    stored = {row.id: row for row in rows}
    assert set(acknowledged.values()) <= set(stored)  # every acknowledged write is present
    for row in rows:  # every stored row is whole
        assert row.status == "DRAFT"
        assert row.components["basic_details"]["tags"] == ["t1", "t2"]
        assert row.name == row.components["basic_details"]["name"]
    records = _records(database_url, tenant.workspace_id)
    # The key is claimed in the request's transaction: the killed requests left no claim behind.
    assert {r.state for r in records} <= {COMPLETED}
    completed = {r.key: json.loads(r.body or b"{}")["data"]["id"] for r in records}
    # Effect and record commit together: a campaign exists exactly when its key's record is complete.
    assert set(completed.values()) == set(stored)
    assert {stored[campaign_id].name for campaign_id in completed.values()} == set(completed)

    # At once (no lease to wait out), every interrupted key can be retried and lands exactly once.
    calls = [
        ("POST", "/v5/campaigns", tenant.headers(campaigns=True, idempotency_key=key), bodies[key])
        for key in keys
    ]
    retried = _burst(cluster.servers[:2], calls)
    assert {response.status_code for response in retried} == {201}
    final = _campaigns(database_url, tenant.workspace_id)
    assert len(final) == len(keys)
    assert sorted(row.name or "" for row in final) == sorted(keys)


def test_kill_9_mid_burst_of_offer_creates_leaves_only_whole_offers(
    cluster: Cluster, database_url: str
) -> None:
    tenant = _tenant(database_url, {"offers_write": "100000/second"})
    victim = cluster.start(workers=1)
    keys = [str(uuid.uuid4()) for _ in range(120)]
    names = {key: f"Kill_{index:04d}" for index, key in enumerate(keys)}
    bodies = {key: offer_body(cluster.now, names[key]) for key in keys}
    acknowledged = _kill_mid_burst(victim, "/v5/offers", tenant, bodies, kill_after=30)

    offers = {row.id: row for row in _offers(database_url, tenant.workspace_id)}
    assert {public_id.removeprefix("offer_") for public_id in acknowledged.values()} <= set(offers)
    by_name = {names[key]: key for key in keys}
    for row in offers.values():  # every stored offer is whole: columns and document as sent
        sent = bodies[by_name[row.name]]
        assert {
            **row.document,
            "name": row.name,
            "priority": row.priority,
            "created_by": row.created_by,
        } == sent
    records = _records(database_url, tenant.workspace_id)
    assert {r.state for r in records} <= {COMPLETED}
    completed = {r.key: json.loads(r.body or b"{}")["data"]["id"] for r in records}
    assert {public_id.removeprefix("offer_") for public_id in completed.values()} == set(offers)

    calls = [("POST", "/v5/offers", tenant.headers(idempotency_key=key), bodies[key]) for key in keys]
    retried = _burst(cluster.servers[:2], calls)
    assert {response.status_code for response in retried} == {201}
    assert sorted(row.name for row in _offers(database_url, tenant.workspace_id)) == sorted(names.values())
