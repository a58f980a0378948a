"""Set-based writes of users and events, shared by the ingestion API and the bulk importer.

Customer upserts are one `INSERT ... ON CONFLICT DO UPDATE` per group of rows that send the same
standard attributes, executed as one executemany. The custom-attribute merge happens in the database
(PostgreSQL `jsonb_strip_nulls(old || patch)`, SQLite `json_patch(old, patch)`; both remove keys whose
patch value is null), so concurrent upserts of one user never lose each other's keys.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from functools import cache
from typing import Any, Literal, TypeVar, cast

from sqlalchemy import (
    Insert,
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    not_,
    select,
    true,
    union,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CompoundSelect

from herald.audience.attributes import FLAG_COLUMNS
from herald.audience.ingest import CustomerWrite, EventWrite
from herald.audience.models import PLATFORM_BITS, Event, PushToken, User
from herald.audience.segmentation.dialect import dialect_for
from herald.campaigns.schemas.filters import FilterDataType
from herald.db import PortableJSON, UTCDateTime
from herald.direct_reads import RowSource, rows_in
from herald.direct_writes import execute_many_in
from herald.ids import object_id
from herald.sql_lists import one_of

Outcome = Literal["created", "updated", "skipped"]
# Bound parameters per statement stay well below both engines' limits (SQLite 32766, asyncpg 32767).
ID_CHUNK = 5000

_users = cast(Table, User.__table__)
_events = cast(Table, Event.__table__)


T = TypeVar("T")


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@cache
def _existing_ids_query(postgres: bool) -> Any:
    """Built once (each ingestion runs it: built per call, the statement cost more CPU than SQLite
    takes to answer it); parameters `workspace_id` and `ids`."""
    query = select(User.customer_id).where(User.workspace_id == bindparam("workspace_id"))
    if postgres:
        # A join with the unnested array, not `IN`/`= ANY` over thousands of values: those the
        # planner may answer by scanning the table and testing every row against every value.
        given = (
            func.unnest(bindparam("ids", type_=postgresql.ARRAY(String))).table_valued("id").render_derived()
        )
        return query.join(given, User.customer_id == given.c.id)
    return query.where(one_of(User.customer_id, "ids"))


async def existing_ids(session: AsyncSession, workspace_id: str, ids: Iterable[str]) -> set[str]:
    wanted = list(dict.fromkeys(ids))
    found: set[str] = set()
    query = _existing_ids_query(dialect_of(session) == "postgresql")
    connection = await session.connection()
    for chunk in chunks(wanted, ID_CHUNK):
        values = {"workspace_id": workspace_id, "ids": list(chunk)}
        found.update(row[0] for row in await rows_in(connection, query, values))
    return found


def orphan_events(workspace_id: str) -> ColumnElement[bool]:
    """The workspace's events whose customer has no user (the importer makes users for them)."""
    return and_(
        _events.c.workspace_id == workspace_id,
        ~exists().where(
            and_(
                _users.c.workspace_id == _events.c.workspace_id, _users.c.customer_id == _events.c.customer_id
            )
        ),
    )


