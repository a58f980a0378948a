"""No lost updates: concurrent writers of one resource, through two `herald serve` processes of two
workers each on one PostgreSQL + Redis.

Every acknowledged write must be present afterwards, each acknowledged write of a campaign gets an
ETag of its own (its revision counts every write), and of several writers holding the same
`If-Match` ETag exactly one wins. Writes race for real: they are sent at once, spread over the
processes, so they interleave inside the database.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import User
from herald.campaigns.models import Campaign
from herald.config import Settings
from herald.db import create_database
from herald.delivery import connectors as delivery_connectors
from herald.delivery.config import ConnectorInput
from herald.http.limits import BUCKETS
from herald.workspaces import service as workspaces_service
from herald.workspaces.features import FEATURES as FEATURE_FLAGS
from herald.workspaces.models import Workspace
from tests.campaigns.payloads import PUSH_ONE_TIME, PUSH_PERIODIC
from tests.conftest import TEST_SECRET_KEY
from tests.factories import Tenant
from tests.system.cluster import Cluster, two_servers
from tests.system.test_multiprocess import OPEN, PG_URL, REDIS_URL, _burst, _rows, _tenant

pytestmark = pytest.mark.skipif(
    not (PG_URL and REDIS_URL),
    reason="multi-process tests need HERALD_TEST_DATABASE_URL and HERALD_TEST_REDIS_URL (shared state)",
)
FEATURES = {"campaign_audience_limit": True, "queuing": True}
LIMITS = {**OPEN, "ingest": "100000/second"}
C3 = "/v5/campaigns"
L1 = "/core-services/v1/campaigns"
# Components a one-time Push draft accepts one at a time, each a different one.
COMPONENTS: dict[str, Any] = {
    "campaign_content": PUSH_ONE_TIME["campaign_content"],
    "segmentation_details": {"is_all_user_campaign": True},
    "scheduling_details": PUSH_ONE_TIME["scheduling_details"],
    "delivery_controls": PUSH_ONE_TIME["delivery_controls"],
    "conversion_goal_details": PUSH_ONE_TIME["conversion_goal_details"],
    "control_group_details": PUSH_ONE_TIME["control_group_details"],
    "utm_params": PUSH_ONE_TIME["utm_params"],
    "advanced": PUSH_ONE_TIME["advanced"],
}
BASIC: dict[str, Any] = {"name": "Race", "platforms": ["ANDROID", "IOS"]}
DRAFT = {
    "channel": "PUSH",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "ana@example.com",
    "basic_details": BASIC,
}


@pytest.fixture(scope="module")
def cluster(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with two_servers(database_url, str(REDIS_URL), tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes


def _create(cluster: Cluster, tenant: Tenant, body: dict[str, Any]) -> str:
    [response] = _burst(cluster.servers, [("POST", C3, tenant.write_headers(campaigns=True), body)])
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["id"])


def _get(cluster: Cluster, tenant: Tenant, campaign_id: str) -> httpx.Response:
    [response] = _burst(
        cluster.servers, [("GET", f"{C3}/{campaign_id}", tenant.headers(campaigns=True), None)]
    )
    assert response.status_code == 200, response.text
    return response


def _row(database_url: str, tenant: Tenant, campaign_id: str) -> Campaign:
    [row] = [r for r in _rows(database_url, Campaign, tenant.workspace_id) if r.campaign_id == campaign_id]
    return row


def _v1(component: str, value: Any, *, publish: bool = False) -> dict[str, Any]:
    body = {"request_id": str(uuid.uuid4()), "updated_by": "bo@example.com", component: value}
    return body | ({"status": "PUBLISH"} if publish else {})


def test_concurrent_patches_of_different_components_all_land(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, LIMITS, FEATURES)
    campaign_id = _create(cluster, tenant, DRAFT)
    calls = [
        ("PATCH", f"{C3}/{campaign_id}", tenant.write_headers(campaigns=True), {name: value})
        for name, value in COMPONENTS.items()
    ]
    responses = _burst(cluster.servers, calls)
    assert [response.status_code for response in responses] == [200] * len(calls)
    etags = [response.headers["ETag"] for response in responses]
    assert len(set(etags)) == len(etags)  # one ETag per acknowledged write

    row = _row(database_url, tenant, campaign_id)
    assert row.revision == 1 + len(calls)
    for name in COMPONENTS:
        assert name in row.components, name
    assert row.components["utm_params"] == COMPONENTS["utm_params"]
    assert _get(cluster, tenant, campaign_id).headers["ETag"] in etags


def test_one_if_match_etag_has_exactly_one_winner(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, LIMITS, FEATURES)
    campaign_id = _create(cluster, tenant, DRAFT)
    current = _get(cluster, tenant, campaign_id).headers["ETag"]
    bodies = [{"basic_details": {**BASIC, "name": f"Writer {n}"}} for n in range(8)]
    calls = [
        ("PATCH", f"{C3}/{campaign_id}", {**tenant.write_headers(campaigns=True), "If-Match": current}, body)
        for body in bodies
    ]
    responses = _burst(cluster.servers, calls)
    statuses = [response.status_code for response in responses]
    assert sorted(statuses) == [200] + [412] * 7
    [winner] = [n for n, status in enumerate(statuses) if status == 200]
    row = _row(database_url, tenant, campaign_id)
    assert row.components["basic_details"]["name"] == f"Writer {winner}"
    assert row.revision == 2
    assert responses[winner].headers["ETag"] != current


def test_concurrent_earlier_api_updates_all_land(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, LIMITS, FEATURES)
    campaign_id = _create(cluster, tenant, DRAFT)
    headers = tenant.headers(campaigns=True)
    calls = [
        ("PATCH", f"{L1}/{campaign_id}", headers, _v1(name, value)) for name, value in COMPONENTS.items()
    ]
    # The earlier API merges fields into a component: writers of one component's different fields
    # must not lose each other's either.
    calls += [
        ("PATCH", f"{L1}/{campaign_id}", headers, _v1("basic_details", {f"note_{n}": f"by writer {n}"}))
        for n in range(4)
    ]
    responses = _burst(cluster.servers, calls)
    assert [response.status_code for response in responses] == [204] * len(calls), [
        r.text for r in responses if r.status_code != 204
    ]
    row = _row(database_url, tenant, campaign_id)
    assert row.revision == 1 + len(calls)
    for name in COMPONENTS:
        assert name in row.components, name
    assert row.components["basic_details"] == {
        **BASIC,
        **{f"note_{n}": f"by writer {n}" for n in range(4)},
    }


def _add_push_connector(database_url: str, tenant: Tenant) -> None:
    """The workspace's push connector: a Push campaign cannot be published without one."""

    async def add() -> None:
        database = create_database(Settings(database_url=database_url))
        try:
            async with database.writer() as session:
                given = ConnectorInput(
                    "push-gw", "CUSTOM_API", channel="push", url="https://hooks.example.com/p"
                )
                await delivery_connectors.add_connector(
                    session, datetime.now(UTC), tenant.workspace_id, given, TEST_SECRET_KEY
                )
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(add())


