"""A connector's failed attempts in a row, counted by every worker together.

The engine pauses an execution whose connector keeps failing (`HERALD_DELIVERY_ERROR_THRESHOLD`
failed attempts in a row). The count is one row per connector (`ConnectorStreak`), shared by every
worker process on every host: a window of attempts adds its failures to it in the transaction that
records the window's outcomes, and an attempt that succeeded resets it. Counted by each process
alone, three workers let two and a half to four times the threshold fail before a pause, and
failures spread over the workers could stay under it for ever. Shared, they add up; what bounds the
failures before the pause is then what each worker has on the way before they are counted
together. So while a connector is not known to answer well (at a tick's start, after a failure), a
worker takes places in the same row for the requests it is about to make (`reserve`): its
failures and every worker's requests on their way stay under the threshold together, and no more
than the threshold fail before the pause, however many workers send (`Dispatcher._room`). The
places are given back in the transaction that records the outcomes (`recorded`), and lapse one
lease after the last was taken, should the worker holding them die.

A process keeps its view of each count (`Streaks`), which the engine checks before each window:
its own attempts move it at once, and after a window with failures the shared row is read again,
so the failures of other workers count too. A worker keeps one `Streaks` for its life
and hands it to each tick's dispatcher: failures that trickle in over several ticks (retries after
their backoff, a throttled campaign) add up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, bindparam, case, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from herald.clock import utc
from herald.db import Database
from herald.delivery.messages import Outcome
from herald.delivery.models import Connector, ConnectorStreak
from herald.direct_reads import rows_in
from herald.direct_writes import Writer, execute_in

_TABLE = cast(Table, ConnectorStreak.__table__)
# The binds are not named as columns: an UPDATE built once takes its SET clause from its values.
_THE_CONNECTOR = (
    _TABLE.c.workspace_id == bindparam("row_workspace_id"),
    _TABLE.c.connector_id == bindparam("row_connector_id"),
)


@dataclass(slots=True)
class Tally:
    """A window's attempts as the connector's streak sees them, in the order they were answered."""

    succeeded: bool = False  # an attempt succeeded: the streak before the window ended
    failures: int = 0  # failed attempts after the last success (or all of them, without one)
    reason: str = ""  # the last failure's
    places: int = 0  # places the window took in the shared row for its requests (`reserve`)

    def count(self, outcome: Outcome) -> None:
        """One attempt's outcome (a message never handed over counts for nothing)."""
        if not outcome.attempted:
            return
        if outcome.sent:
            self.succeeded, self.failures = True, 0
        else:
            self.failures += 1
            self.reason = outcome.reason or "The send failed."


def _fewer(given: ColumnElement[int]) -> ColumnElement[int]:
    """The row's places on the way less those `given` back, never below none (places that lapsed
    were counted as none already)."""
    return case((_TABLE.c.on_the_way > given, _TABLE.c.on_the_way - given), else_=0)


