"""PostgreSQL: planner statistics (and, without autovacuum, dead rows) of the tables the delivery
engine fills fast, kept fresh by the worker.

The engine's statements name rows by key (`workspace_id = :w AND id = ANY(:ids)`). A table that grew
since its last ANALYZE (a new table, a new workspace, minutes of triggers) looks nearly empty to the
planner, which then costs a scan of every row of the workspace through another index as one row, and
sometimes takes it: an outbox window's update read the workspace's whole outbox (2 ms per thousand
rows, growing with every message; since migration 0026 that update names its rows by delivery id
alone, which no such index serves), and at 1,000 events/s the trigger worker fell behind for good.
PostgreSQL's autovacuum refreshes statistics only after a share of the table changed and at most
once a minute per database, and a deployment may run without it (`autovacuum = off`). So the worker,
between ticks and at most every `INTERVAL` seconds, ANALYZEs each of these tables whose changes
since its last analysis passed `MIN_CHANGES` plus `SHARE` of its rows, and, when autovacuum is off,
VACUUMs those whose dead rows (every update leaves one) passed the same bound; each table at most
every `REPEAT` seconds (the server's record of its last analysis or vacuum, so several workers share
it), unless it grew to more than twice the rows its statistics count. One worker at a time does it
(an advisory lock); the commands take no lock that writers or readers wait for.

The check is frequent, and a table that doubled is analysed at once, because the first analyses
matter most: an execution's first window writes the workspace's first outbox rows, and until an
ANALYZE has seen some of them every window's update read all the rows before it (8 ms per window 8 s
into a send at 1,000 messages a second, when the check was every 10 s). Once the statistics know the
workspace, its share scales with the table's size in pages without another ANALYZE, so later ones
wait for `REPEAT` (checked every second at that bound, the outbox was analysed every second: a
tenth of a core). Columns no statement filters on (message summaries, reasons) have no statistics
kept (migration 0023): an ANALYZE of 40,000 outbox rows took 0.4 s with them, 0.17 s without.
SQLite needs none of this: its planner reads no statistics unless asked to.

The users' tables are among them: a workspace whose users were imported since the last analysis
looks empty to the planner too, and a claim's read of 200 users by key then scanned every user of
the workspace through its push-id index (12 ms instead of under 1, in a workspace of 30,000 users).
So are the users' best times (SEND_IN_BTS), which the claims themselves write: never analysed, the
read of a claim's 1,000 best times scanned every one of the workspace's (2.2 s a claim at 100,000
users, and the other worker's claim waited on it).

A dispatching worker does not wait for these commands (`refresh_in_background`): a VACUUM of the
outbox took 0.3 to 0.7 s here, during which no batch was claimed and nothing was on the wire.

`analyze_if_unknown` is the first step of the same care: the engine calls it while it writes an
audience, so that the first claims of an execution already find statistics.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.db import Database

log = logging.getLogger(__name__)

INTERVAL = 1.0  # seconds between two checks of one process
REPEAT = 10.0  # seconds between two analyses (or vacuums) of one table that did not double
MIN_CHANGES = 1000
SHARE = 0.1
# The tables whose rows the engine writes per message or per event.
TABLES = (
    "delivery_outbox",
    "delivery_execution_users",
    "delivery_trigger_inbox",
    "delivery_attribution_windows",
    "audience_events",
    "audience_users",
    "audience_push_tokens",
    # Filled by SEND_IN_BTS claims, 1,000 users at a time, and read by key by the next claims.
    "delivery_best_times",
)
_LOCK_KEY = 0x6865726C6473  # pg_try_advisory_lock key of this step ("herlds")

_STALE = text(
    """
    SELECT s.relname,
           s.n_mod_since_analyze > :least + :share * s.n_live_tup
             AND (s.n_live_tup > 2 * greatest(c.reltuples, 0)
                  OR coalesce(greatest(s.last_analyze, s.last_autoanalyze), '-infinity')
                     < now() - make_interval(secs => :repeat)) AS analyze,
           s.n_dead_tup > :least + :share * s.n_live_tup
             AND coalesce(greatest(s.last_vacuum, s.last_autovacuum), '-infinity')
                 < now() - make_interval(secs => :repeat) AS vacuum
    FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
    WHERE s.schemaname = current_schema() AND s.relname = ANY(:tables)
    """
)

_last_check = float("-inf")
_running: asyncio.Task[list[str]] | None = None  # `refresh_in_background`'s last task


async def refresh(database: Database, *, force: bool = False) -> list[str]:
    """Analyze (and vacuum, without autovacuum) the stale tables of `TABLES`: the commands run,
    e.g. `["ANALYZE delivery_outbox"]`. Nothing on SQLite, when another process is at it, or within
    `INTERVAL` seconds of this process's last check; `force`: now, and whatever `REPEAT` says."""
    global _last_check
    if database.engine.dialect.name != "postgresql":
        return []
    started = time.monotonic()
    if not force and started - _last_check < INTERVAL:
        return []
    _last_check = started
    done: list[str] = []
    try:
        await _refresh_stale(database, done, force)
    except DBAPIError as error:  # upkeep: a failure here must not stop the tick or the sends
        log.warning("planner statistics not refreshed: %s", error)
    if done:
        log.info("planner statistics: %s (%.0f ms)", "; ".join(done), (time.monotonic() - started) * 1000)
    return done


