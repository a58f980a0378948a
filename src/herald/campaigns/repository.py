"""Campaign queries, always scoped to one workspace."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from datetime import datetime
from functools import cache
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Select,
    String,
    Table,
    bindparam,
    delete,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import aliased

from herald.campaigns.models import Campaign, CampaignRequestId, CampaignTag, StoredCampaign
from herald.db import UTCDateTime
from herald.direct_reads import rows_in
from herald.direct_writes import Transaction, execute_in, execute_many_in
from herald.joined_writes import ClaimedRead, ClaimedStatement, Joined, execute_with

log = logging.getLogger(__name__)

_CAMPAIGNS = typed(Table, Campaign.__table__)
# The latest version of a campaign by its `campaign_id` (parameters `workspace_id`, `campaign_id`).
LATEST_BY_CAMPAIGN_ID = (
    _CAMPAIGNS.c.workspace_id == bindparam("workspace_id"),
    _CAMPAIGNS.c.campaign_id == bindparam("campaign_id"),
    _CAMPAIGNS.c.is_latest,
)
# Built once, run as Core statements on the session's connection (C3 and C4 on every request): a
# plain row of the columns a write of components needs, without the ORM's identity map and flush.
_STORED = select(
    *(_CAMPAIGNS.c[name] for name in ("id", "revision", "channel", "delivery_type", "status")),
    _CAMPAIGNS.c.components,
    _CAMPAIGNS.c.tags,
    _CAMPAIGNS.c.parent_id,
).where(*LATEST_BY_CAMPAIGN_ID)
_STORED_LOCKED = _STORED.with_for_update()
# The SET clause is the parameters' columns (one compiled form per set of columns).
_WRITE_STORED = update(_CAMPAIGNS).where(
    _CAMPAIGNS.c.workspace_id == bindparam("row_workspace_id"),
    _CAMPAIGNS.c.id == bindparam("row_id"),
    _CAMPAIGNS.c.revision == bindparam("row_revision"),
)
_TAGS = typed(Table, CampaignTag.__table__)
_FORGET_TAGS = delete(_TAGS).where(
    _TAGS.c.workspace_id == bindparam("workspace_id"), _TAGS.c.campaign_row_id == bindparam("row_id")
)
_INSERT_CAMPAIGN = insert(_CAMPAIGNS)
_INSERT_TAGS = insert(_TAGS)


# The campaign's lifecycle columns, which every version of it shows as its latest does.
LIFECYCLE_COLUMNS = frozenset({"status", "paused_from", "sent_time"})


async def align_earlier_versions(
    session: AsyncSession, workspace_id: str, row_id: str, values: dict[str, Any]
) -> None:
    """The lifecycle columns of `values` that the latest version (row `row_id`) just took, given
    to the campaign's earlier versions. A version's content never changes once another replaces it,
    but it is the same campaign: an earlier version still SCHEDULED after the campaign was sent
    was found by C6 and C7 under a status the campaign had left (and counted as reachable).

    The caller holds the latest version's row. An earlier version's row held by another transaction
    is left as it is (SKIP LOCKED): on PostgreSQL a write that queued for a version that a publish
    then replaced keeps that row locked while it waits for the new latest one, and waiting for it
    here closed a deadlock. Once the caller commits, such a row is aligned by `_realign`, which
    waits for it holding nothing else."""
    moved = {name: value for name, value in values.items() if name in LIFECYCLE_COLUMNS}
    latest, earlier = aliased(Campaign), aliased(Campaign)
    of_row = select(latest.campaign_id).where(latest.workspace_id == workspace_id, latest.id == row_id)
    campaign_id = of_row.scalar_subquery()
    of_campaign = (earlier.workspace_id == workspace_id, earlier.campaign_id == campaign_id)
    free = (
        select(earlier.id).where(*of_campaign, earlier.is_latest.is_(False)).with_for_update(skip_locked=True)
    )
    result = await session.execute(
        update(Campaign)
        .where(Campaign.workspace_id == workspace_id, Campaign.id.in_(free))
        .values(**moved)
        .execution_options(synchronize_session=False)
    )
    if session.get_bind().dialect.name != "postgresql":
        return  # one writer at a time: no row is ever held by another
    count = select(func.count()).select_from(earlier).where(*of_campaign, earlier.is_latest.is_(False))
    if (await session.scalar(count) or 0) > getattr(result, "rowcount", 0):
        bind, name = session.bind, await session.scalar(of_row)
        engine = bind.engine if isinstance(bind, AsyncConnection) else bind
        event.listen(
            session.sync_session,
            "after_commit",
            lambda _: _in_background(_realign(AsyncSession(engine), workspace_id, str(name))),
            once=True,
        )


# Realignments under way: the loop keeps only a weak reference to a task.
_REALIGNING: set[asyncio.Task[None]] = set()


def _in_background(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _REALIGNING.add(task)
    task.add_done_callback(_REALIGNING.discard)


async def _realign(session: AsyncSession, workspace_id: str, campaign_id: str) -> None:
    """The earlier versions of a campaign given its latest version's lifecycle columns, in a
    transaction of its own: their rows waited for (their holders wait for the latest version,
    whose holders never wait for an earlier one), then the latest version read as it then is.
    Upkeep after a commit: a failure is logged, not raised."""
    earlier = (Campaign.workspace_id == workspace_id, Campaign.campaign_id == campaign_id)
    columns = [getattr(Campaign, name) for name in sorted(LIFECYCLE_COLUMNS)]
    try:
        async with session, session.begin():
            held = select(Campaign.id).where(*earlier, Campaign.is_latest.is_(False)).order_by(Campaign.id)
            ids = list((await session.scalars(held.with_for_update())).all())
            current = (
                await session.execute(
                    select(*columns).where(*earlier, Campaign.is_latest).with_for_update(read=True)
                )
            ).first()
            if ids and current is not None:
                await session.execute(
                    update(Campaign)
                    .where(Campaign.workspace_id == workspace_id, Campaign.id.in_(ids))
                    .values(dict(zip(sorted(LIFECYCLE_COLUMNS), current, strict=True)))
                    .execution_options(synchronize_session=False)
                )
    except Exception:
        log.exception("could not align the earlier versions of campaign %s", campaign_id)


async def get_latest(
    session: AsyncSession, workspace_id: str, campaign_id: str, *, for_update: bool = False
) -> Campaign | None:
    """The latest version; `for_update` locks it until the transaction ends.

    Every read-modify-write of a campaign loads its row this way, so concurrent writers queue on the
    row and each reads what the one before it wrote (PostgreSQL: `SELECT ... FOR UPDATE`; SQLite
    writers begin with `BEGIN IMMEDIATE` and so already hold the database when they read).
    """
    query = select(Campaign).where(*_latest_of(workspace_id, campaign_id))
    if for_update:
        query = query.with_for_update().execution_options(populate_existing=True)
    return (await session.scalars(query)).first()


async def has_latest(session: AsyncSession, workspace_id: str, campaign_id: str) -> bool:
    """Whether the campaign has a latest version, read without loading or locking it."""
    found = await session.scalar(select(Campaign.id).where(*_latest_of(workspace_id, campaign_id)).limit(1))
    return found is not None


def _latest_of(workspace_id: str, campaign_id: str) -> tuple[ColumnElement[bool], ...]:
    return (
        Campaign.workspace_id == workspace_id,
        Campaign.campaign_id == campaign_id,
        Campaign.is_latest.expression,
    )


async def get_version(session: AsyncSession, workspace_id: str, row_id: str) -> Campaign | None:
    """One version document by its own `id`."""
    query = select(Campaign).where(Campaign.workspace_id == workspace_id, Campaign.id == row_id)
    return (await session.scalars(query)).first()


async def get_latest_or_version(session: AsyncSession, workspace_id: str, some_id: str) -> Campaign | None:
    """What C2 reads at `some_id`: the latest version of the campaign it names, else the version
    document whose own `id` it is."""
    return await get_latest(session, workspace_id, some_id) or await get_version(
        session, workspace_id, some_id
    )


async def get_numbered_version(
    session: AsyncSession, workspace_id: str, campaign_id: str, version_number: int
) -> Campaign | None:
    query = select(Campaign).where(
        Campaign.workspace_id == workspace_id,
        Campaign.campaign_id == campaign_id,
        Campaign.version_number == version_number,
    )
    return (await session.scalars(query)).first()


async def stored_latest(
    session: AsyncSession,
    workspace_id: str,
    campaign_id: str,
    *,
    for_update: bool = False,
    read: ClaimedRead | None = None,
) -> StoredCampaign | None:
    """What `StoredCampaign` holds of the latest version; `for_update` locks it as `get_latest` does.
    `read` runs the statement (with the request's idempotency claim, `herald.joined_writes`)."""
    statement = _STORED_LOCKED if for_update else _STORED
    params = {"workspace_id": workspace_id, "campaign_id": campaign_id}
    if read is not None:
        found = await read(session, statement, params)
        return None if found is None else StoredCampaign(**found)
    connection = await session.connection()
    row = (await connection.execute(statement, params)).first()
    return None if row is None else StoredCampaign(**row._mapping)


async def write_stored(
    session: AsyncSession,
    workspace_id: str,
    stored: StoredCampaign,
    values: dict[str, Any],
    joined: Joined | None = None,
) -> bool:
    """Write `values` onto the row read as `stored`, if its revision is still the one read
    (compare-and-set, as the ORM's version counter does for loaded rows): whether it was.
    `joined` is written with it (`herald.joined_writes`)."""
    connection = await session.connection()
    key = {"row_workspace_id": workspace_id, "row_id": stored.id, "row_revision": stored.revision}
    return await execute_with(connection, _WRITE_STORED, _CAMPAIGNS, {**values, **key}, joined) == 1


async def replace_tags(session: AsyncSession, workspace_id: str, row_id: str, tags: Iterable[str]) -> None:
    """The tag rows of a version row, replaced (Core statements on the session's connection)."""
    connection = await session.connection()
    await connection.execute(_FORGET_TAGS, {"workspace_id": workspace_id, "row_id": row_id})
    rows = [
        {"workspace_id": workspace_id, "tag": tag, "campaign_row_id": row_id} for tag in dict.fromkeys(tags)
    ]
    if rows:
        await connection.execute(_INSERT_TAGS, rows)


def add_tags(session: AsyncSession, row: Campaign, tags: Iterable[str]) -> None:
    """The tag rows of a row that has none yet (a new campaign or version)."""
    session.add_all(
        CampaignTag(workspace_id=row.workspace_id, tag=tag, campaign_row_id=row.id)
        for tag in dict.fromkeys(tags)
    )


_HOLDS = typed(Table, CampaignRequestId.__table__)
_HELD = select(_HOLDS.c.campaign_id).where(
    _HOLDS.c.workspace_id == bindparam("workspace_id"), _HOLDS.c.request_id == bindparam("request_id")
)
# Insert a hold, or take over an expired one in place; RETURNING says whether either happened (a
# live hold is left alone and returns no row). One statement, no read before the write. As text:
# both engines speak this upsert alike, and a text statement is compiled once (a dialect's own
# `insert().on_conflict_do_update()` is compiled again on every call).
_TAKE_HOLD = (
    text(
        "INSERT INTO campaign_request_ids (workspace_id, request_id, campaign_id, expires_at) "
        "VALUES (:workspace_id, :request_id, :campaign_id, :expires_at) "
        "ON CONFLICT (workspace_id, request_id) DO UPDATE "
        "SET campaign_id = excluded.campaign_id, expires_at = excluded.expires_at "
        "WHERE campaign_request_ids.expires_at <= :now "
        "RETURNING campaign_id"
    )
    .bindparams(bindparam("expires_at", type_=UTCDateTime()), bindparam("now", type_=UTCDateTime()))
    .columns(_HOLDS.c.campaign_id)
)


async def hold_request_id(session: AsyncSession, hold: dict[str, Any], now: datetime) -> str | None:
    """Hold a create `request_id` for a new campaign (`hold`: its row), unless a live hold has it:
    None when this create now holds it, else the campaign holding it (the statement waits for a
    concurrent create holding it to end, then sees its hold)."""
    connection = await session.connection()
    taken = await connection.execute(_TAKE_HOLD, {**hold, "now": now})
    if taken.first() is not None:
        return None
    key = {"workspace_id": hold["workspace_id"], "request_id": hold["request_id"]}
    return str((await connection.execute(_HELD, key)).scalar_one())


async def insert_new(session: AsyncSession, values: dict[str, Any], joined: Joined | None = None) -> None:
    """A new campaign row (first version) and its tag rows, as Core inserts on the session's
    connection (no ORM instance: nothing reads the row back), and `joined` (an insert built once,
    and its parameters) with them. On PostgreSQL all in one statement: one round trip."""
    connection = await session.connection()
    tags = _tags_of(values)
    also, also_values = joined if joined is not None else (None, {})
    if connection.dialect.name == "postgresql" and (tags or also is not None):
        statement = _in_one(frozenset(values), bool(tags), also)
        await connection.execute(statement, {**values, "tag_list": tags, **also_values})
        return
    await _write_new(connection, values, joined)


async def _write_new(transaction: Transaction, values: dict[str, Any], joined: Joined | None) -> None:
    """A new campaign row, its tag rows and `joined`, statement by statement in `transaction`."""
    await execute_in(transaction, _INSERT_CAMPAIGN, values)
    tags = [
        {"workspace_id": values["workspace_id"], "tag": tag, "campaign_row_id": values["id"]}
        for tag in _tags_of(values)
    ]
    await execute_many_in(transaction, _INSERT_TAGS, tags)
    if joined is not None:
        await execute_in(transaction, *joined)


async def insert_held(
    session: AsyncSession,
    hold: dict[str, Any],
    now: datetime,
    values: dict[str, Any],
    joined: Joined | None = None,
) -> str | None:
    """`hold_request_id`, then `insert_new` if the hold was taken: None when it was (the campaign
    is inserted), else the campaign holding the `request_id` (nothing is inserted but, on
    PostgreSQL, `joined`: the caller refuses the request, which rolls it back). On PostgreSQL one
    statement, one round trip: the row's insert selects from the hold's."""
    connection = await session.connection()
    if connection.dialect.name != "postgresql":
        holder = await hold_request_id(session, hold, now)
        if holder is None:
            await insert_new(session, values, joined)
        return holder
    tags = _tags_of(values)
    also, also_values = joined if joined is not None else (None, {})
    statement = _held_in_one(frozenset(values), bool(tags), also)
    # The hold's parameters and the row's share their names (workspace_id, request_id, campaign_id)
    # and values.
    parameters = {**values, **hold, "now": now, "tag_list": tags, **also_values}
    if (await connection.execute(statement, parameters)).first() is not None:
        return None
    key = {"workspace_id": hold["workspace_id"], "request_id": hold["request_id"]}
    return str((await connection.execute(_HELD, key)).scalar_one())


def _tags_of(values: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(values.get("tags") or ()))


@cache
def _in_one(columns: frozenset[str], tags: bool, also: Any) -> Any:
    """PostgreSQL: insert a campaign row of `columns`, its tags (`tag_list`, unnested) and `also`
    in one statement (data-modifying CTEs; the tag rows' foreign key is checked at the statement's
    end, when the row is there). Built once per combination."""
    row = insert(_CAMPAIGNS).values(
        {name: bindparam(name, type_=_CAMPAIGNS.c[name].type) for name in columns}
    )
    parts = [row]
    if tags:
        parts.append(_tag_rows(select(bindparam("id", type_=String))))
    if also is not None:
        parts.append(also)
    main, *ctes = reversed(parts)
    return main.add_cte(*(part.cte(f"part_{n}") for n, part in enumerate(ctes)))


@cache
def _held_in_one(columns: frozenset[str], tags: bool, also: Any) -> Any:
    """PostgreSQL: `_in_one` behind `_TAKE_HOLD`: the row is selected from the hold taken (none
    when a live hold refused it), the tags from the row inserted. The statement returns the hold's
    row. Built once per combination."""
    names = sorted(columns)
    hold = _TAKE_HOLD.cte("hold")
    values = select(*(bindparam(name, type_=_CAMPAIGNS.c[name].type) for name in names)).select_from(hold)
    row = insert(_CAMPAIGNS).from_select(names, values).returning(_CAMPAIGNS.c.id).cte("inserted")
    ctes = [hold, row]
    if tags:
        ctes.append(_tag_rows(select(row.c.id)).cte("tag_rows"))
    if also is not None:
        ctes.append(also.cte("joined"))
    return select(hold.c.campaign_id).add_cte(*ctes)


async def insert_claimed_held(
    claimed: ClaimedStatement,
    hold: dict[str, Any],
    now: datetime,
    values: dict[str, Any],
    joined: Joined | None,
) -> bool:
    """`insert_held` with the request's Idempotency-Key claim (`claimed`), written by themselves:
    the key's claim, then the hold (only when the key has no record), the row, its tags and
    `joined`, the answer's record. On PostgreSQL one statement committed by itself (the hold only
    when the key was claimed, the rest only when the row was inserted); on SQLite a transaction of
    its own on the driver, under the write lock. Whether they were written: when not, nothing was,
    and the caller claims the key and holds the request_id in its transaction instead, which says
    why (a replay, a 409)."""
    try:
        if not claimed.one_statement:
            return await _in_own_transaction(claimed, {**hold, "now": now}, values, joined)
        tags = _tags_of(values)
        record_after = claimed.record_after if joined is not None else None
        statement = _claimed_in_one(frozenset(values), bool(tags), claimed.claim, record_after)
        record = joined[1] if joined is not None else {}
        parameters = {**values, **hold, **claimed.parameters, "now": now, "tag_list": tags, **record}
        return bool(await claimed.rows(statement, parameters))
    except IntegrityError:  # e.g. the key's record written meanwhile by a claim without the lock
        return False


class _NotWritten(Exception):
    """Rolls back a claimed create's own transaction that must write nothing."""


async def _in_own_transaction(
    claimed: ClaimedStatement, hold: dict[str, Any], values: dict[str, Any], joined: Joined | None
) -> bool:
    """SQLite: `insert_claimed_held` in a transaction of its own on the driver; `hold` with `now`."""
    try:
        async with claimed.transaction() as transaction:
            if await rows_in(transaction, claimed.lookup, claimed.parameters):
                raise _NotWritten  # the key has a record: it answers (or is forgotten) the other way
            if not await rows_in(transaction, _TAKE_HOLD, hold):
                raise _NotWritten  # a live hold of the request_id
            await _write_new(transaction, values, joined)
    except _NotWritten:
        return False
    return True


@cache
def _claimed_in_one(columns: frozenset[str], tags: bool, claim: Any, record_after: Any) -> Any:
    """`insert_claimed_held`'s statement: it returns the hold's row when everything was written.
    Built once per combination."""
    claimed = claim.cte("claim")
    granted = select(*(bindparam(name, type_=_HOLDS.c[name].type) for name in _HOLD_COLUMNS))
    granted = granted.select_from(claimed).where(claimed.c.held, claimed.c.fingerprint.is_(None))
    taken = postgresql.insert(_HOLDS).from_select(_HOLD_COLUMNS, granted)
    hold = (
        taken.on_conflict_do_update(
            index_elements=[_HOLDS.c.workspace_id, _HOLDS.c.request_id],
            set_={"campaign_id": taken.excluded.campaign_id, "expires_at": taken.excluded.expires_at},
            where=_HOLDS.c.expires_at <= bindparam("now", type_=UTCDateTime()),
        )
        .returning(_HOLDS.c.campaign_id)
        .cte("hold")
    )
    names = sorted(columns)
    row_values = select(*(bindparam(name, type_=_CAMPAIGNS.c[name].type) for name in names))
    row = insert(_CAMPAIGNS).from_select(names, row_values.select_from(hold))
    inserted = row.returning(_CAMPAIGNS.c.id).cte("inserted")
    ctes = [claimed, hold, inserted]
    if tags:
        ctes.append(_tag_rows(select(inserted.c.id)).cte("tag_rows"))
    if record_after is not None:
        ctes.append(record_after(inserted).cte("record"))
    return select(hold.c.campaign_id).add_cte(*ctes)


_HOLD_COLUMNS = ["workspace_id", "request_id", "campaign_id", "expires_at"]


def _tag_rows(row_id: Select[Any]) -> Any:
    """An insert of the tag rows of `tag_list` (unnested) for the row id that `row_id` selects."""
    tag = func.unnest(bindparam("tag_list", type_=ARRAY(String)))
    rows = row_id.add_columns(bindparam("workspace_id", type_=String), tag)
    return insert(_TAGS).from_select(["campaign_row_id", "workspace_id", "tag"], rows)