def _upsert(dialect: str, add: bool) -> Insert:
    """The shared row written with a window's failures: added to its count (`add`: no success in
    the window), or its count replaced by them (the streak began again within the window)."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(_TABLE)
    excluded = statement.excluded
    failures = _TABLE.c.failures + excluded.failures if add else excluded.failures
    # The row's places given back in the same statement (`on_the_way` of the values: the window's
    # places; a row written anew has none, as no place was taken): PostgreSQL applies only one
    # of two writes of one row in one chained statement (`direct_writes.WriteChain`).
    return statement.on_conflict_do_update(
        index_elements=[_TABLE.c.workspace_id, _TABLE.c.connector_id],
        set_={
            "failures": failures,
            "reason": excluded.reason,
            "updated_at": excluded.updated_at,
            "on_the_way": _fewer(excluded.on_the_way),
        },
    )


# Built once per dialect and kind: (dialect, add) -> statement.
_UPSERTS = {
    (dialect, add): _upsert(dialect, add) for dialect in ("postgresql", "sqlite") for add in (True, False)
}
# A success with no failure after it: the streak ends, when there is one (no write otherwise).
_ENDED = update(_TABLE).where(*_THE_CONNECTOR, _TABLE.c.failures > 0)
_READ = select(_TABLE.c.failures, _TABLE.c.reason).where(*_THE_CONNECTOR)
# A window's places given back (`recorded`).
_FEWER = _fewer(bindparam("places"))
_GIVEN_BACK = update(_TABLE).where(*_THE_CONNECTOR).values(on_the_way=_FEWER)
# A success ended the streak, and the window's places are given back, in one write of the row.
_ENDED_GIVEN_BACK = (
    update(_TABLE)
    .where(*_THE_CONNECTOR)
    .values(failures=0, reason=None, updated_at=bindparam("ended_at"), on_the_way=_FEWER)
)
# The row a place is taken in, written first when the connector has none yet.
_PLACES_ROW = {
    dialect: insert(_TABLE).on_conflict_do_nothing(
        index_elements=[_TABLE.c.workspace_id, _TABLE.c.connector_id]
    )
    for dialect, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}
# Locked until the places are taken (PostgreSQL; SQLite's write transaction holds the file).
_HELD = (
    select(_TABLE.c.failures, _TABLE.c.reason, _TABLE.c.on_the_way, _TABLE.c.on_the_way_until)
    .where(*_THE_CONNECTOR)
    .with_for_update()
)
_TAKEN = update(_TABLE).where(*_THE_CONNECTOR)


def recorded(connector: Connector, tally: Tally, now: datetime) -> Callable[[Writer], Awaitable[None]] | None:
    """The write of a window's `tally` into the connector's shared streak, for the transaction that
    records the window's outcomes, with the places it took given back (None: the window attempted
    nothing and took no place)."""
    if not tally.succeeded and not tally.failures and not tally.places:
        return None

    # One write of the row whatever the window did (see `_upsert`).
    async def write(connection: Writer) -> None:
        row = {"row_workspace_id": connector.workspace_id, "row_connector_id": connector.id}
        if not tally.succeeded and not tally.failures:
            await execute_in(connection, _GIVEN_BACK, {**row, "places": tally.places})
            return
        if not tally.failures:
            if tally.places:
                ended = {**row, "places": tally.places, "ended_at": now}
                await execute_in(connection, _ENDED_GIVEN_BACK, ended)
            else:
                await _end(connection, connector.workspace_id, connector.id, now)
            return
        values: dict[str, Any] = {
            "workspace_id": connector.workspace_id,
            "connector_id": connector.id,
            "failures": tally.failures,
            "reason": tally.reason,
            "updated_at": now,
            "on_the_way": tally.places,
        }
        await execute_in(connection, _UPSERTS[(connection.dialect.name, not tally.succeeded)], values)

    return write


async def _end(connection: Writer, workspace_id: str, connector_id: str, now: datetime) -> None:
    values = {"row_workspace_id": workspace_id, "row_connector_id": connector_id}
    await execute_in(connection, _ENDED, {**values, "failures": 0, "reason": None, "updated_at": now})


async def start_again(connection: Writer, workspace_id: str, connector_id: str, now: datetime) -> None:
    """The connector's shared streak started again: its execution paused, and one resumed after
    the connector is fixed gets a whole threshold of attempts."""
    await _end(connection, workspace_id, connector_id, now)


class Streaks:
    """This process's view of each connector's failed attempts in a row and the last reason: the
    larger of its own count (its attempts, in the order they were answered: a `Tally` per
    connector) and the shared row's as last read (`refresh`, after each window with failures). Its
    own count covers the windows whose outcomes are not yet recorded there; the shared one, the
    failures of every other worker."""

    def __init__(self) -> None:
        self._own: dict[str, Tally] = {}
        self._shared: dict[str, tuple[int, str]] = {}

    def of(self, connector_id: str) -> tuple[int, str]:
        """The connector's failed attempts in a row and the last reason (0 and "" when none)."""
        own = self._own.get(connector_id)
        mine = (own.failures, own.reason) if own is not None and own.failures else (0, "")
        return max(mine, self._shared.get(connector_id, (0, "")))

    def count(self, connector_id: str, outcome: Outcome) -> None:
        """One attempt's outcome (a message never handed over counts for nothing)."""
        self._own.setdefault(connector_id, Tally()).count(outcome)

    async def refresh(self, database: Database, connector: Connector) -> None:
        """The connector's count as every worker together has it (after this process's failures
        were recorded there)."""
        key = {"row_workspace_id": connector.workspace_id, "row_connector_id": connector.id}
        async with database.reader() as session:
            failures, reason = (await session.execute(_READ, key)).first() or (0, None)
        self._keep(connector.id, failures, reason)

    async def reserve(
        self,
        database: Database,
        connector: Connector,
        wanted: int,
        threshold: int,
        now: datetime,
        lease: timedelta,
    ) -> int:
        """Places taken in the connector's shared row for up to `wanted` requests about to be made:
        as many as its failures in a row and every worker's requests on their way leave under
        `threshold` (0: none left; the count read is kept as the shared one meanwhile, unless this
        process's last answer through it was a success, not recorded yet). They lapse
        `lease` from now unless given back (`recorded`) or taken again by then."""
        key = {"row_workspace_id": connector.workspace_id, "row_connector_id": connector.id}
        async with database.writes.transaction() as connection:
            empty = {
                "workspace_id": connector.workspace_id,
                "connector_id": connector.id,
                "failures": 0,
                "updated_at": now,
                "on_the_way": 0,
            }
            await execute_in(connection, _PLACES_ROW[connection.dialect.name], empty)
            failures, reason, on_the_way, until = (await rows_in(connection, _HELD, key))[0]
            held = int(on_the_way) if until is not None and utc(until) > now else 0
            taken = max(0, min(wanted, threshold - int(failures) - held))
            if taken:
                places = {"on_the_way": held + taken, "on_the_way_until": now + lease}
                await execute_in(connection, _TAKEN, {**key, **places})
        own = self._own.get(connector.id)
        if own is None or not own.succeeded or own.failures:
            # Unless this process's last answer, a success, ends what the row counts.
            self._keep(connector.id, failures, reason)
        return taken

    def _keep(self, connector_id: str, failures: int, reason: str | None) -> None:
        """The shared row's count as read (none kept when it has none)."""
        if failures:
            self._shared[connector_id] = (int(failures), str(reason or "The send failed."))
        else:
            self._shared.pop(connector_id, None)

    def ended(self, connector_id: str) -> None:
        """A window whose last attempt succeeded was recorded: its write ended the shared streak
        (`recorded`). Kept until a window with failures read the row again, a count from before
        held this process's requests through the connector under what it left of the threshold
        (4 of 32 lanes after a streak of 16, for the process's life)."""
        self._shared.pop(connector_id, None)

    def start_again_at(self, threshold: int) -> None:
        """Forget the counts that reached `threshold`: they paused the executions that met them
        during the tick (which started the shared rows again), and an execution resumed after the
        connector is fixed gets a whole threshold of attempts again (else its first check would
        pause it before any attempt)."""
        if threshold <= 0:
            return
        self._own = {key: tally for key, tally in self._own.items() if tally.failures < threshold}
        self._shared = {key: value for key, value in self._shared.items() if value[0] < threshold}