def test_status_actions_racing_patches_lose_nothing(cluster: Cluster, database_url: str) -> None:
    tenant = _tenant(database_url, LIMITS, FEATURES)
    _add_push_connector(database_url, tenant)
    body = copy.deepcopy(PUSH_PERIODIC)
    campaign_id = _create(cluster, tenant, body)
    [published] = _burst(
        cluster.servers,
        [
            (
                "PATCH",
                f"{L1}/{campaign_id}",
                tenant.headers(campaigns=True),
                _v1("delivery_controls", PUSH_PERIODIC["delivery_controls"], publish=True),
            )
        ],
    )
    assert published.status_code == 204, published.text
    start = _row(database_url, tenant, campaign_id)
    assert start.status == "SCHEDULED"

    actions = [
        ("PATCH", f"{C3}/{campaign_id}/status", tenant.write_headers(campaigns=True), {"action": name})
        for name in ["PAUSE", "RESUME"] * 4
    ]
    editable = ["utm_params", "delivery_controls", "control_group_details", "advanced"]
    patches = [
        ("PATCH", f"{C3}/{campaign_id}", tenant.write_headers(campaigns=True), {name: COMPONENTS[name]})
        for name in editable * 2
    ]
    calls = [call for pair in zip(actions, patches, strict=True) for call in pair]
    responses = _burst(cluster.servers, calls)
    by_kind: dict[str, list[httpx.Response]] = {"PAUSE": [], "RESUME": [], "patch": []}
    for (_, path, _, sent), response in zip(calls, responses, strict=True):
        by_kind[sent["action"] if path.endswith("/status") else "patch"].append(response)
    assert {r.status_code for r in by_kind["patch"]} == {200}, [r.text for r in by_kind["patch"]]
    assert {r.status_code for r in by_kind["PAUSE"] + by_kind["RESUME"]} <= {200, 422}
    paused = sum(r.status_code == 200 for r in by_kind["PAUSE"])
    resumed = sum(r.status_code == 200 for r in by_kind["RESUME"])
    assert paused >= 1
    # Each success moved the campaign from the state its rule saw: they alternate.
    assert paused - resumed in (0, 1)

    row = _row(database_url, tenant, campaign_id)
    assert row.status == ("PAUSED" if paused > resumed else "SCHEDULED")
    assert row.revision == start.revision + len(by_kind["patch"]) + paused + resumed
    for name in editable:
        assert row.components[name] == COMPONENTS[name], name
    etags = [r.headers["ETag"] for r in by_kind["patch"]]
    assert len(set(etags)) == len(etags)