def dialect_of(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


def runs(writes: Sequence[CustomerWrite]) -> Iterator[list[CustomerWrite]]:
    """Consecutive writes with distinct customer ids; a repeated id starts a new run (order kept)."""
    run: list[CustomerWrite] = []
    seen: set[str] = set()
    for write in writes:
        if write.customer_id in seen:
            yield run
            run, seen = [], set()
        run.append(write)
        seen.add(write.customer_id)
    if run:
        yield run


@cache
def _upsert(dialect: str, keys: tuple[str, ...]) -> Insert:
    patch = bindparam("patch", type_=PortableJSON)
    merged: ColumnElement[Any]
    statement: postgresql.Insert | sqlite.Insert
    if dialect == "postgresql":
        statement = postgresql.insert(_users)
        merged = func.jsonb_strip_nulls(_users.c.attributes.op("||")(patch))
    else:
        statement = sqlite.insert(_users)
        merged = func.json_patch(_users.c.attributes, patch)
    excluded = statement.excluded
    updates: dict[str, Any] = {key: excluded[key] for key in keys}
    updates |= {"attributes": merged, "updated_at": excluded.updated_at}
    return statement.on_conflict_do_update(index_elements=["workspace_id", "customer_id"], set_=updates)


def _row(workspace_id: str, write: CustomerWrite, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(FLAG_COLUMNS, False)
    row.update(write.columns)
    row.update(
        workspace_id=workspace_id,
        customer_id=write.customer_id,
        attributes={name: value for name, value in write.patch.items() if value is not None},
        patch=write.patch,
        created_at=now,
        updated_at=now,
        # A new user's tokens are none yet (`sync_push_tokens` follows); given here rather than by
        # the column's Python default, the upsert compiles once and runs on the driver.
        push_platforms=0,
    )
    return row


def plan_customers(writes: Sequence[CustomerWrite], known: set[str]) -> list[Outcome]:
    """The outcome of each write in order, given the ids that exist (`known` grows as users are made)."""
    outcomes: list[Outcome] = []
    for write in writes:
        if write.customer_id in known:
            outcomes.append("updated")
        elif write.update_existing_only:
            outcomes.append("skipped")
        else:
            outcomes.append("created")
            known.add(write.customer_id)
    return outcomes


async def upsert_customers(
    session: AsyncSession, workspace_id: str, writes: Sequence[CustomerWrite], now: datetime
) -> None:
    """Insert or merge each write, in order (callers leave out the skipped ones)."""
    dialect = dialect_of(session)
    connection = await session.connection()
    if dialect == "postgresql":
        await _lock_users(connection, workspace_id, [write.customer_id for write in writes])
    for run in runs(writes):
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for write in run:
            groups.setdefault(tuple(sorted(write.columns)), []).append(_row(workspace_id, write, now))
        for keys, rows in groups.items():
            await execute_many_in(connection, _upsert(dialect, keys), rows)
    await sync_push_tokens(session, workspace_id, writes, now)


@cache
def _lock_query() -> Any:
    """PostgreSQL: the given users' rows locked in customer-id order (the lock taken above the sort);
    parameters `workspace_id` and `ids`. As `_existing_ids_query`, a join with the unnested array."""
    given = func.unnest(bindparam("ids", type_=postgresql.ARRAY(String))).table_valued("id").render_derived()
    return (
        select(User.customer_id)
        .where(User.workspace_id == bindparam("workspace_id"))
        .join(given, User.customer_id == given.c.id)
        .order_by(User.customer_id)
        .with_for_update(of=User, key_share=True)  # FOR NO KEY UPDATE OF audience_users
    )


async def _lock_users(connection: RowSource, workspace_id: str, ids: Iterable[str]) -> None:
    """Lock the rows of the users a batch is about to write, all at once and in one order, before any
    write (PostgreSQL). Each upsert and token write locks its user's row as it goes, in the order of
    the batch: two batches sharing users in different orders (a transition, an import batch) each
    held one the other was waiting for, and one failed as a deadlock. Taken up front in one order,
    the second batch queues behind the first. The mode is the one the writes take (their keys
    stay), so reads and foreign-key checks are not held up."""
    wanted = sorted(set(ids))
    if len(wanted) < 2:
        return  # a single user's lock is taken by its write: no order to keep
    for chunk in chunks(wanted, ID_CHUNK):  # chunks of a sorted list: still one order
        await rows_in(connection, _lock_query(), {"workspace_id": workspace_id, "ids": list(chunk)})


PLATFORMS = tuple(PLATFORM_BITS)
_tokens = cast(Table, PushToken.__table__)

# The bits of the platforms the user (of the enclosing UPDATE) has a token for: platform is part
# of the token's key, so the sum of their distinct bits is their union.
_platform_bits = (
    select(
        func.coalesce(
            func.sum(
                case(*((_tokens.c.platform == name, bit) for name, bit in PLATFORM_BITS.items()), else_=0)
            ),
            0,
        )
    )
    .where(_tokens.c.workspace_id == _users.c.workspace_id, _tokens.c.customer_id == _users.c.customer_id)
    .scalar_subquery()
)


# Built once: every Push test send and window of live messages reads its users' tokens. The list
# is one parameter (`one_of`). As a padded IN list there was a statement per power of two, each
# compiled by SQLAlchemy once per process and parsed by the server at each run: up to 4,096
# placeholders for a batched claim, whose compiling was 6 % of a fresh worker's samples over a
# 40,000-user batched send.
_TOKENS_OF = select(_tokens.c.customer_id, _tokens.c.platform, _tokens.c.token).where(
    _tokens.c.workspace_id == bindparam("workspace_id"), one_of(_tokens.c.customer_id, "ids")
)


def push_token_holders(
    workspace_id: Any, naming: Callable[[ColumnElement[Any]], ColumnElement[bool]]
) -> CompoundSelect[tuple[str, str]]:
    """`(customer_id, token)` of the workspace's users holding a push token that `naming` selects
    (given the column of tokens): the user's `push_id`, or any of its per-platform tokens, those live
    campaigns deliver to. A user ingested once per device keeps only the last as its `push_id`."""
    return union(
        select(_users.c.customer_id, _users.c.push_id.label("token")).where(
            _users.c.workspace_id == workspace_id, naming(_users.c.push_id)
        ),
        select(_tokens.c.customer_id, _tokens.c.token).where(
            _tokens.c.workspace_id == workspace_id, naming(_tokens.c.token)
        ),
    )


async def push_tokens(source: RowSource, workspace_id: str, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """The per-platform push tokens of these users: customer id -> platform -> token."""
    found: dict[str, dict[str, str]] = {}
    for chunk in chunks(list(dict.fromkeys(ids)), ID_CHUNK):
        values = {"workspace_id": workspace_id, "ids": list(chunk)}
        for customer_id, platform, token in await rows_in(source, _TOKENS_OF, values):
            found.setdefault(customer_id, {})[platform] = token
    return found


async def sync_push_tokens(
    session: AsyncSession, workspace_id: str, writes: Sequence[CustomerWrite], now: datetime
) -> None:
    """Per-platform tokens follow the writes just applied (see `models.PushToken`): a user's
    `push_id` becomes the token of its `platform`; `push_id: null` removes the token of the platform
    sent with it, or every token of the user when none is. The user's `push_platforms` follows its
    tokens (this is the only writer of either)."""
    touched = [w.customer_id for w in writes if "push_id" in w.columns or "platform" in w.patch]
    if not touched:
        return
    # A user written once in the batch: its final row says its token (below, set-based). A user
    # written several times (one write per device, in one import batch or one transition) has each
    # write's token: replayed in order (`_replay_tokens`).
    counts = Counter(touched)
    several = {customer_id for customer_id, count in counts.items() if count > 1}
    if several:
        await _replay_tokens(session, workspace_id, [w for w in writes if w.customer_id in several], now)
        writes = [w for w in writes if w.customer_id not in several]
        touched = [c for c in touched if c not in several]
    for write in writes:
        if "push_id" in write.columns and not write.columns["push_id"]:
            named = _platform_named(write.patch.get("platform"))
            await _remove_tokens(session, workspace_id, write.customer_id, named)
    dialect = dialect_of(session)
    platform = func.upper(
        dialect_for(dialect).json_scalar(_users.c.attributes, "platform", FilterDataType.STRING)
    )
    # A write of `platform` alone makes the user's `push_id` that platform's token, unless it is
    # the token of another platform of the user already: then it came from another device (an
    # iOS token was sent as an Android push once the user's platform read ANDROID).
    of_another_platform = exists(
        select(literal(1)).where(
            _tokens.c.workspace_id == _users.c.workspace_id,
            _tokens.c.customer_id == _users.c.customer_id,
            _tokens.c.token == _users.c.push_id,
            _tokens.c.platform != platform,
        )
    )
    with_push_id = {w.customer_id for w in writes if "push_id" in w.columns}
    for chunk in chunks(list(dict.fromkeys(touched)), ID_CHUNK):
        for ids, rule in (
            ([c for c in chunk if c in with_push_id], true()),
            ([c for c in chunk if c not in with_push_id], not_(of_another_platform)),
        ):
            if not ids:
                continue
            source = select(
                _users.c.workspace_id,
                _users.c.customer_id,
                platform,
                _users.c.push_id,
                literal(now, UTCDateTime),
            ).where(
                _users.c.workspace_id == workspace_id,
                _users.c.customer_id.in_(ids),
                _users.c.push_id.is_not(None),
                _users.c.push_id != "",
                platform.in_(PLATFORMS),
                rule,
            )
            statement = _token_insert(dialect).from_select(
                ["workspace_id", "customer_id", "platform", "token", "updated_at"], source
            )
            await session.execute(_replacing_tokens(statement))
        await _sync_platforms(session, workspace_id, chunk)


def _token_insert(dialect: str) -> postgresql.Insert | sqlite.Insert:
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_tokens)


def _replacing_tokens(statement: postgresql.Insert | sqlite.Insert) -> Insert:
    """`statement`, a token of a (user, platform) that has one replacing it."""
    return statement.on_conflict_do_update(
        index_elements=["workspace_id", "customer_id", "platform"],
        set_={"token": statement.excluded.token, "updated_at": statement.excluded.updated_at},
    )


async def _remove_tokens(
    session: AsyncSession, workspace_id: str, customer_id: str, platform: str | None = None
) -> None:
    """The user's token of `platform`, or every token of the user when none is named."""
    removed = delete(_tokens).where(
        _tokens.c.workspace_id == workspace_id, _tokens.c.customer_id == customer_id
    )
    if platform is not None:
        removed = removed.where(_tokens.c.platform == platform)
    await session.execute(removed)


async def _sync_platforms(session: AsyncSession, workspace_id: str, ids: Sequence[str]) -> None:
    await session.execute(
        update(_users)
        .where(_users.c.workspace_id == workspace_id, _users.c.customer_id.in_(ids))
        .values(push_platforms=_platform_bits)
    )


def _platform_named(value: object) -> str | None:
    return value.upper() if isinstance(value, str) else None


async def _replay_tokens(
    session: AsyncSession, workspace_id: str, writes: Sequence[CustomerWrite], now: datetime
) -> None:
    """`sync_push_tokens` for users written several times in the batch: each write in order, as if
    applied one by one. A write that names no platform (or no `push_id`) takes the one its user has
    by then: set by an earlier write of the batch, else the user's row as the batch left it."""
    ids = list(dict.fromkeys(w.customer_id for w in writes))
    final: dict[str, tuple[str | None, str | None]] = {}
    for chunk in chunks(ids, ID_CHUNK):
        rows = await session.execute(
            select(_users.c.customer_id, _users.c.push_id, _users.c.attributes).where(
                _users.c.workspace_id == workspace_id, _users.c.customer_id.in_(chunk)
            )
        )
        for customer_id, push_id, attributes in rows.all():
            final[customer_id] = (push_id, _platform_named((attributes or {}).get("platform")))
    cleared: set[str] = set()  # every token of the user removed first
    tokens: dict[str, dict[str, str | None]] = {}  # per user, platform -> token (None: removed)
    # Per user, platform -> token as the batch has left it so far (the stored ones first).
    held: dict[str, dict[str, str | None]] = defaultdict(dict)
    for chunk in chunks(ids, ID_CHUNK):
        stored = await session.execute(
            select(_tokens.c.customer_id, _tokens.c.platform, _tokens.c.token).where(
                _tokens.c.workspace_id == workspace_id, _tokens.c.customer_id.in_(chunk)
            )
        )
        for customer_id, platform_name, token in stored.all():
            held[customer_id][platform_name] = token
    current: dict[str, tuple[str | None, str | None]] = {}  # (push_id, platform) so far
    for write in writes:
        customer_id = write.customer_id
        if customer_id not in final:
            continue  # not written (an `update_existing_only` write of an unknown user)
        push_id, platform = current.get(customer_id, final[customer_id])
        if "platform" in write.patch:
            platform = _platform_named(write.patch["platform"])
        if "push_id" in write.columns:
            push_id = write.columns["push_id"] or None
        current[customer_id] = (push_id, platform)
        mine = tokens.setdefault(customer_id, {})
        if "push_id" in write.columns and push_id is None:
            if "platform" in write.patch and platform is not None:
                mine[platform] = held[customer_id][platform] = None
            else:
                cleared.add(customer_id)
                mine.clear()
                held[customer_id].clear()
        elif push_id is not None and platform in PLATFORMS:
            # `platform` alone: not a token another platform of the user has (see above).
            others = {token for name, token in held[customer_id].items() if name != platform}
            if "push_id" in write.columns or push_id not in others:
                mine[platform] = held[customer_id][platform] = push_id
    for customer_id in cleared:
        await _remove_tokens(session, workspace_id, customer_id)
    rows_to_keep: list[dict[str, Any]] = []
    for customer_id, mine in tokens.items():
        for platform, token in mine.items():
            if token is None:
                await _remove_tokens(session, workspace_id, customer_id, platform)
            else:
                rows_to_keep.append(
                    {
                        "workspace_id": workspace_id,
                        "customer_id": customer_id,
                        "platform": platform,
                        "token": token,
                        "updated_at": now,
                    }
                )
    if rows_to_keep:
        await session.execute(_replacing_tokens(_token_insert(dialect_of(session))), rows_to_keep)
    for chunk in chunks(ids, ID_CHUNK):
        await _sync_platforms(session, workspace_id, chunk)


async def write_customers(
    session: AsyncSession, workspace_id: str, writes: Sequence[CustomerWrite], now: datetime
) -> list[Outcome]:
    """Apply customer writes in order; the outcome of each, aligned with `writes`."""
    known = await existing_ids(session, workspace_id, (write.customer_id for write in writes))
    if dialect_of(session) == "postgresql":
        # SQLite's writers take turns, so there the read is exact (see `claim_new_users`).
        new = [w.customer_id for w in writes if w.customer_id not in known and not w.update_existing_only]
        await claim_new_users(session, workspace_id, new, known, now)
    outcomes = plan_customers(writes, known)
    applied = [write for write, outcome in zip(writes, outcomes, strict=True) if outcome != "skipped"]
    await upsert_customers(session, workspace_id, applied, now)
    return outcomes


async def ensure_users(
    session: AsyncSession, workspace_id: str, ids: Iterable[str], now: datetime
) -> list[str]:
    """Create bare users for the ids not known yet (events of unknown customers); the ids created."""
    wanted = list(dict.fromkeys(ids))
    existing = await existing_ids(session, workspace_id, wanted)
    missing = [customer_id for customer_id in wanted if customer_id not in existing]
    return await insert_bare_users(session, workspace_id, missing, now)


async def claim_new_users(
    session: AsyncSession, workspace_id: str, new: Iterable[str], known: set[str], now: datetime
) -> None:
    """Create first, as bare users, the users a batch creates by its read of `known` (the ids that
    exist), and add to `known` those a concurrent request created meanwhile.

    Concurrent requests may each read a new user as unknown before either commits: the new ids are
    inserted here, each by whichever transaction gets there first, the others waiting for it. Only
    that one counts the user created; the others find it in `known` and merge into its row (merging
    onto a bare user gives the row creating it would)."""
    wanted = set(new)
    made = set(await insert_bare_users(session, workspace_id, wanted, now))
    known.update(wanted - made)


async def insert_bare_users(
    session: AsyncSession, workspace_id: str, ids: Iterable[str], now: datetime
) -> list[str]:
    """Users with only an id (ids that exist already are left alone); the ids this inserted (a
    concurrent request that inserted one first made it, and says so). Inserted in customer-id
    order: an insert waits for a concurrent one of the same id, and two batches inserting shared
    ids in different orders would each wait for the other (a deadlock on PostgreSQL)."""
    rows = [_bare_user(workspace_id, customer_id, now) for customer_id in sorted(set(ids))]
    if not rows:
        return []
    inserted = await session.execute(_insert_ignore(dialect_of(session)), rows)
    return [row[0] for row in inserted]


@cache
def _insert_ignore(dialect: str) -> ReturningInsert[tuple[str]]:
    statement = postgresql.insert(_users) if dialect == "postgresql" else sqlite.insert(_users)
    ignoring = statement.on_conflict_do_nothing(index_elements=["workspace_id", "customer_id"])
    return ignoring.returning(_users.c.customer_id)


def _bare_user(workspace_id: str, customer_id: str, now: datetime) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id,
        "customer_id": customer_id,
        **dict.fromkeys(FLAG_COLUMNS, False),
        "attributes": {},
        "created_at": now,
        "updated_at": now,
    }


def event_row(workspace_id: str, event: EventWrite, event_id: str, now: datetime) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id,
        "id": event_id,
        "customer_id": event.customer_id,
        "action": event.action,
        "attributes": event.attributes,
        "platform": event.platform,
        "app_version": event.app_version,
        "occurred_at": event.occurred_at,
        "received_at": now,
    }


async def insert_events(
    session: AsyncSession, workspace_id: str, events: Sequence[EventWrite], now: datetime
) -> list[str]:
    """Store events (their users must exist or be ensured by the caller); their ids, in order."""
    ids = [object_id(now) for _ in events]
    if events:
        rows = [
            event_row(workspace_id, event, event_id, now) for event, event_id in zip(events, ids, strict=True)
        ]
        await session.execute(insert(_events), rows)
    return ids
