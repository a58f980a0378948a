"""The SQLite driver runs statements on the event loop's thread, so waiting for SQLite's write lock
must not block the loop: a write waiting on another connection's lock lets other requests go on,
and lands once the lock is free."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import make_url

from herald.config import Settings
from herald.services import Services
from tests.conftest import PG_URL
from tests.factories import Tenant
from tests.offers.builders import offer_body

pytestmark = pytest.mark.skipif(PG_URL is not None, reason="the SQLite driver")


async def test_a_write_waits_for_a_lock_held_elsewhere_without_blocking_reads(
    app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, settings: Settings
) -> None:
    services: Services = app.state.herald
    # Another connection (as another process would: a CLI import, say) holds the write lock.
    other = sqlite3.connect(make_url(settings.database_url).database or "", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        body = offer_body(services.clock.now(), name="Held_Lock_Offer", starts_in=timedelta(days=1))
        write = asyncio.create_task(
            client.post("/v5/offers", json=body, headers=tenant.headers(idempotency_key=str(uuid.uuid4())))
        )
        for _ in range(20):  # the write is queued on the lock; the loop still turns
            await asyncio.sleep(0)
        read = await asyncio.wait_for(client.get("/v5/offers", headers=tenant.headers()), timeout=10)
        assert read.status_code == 200
        assert not write.done()
    finally:
        other.execute("COMMIT")
        other.close()
    created = await asyncio.wait_for(write, timeout=10)
    assert created.status_code == 201, created.text
    listed = await client.get("/v5/offers", headers=tenant.headers(), params={"name_contains": "held_lock"})
    assert [item["name"] for item in listed.json()["data"]] == ["Held_Lock_Offer"]