def test_publishes_racing_on_a_versioned_campaign_all_land(cluster: Cluster, database_url: str) -> None:
    # Each publish of a change makes a new version; a writer queued behind several of them finds
    # the latest version replaced once per publish ahead of it, and must follow it each time
    # rather than answer as if it had named an old version (409 "immutable snapshot").
    tenant = _tenant(database_url, LIMITS, {**FEATURES, "versioning": True})
    _add_push_connector(database_url, tenant)
    campaign_id = _create(cluster, tenant, copy.deepcopy(PUSH_PERIODIC))
    headers = tenant.headers(campaigns=True)
    publish = _v1("delivery_controls", PUSH_PERIODIC["delivery_controls"], publish=True)
    [published] = _burst(cluster.servers, [("PATCH", f"{L1}/{campaign_id}", headers, publish)])
    assert published.status_code == 204, published.text

    def change(n: int) -> dict[str, Any]:
        content = copy.deepcopy(PUSH_PERIODIC["campaign_content"])
        content["content"]["push"]["android"]["basic_details"]["title"] = f"Title {n}"
        return _v1("campaign_content", content, publish=True)

    publishes = [("PATCH", f"{L1}/{campaign_id}", headers, change(n)) for n in range(16)]
    patches = [
        (
            "PATCH",
            f"{C3}/{campaign_id}",
            tenant.write_headers(campaigns=True),
            {"utm_params": COMPONENTS["utm_params"]},
        )
        for _ in range(8)
    ]
    calls = [*publishes, *patches]
    responses = _burst(cluster.servers, calls)
    refused = [r.text for r in responses if r.status_code >= 300]
    assert not refused, refused
    rows = sorted(
        (r for r in _rows(database_url, Campaign, tenant.workspace_id) if r.campaign_id == campaign_id),
        key=lambda row: row.version_number,
    )
    assert [row.version_number for row in rows] == list(range(1, len(rows) + 1))
    assert [row.is_latest for row in rows] == [False] * (len(rows) - 1) + [True]
    assert len(rows) >= 1 + len(publishes)


def test_concurrent_attribute_merges_of_one_customer_keep_every_key(
    cluster: Cluster, database_url: str
) -> None:
    tenant = _tenant(database_url, LIMITS)
    path = f"/v1/customer/{tenant.workspace_id}"
    calls = [
        (
            "POST",
            path,
            tenant.headers(),
            {"type": "customer", "customer_id": "u-1", "attributes": {f"k{n}": n}},
        )
        for n in range(12)
    ]
    responses = _burst(cluster.servers, calls)
    assert {response.status_code for response in responses} == {200}, [r.text for r in responses]
    [user] = _rows(database_url, User, tenant.workspace_id)
    assert {key: user.attributes[key] for key in user.attributes if key.startswith("k")} == {
        f"k{n}": n for n in range(12)
    }


def test_concurrent_workspace_settings_keep_every_change(database_url: str) -> None:
    """`herald features set` / `herald limits set` merge one key into the workspace's settings: run
    side by side (one transaction each, as the CLI does), none may undo another."""
    tenant = _tenant(database_url)

    async def change(setting: Callable[[AsyncSession], Awaitable[object]]) -> None:
        async with database.writer() as session:
            await setting(session)
            await session.commit()

    async def run() -> Workspace:
        try:
            await asyncio.gather(
                *(
                    change(
                        partial(workspaces_service.set_feature, workspace_id=workspace_id, flag=flag, on=True)
                    )
                    for flag in FEATURE_FLAGS
                ),
                *(
                    change(
                        partial(
                            workspaces_service.set_rate_limit,
                            workspace_id=workspace_id,
                            bucket=bucket,
                            spec="7/second",
                        )
                    )
                    for bucket in BUCKETS
                ),
            )
            async with database.reader() as session:
                return await workspaces_service.get_workspace(session, workspace_id)
        finally:
            await database.dispose()

    workspace_id = tenant.workspace_id
    database = create_database(Settings(database_url=database_url))
    workspace = asyncio.run(run())
    assert workspace.features == dict.fromkeys(FEATURE_FLAGS, True)
    assert workspace.rate_limits == dict.fromkeys(BUCKETS, "7/second")


def test_one_key_refused_at_once_is_answered_once_and_replayed(cluster: Cluster, database_url: str) -> None:
    """Fifteen STOPs of a DRAFT (422) with one Idempotency-Key, at once over two processes: one
    original answer, the rest replays of it (or 409 while it is in flight). Before, the refusal was
    recorded in a transaction of its own after the request's had released the key, and in between
    another request with the key ran afresh: two to four originals a burst."""
    tenant = _tenant(database_url, LIMITS, FEATURES)
    campaign_id = _create(cluster, tenant, DRAFT)
    for _ in range(5):
        headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        calls = [("PATCH", f"{C3}/{campaign_id}/status", headers, {"action": "STOP"})] * 15
        responses = _burst(cluster.servers, calls)
        originals = [r for r in responses if r.status_code == 422 and "Idempotent-Replayed" not in r.headers]
        assert len(originals) == 1, [(r.status_code, r.headers.get("Idempotent-Replayed")) for r in responses]
        for response in responses:
            if response.status_code == 422:
                assert response.json()["error"] == originals[0].json()["error"]
            else:
                assert response.status_code == 409, response.text
                assert response.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
