"""C8's Idempotency-Key (contract §7): the key is claimed with the first outbox write and its answer
recorded with the last, so what a client sees must be what a claim before the work gave."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from fastapi import FastAPI

from tests.delivery.builders import TEST_PATH, inline_push, outbox_rows, push_connector, results
from tests.delivery.conftest import add_users
from tests.delivery.servers import HttpReceiver
from tests.factories import Tenant, is_replay_of

ANA = {"customer_id": "u-ana", "push_id": "tok-ana", "platform": "ANDROID", "first_name": "Ana"}


async def _ready(app: FastAPI, workspace: Tenant, webhook: HttpReceiver) -> None:
    await push_connector(app, workspace, webhook)
    await add_users(app, workspace.workspace_id, ANA)


def _headers(workspace: Tenant, key: str) -> dict[str, str]:
    return workspace.headers(campaigns=True, idempotency_key=key)


async def test_a_duplicate_of_a_send_in_flight_is_409_and_nothing_is_sent_twice(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    await _ready(app, workspace, webhook)
    body, headers = inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u-ana"), _headers(workspace, str(uuid.uuid4()))
    webhook.hold()
    first = asyncio.create_task(client.post(TEST_PATH, json=body, headers=headers))
    # The first request's PENDING row and its key are committed; its POST waits at the receiver.
    assert await asyncio.to_thread(webhook.entered.wait, 30)
    busy = await client.post(TEST_PATH, json=body, headers=headers)
    assert busy.status_code == 409
    assert busy.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
    webhook.release()
    original = await first
    # Android sent; iOS never attempted (Ana has an Android token only): the last send is unsent.
    assert results(original)["ANDROID_default_variation_1"] == {"status": "SENT"}
    assert results(original)["IOS_default_variation_1"]["status"] == "FAILED"
    replayed = await client.post(TEST_PATH, json=body, headers=headers)
    assert replayed.status_code == 200
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert is_replay_of(replayed, original)
    assert len(webhook.received) == 1
    assert [row.status for row in await outbox_rows(app, workspace)] == ["SENT", "FAILED"]


async def test_concurrent_duplicates_send_once(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    await _ready(app, workspace, webhook)
    body = inline_push(
        "USER_ATTRIBUTE_UNIQUE_ID",
        "u-ana",
    )
    body["test_campaign_meta"]["platform"] = "ANDROID"
    headers = _headers(workspace, str(uuid.uuid4()))
    answers = await asyncio.gather(*(client.post(TEST_PATH, json=body, headers=headers) for _ in range(8)))
    fresh = [a for a in answers if a.status_code == 200 and "Idempotent-Replayed" not in a.headers]
    assert len(fresh) == 1
    for answer in answers:
        if answer.status_code == 409:
            assert answer.json()["error"]["code"] == "DUPLICATE_IDEMPOTENCY_KEY"
        else:
            assert answer.status_code == 200
            assert is_replay_of(answer, fresh[0])
    assert len(webhook.received) == 1
    assert len(await outbox_rows(app, workspace)) == 1


async def test_the_key_answers_before_the_body_is_judged(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, webhook: HttpReceiver
) -> None:
    await _ready(app, workspace, webhook)
    headers = _headers(workspace, str(uuid.uuid4()))
    body = inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u-ana")
    assert (await client.post(TEST_PATH, json=body, headers=headers)).status_code == 200
    # Another body under the used key: 409 IDEMPOTENCY_CONFLICT, though this one is also a 404.
    unknown = inline_push("USER_ATTRIBUTE_UNIQUE_ID", "u-nobody")
    conflict = await client.post(TEST_PATH, json=unknown, headers=headers)
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    # A refusal is not stored (404): the key stays free for the corrected request.
    key = str(uuid.uuid4())
    refused = await client.post(TEST_PATH, json=unknown, headers=_headers(workspace, key))
    assert refused.status_code == 404
    retried = await client.post(TEST_PATH, json=body, headers=_headers(workspace, key))
    assert retried.status_code == 200
    assert "Idempotent-Replayed" not in retried.headers
    assert len(webhook.received) == 2
