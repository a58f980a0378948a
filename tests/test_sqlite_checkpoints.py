"""SQLite checkpoints in a serving process run on a thread of their own, never inside a commit."""

from __future__ import annotations

import os
import sqlite3

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from herald.config import Settings
from herald.main import create_app
from herald.sqlite_checkpoints import checkpoint
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
        await outside.state.herald.aclose()

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


def _wal_file(tmp_path: object, frames_written: int) -> tuple[sqlite3.Connection, str]:
    path = f"{tmp_path}/log.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA wal_autocheckpoint=0")  # as in a serving process: the thread checkpoints
    connection.execute("CREATE TABLE t (v BLOB)")
    for _ in range(frames_written):
        connection.execute("INSERT INTO t VALUES (randomblob(3000))")  # about a page each
    return connection, path + "-wal"


def test_a_log_past_its_bound_is_emptied(tmp_path: object) -> None:
    # A busy process never gives the log an idle moment to start again from its beginning, so
    # past `RESTART_FRAMES` the checkpoint thread truncates it (here with a bound of 10 frames).
    connection, wal = _wal_file(tmp_path, 50)
    try:
        assert os.path.getsize(wal) > 0
        checkpoint(connection, restart_frames=10)
        assert os.path.getsize(wal) == 0
        assert connection.execute("SELECT count(*) FROM t").fetchone() == (50,)  # nothing lost
    finally:
        connection.close()


def test_a_log_within_its_bound_is_only_copied(tmp_path: object) -> None:
    connection, wal = _wal_file(tmp_path, 5)
    try:
        size = os.path.getsize(wal)
        checkpoint(connection, restart_frames=1000)
        assert os.path.getsize(wal) == size  # PASSIVE copies, the file stays for the next writer
        busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, frames) == (0, copied)
    finally:
        connection.close()
