"""SQLite checkpoints in a serving process run on a thread of their own, never inside a commit."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from herald.config import Settings
from herald.main import create_app
from tests.conftest import PG_URL
from tests.factories import make_tenant

pytestmark = pytest.mark.skipif(PG_URL is not None, reason="SQLite's write-ahead log")


async def _autocheckpoint(app: object) -> int:
    async with app.state.herald.database.engine.connect() as connection:  # type: ignore[attr-defined]
        value: int = (await connection.execute(text("PRAGMA wal_autocheckpoint"))).scalar_one()
        return value


async def test_a_serving_app_turns_automatic_checkpoints_off_and_leaves_the_log_copied(
    settings: Settings,
) -> None:
    path = make_url(settings.database_url).database
    assert path
    outside = create_app(settings)
    try:
        assert await _autocheckpoint(outside) == 1000  # no app serving: SQLite's own default
    finally:
        await outside.state.herald.database.dispose()

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        assert await _autocheckpoint(app) == 0  # commits append only; the thread copies
        for _ in range(5):
            await make_tenant(app)  # writes: workspaces, keys

    # Stopping ends with a last checkpoint: every page of the log is in the database file.
    with sqlite3.connect(path) as probe:
        busy, log_frames, copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0
    assert log_frames == copied