def refresh_in_background(database: Database) -> None:
    """`refresh` in a task of its own, so that the caller (a dispatch between two batches) goes on
    at once; nothing when this process's last one is still running."""
    global _running
    if database.engine.dialect.name != "postgresql":
        return
    loop = asyncio.get_running_loop()
    if _running is not None and not _running.done() and _running.get_loop() is loop:
        return
    _running = database.run_in_background(_refresh_logged(database))


async def _refresh_logged(database: Database) -> list[str]:
    try:
        return await refresh(database)
    except Exception:  # upkeep with nobody awaiting it (the database closing under it, say): said, not raised
        log.warning("planner statistics not refreshed", exc_info=True)
        return []


async def analyze_if_unknown(session: AsyncSession, tables: dict[str, int]) -> None:
    """PostgreSQL: ANALYZE each of `tables` whose planner statistics count fewer rows than the
    number given (never analysed: -1), in the session's transaction. Without them the planner
    estimates a handful of rows and picks plans that read everything: an update by customer id
    through the rank index instead of the primary key (1 s per window at 100,000 users), a claim
    joining a bitmap scan of every user of the workspace (0.9 s per claim)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for table, least in tables.items():
        known = await session.scalar(
            text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"), {"t": table}
        )
        if known is not None and float(known) < least:
            await session.execute(text(f"ANALYZE {table}"))  # a name of ours, never input


async def _refresh_stale(database: Database, done: list[str], force: bool) -> None:
    """`refresh`'s commands, each appended to `done` once run."""
    # VACUUM cannot run in a transaction: each command commits on its own.
    async with database.engine.connect() as connection:
        connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
        if not await connection.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": _LOCK_KEY}):
            return
        try:
            autovacuum = await connection.scalar(text("SELECT current_setting('autovacuum') = 'on'"))
            values = {
                "least": MIN_CHANGES,
                "share": SHARE,
                "repeat": 0.0 if force else REPEAT,
                "tables": list(TABLES),
            }
            for table, analyze, vacuum in (await connection.execute(_STALE, values)).all():
                # The names come from `TABLES`, never from input.
                if vacuum and not autovacuum:
                    command = f"VACUUM (ANALYZE) {table}"
                elif analyze:
                    command = f"ANALYZE {table}"
                else:
                    continue
                await connection.execute(text(command))
                done.append(command)
        finally:
            await connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK_KEY})
