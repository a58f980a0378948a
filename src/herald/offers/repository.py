"""Offer queries. Every query is scoped to one workspace through `scoped()`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Table,
    Text,
    bindparam,
    cast,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.db import UTCDateTime
from herald.direct_reads import DirectReads
from herald.joined_writes import Joined, execute_with
from herald.lowercase import lower
from herald.offers.list_query import SUMMARY_FIELDS, OffersListQuery
from herald.offers.models import STORED_ARCHIVED, Offer, OfferTag, StoredOffer
from herald.offers.requests import MAX_TAGS
from herald.offers.status import OfferStatus, status_column, status_predicate
from herald.timefmt import day_end, day_start
from herald.timefmt_sql import rfc3339_text
from herald.workspaces.models import OfferTemplate, Tag

LIVE_NAME_INDEX = "uq_offers_workspace_id_name_live"


def scoped(workspace_id: str) -> Select[tuple[Offer]]:
    return select(Offer).where(Offer.workspace_id == workspace_id)


@dataclass(frozen=True)
class _Shape:
    """Which filters an O1 query uses: its statement depends on this, never on their values."""

    by_id: bool
    name_contains: bool
    statuses: tuple[OfferStatus, ...]
    tags: int
    created_from: bool
    created_until: bool
    creators: bool
    after: bool
    # The summary fields the page shows: only their columns are read.


def _shape(query: OffersListQuery, tag_ids: list[str]) -> _Shape:
    return _Shape(
        by_id=query.id is not None,
        name_contains=bool(query.name_contains),
        statuses=tuple(query.statuses),
        tags=len(tag_ids),
        created_from=query.created_from is not None,
        created_until=query.created_until is not None and day_end(query.created_until) is not None,
        creators=bool(query.creators),
        after=query.after_id is not None,
    )


def _tag_ids(query: OffersListQuery) -> list[str]:
    """The distinct tag ids the query names (`tag_<id>` and `<id>` are one tag)."""
    return list(dict.fromkeys(tag.removeprefix("tag_") for tag in query.tags))


def _like_pattern(text: str) -> str:
    """`text` as a LIKE pattern matching it anywhere, `/` escaping the wildcards."""
    escaped = text.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return f"%{escaped}%"


def _parameters(
    workspace_id: str, query: OffersListQuery, tag_ids: list[str], now: datetime
) -> dict[str, Any]:
    values: dict[str, Any] = {"workspace_id": workspace_id, "now": now, "page_size": query.limit + 1}
    if query.id is not None:
        values["offer_id"] = query.id.removeprefix("offer_")
    if query.name_contains:
        values["name_pattern"] = _like_pattern(lower(query.name_contains))
    for index, tag in enumerate(tag_ids):
        values[f"tag_{index}"] = tag
    if query.created_from is not None:
        values["created_from"] = day_start(query.created_from)
    if query.created_until is not None and (end := day_end(query.created_until)) is not None:
        values["created_before"] = end
    if query.creators:
        values["creators"] = query.creators
    if query.after_id is not None:
        values["after_id"] = query.after_id
    return values


def _conditions(shape: _Shape) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [Offer.workspace_id == bindparam("workspace_id")]
    if shape.by_id:
        conditions.append(Offer.id == bindparam("offer_id"))
    if shape.name_contains:
        conditions.append(func.lower(Offer.name).like(bindparam("name_pattern"), escape="/"))
    if shape.statuses:
        now = bindparam("now", type_=UTCDateTime())
        conditions.append(or_(*(status_predicate(status, now) for status in shape.statuses)))
    for index in range(shape.tags):
        conditions.append(
            exists().where(
                OfferTag.workspace_id == Offer.workspace_id,
                OfferTag.offer_id == Offer.id,
                OfferTag.tag_id == bindparam(f"tag_{index}"),
            )
        )
    if shape.created_from:
        conditions.append(Offer.created_at >= bindparam("created_from", type_=UTCDateTime()))
    if shape.created_until:
        conditions.append(Offer.created_at < bindparam("created_before", type_=UTCDateTime()))
    if shape.creators:
        conditions.append(Offer.created_by.in_(bindparam("creators", expanding=True)))
    return conditions


def _summary_columns() -> list[Any]:
    """The page's columns: `id` (the cursor), then every summary field in summary order, each as the
    value it is shown as where SQL can give it (the status and `created_at` as their wire text; the
    tags as their JSON text, which `offers.service` parses, NULL when there are none: most offers
    have none, and then a row needs no parse at all), so a row needs no Python date-times.
    Every field, whatever `fields` selects: an item is then built by position, in one dict display
    (`offers.service._item`), and cut down to the selection after."""
    now = bindparam("now", type_=UTCDateTime())
    columns: dict[str, Any] = {
        "name": Offer.name,
        "status": status_column(now).label("status"),
        "tags": func.nullif(cast(Offer.tags, Text), "[]").label("tags"),
        "created_at": rfc3339_text(Offer.created_at).label("created_at"),
        "created_by": Offer.created_by,
    }
    return [Offer.id, *(columns[name] for name in SUMMARY_FIELDS if name != "id")]


@lru_cache(maxsize=512)
def _statements(shape: _Shape) -> tuple[Select[Any], Select[Any]]:
    """The page and count statements of a query shape, built once: a request only binds values
    (building and keying a statement cost more than running it on a small page)."""
    conditions = _conditions(shape)
    count = select(func.count()).select_from(Offer).where(*conditions)
    page = select(*_summary_columns(), count.scalar_subquery().label("total_count"))
    page = page.where(*conditions)
    if shape.after:
        page = page.where(Offer.id < bindparam("after_id"))
    page = page.order_by(Offer.id.desc()).limit(bindparam("page_size", type_=Integer()))
    return page, count


async def list_page(
    reads: DirectReads, workspace_id: str, query: OffersListQuery, now: datetime
) -> tuple[Sequence[Sequence[Any]], int]:
    """One page (limit + 1 rows, newest first, after the cursor) and the count of all matches. A
    row is (id, the summary fields as `_summary_columns` reads them..., total_count).

    The count rides along as an uncorrelated scalar subquery, evaluated once, so page and count
    come from one statement and one snapshot on every engine and isolation level, while the page
    still walks the primary key and stops early. Only an empty page needs a query of its own
    (O1 reads without a transaction on PostgreSQL: that count is then a moment later's).
    """
    tag_ids = _tag_ids(query)
    if len(tag_ids) > MAX_TAGS:
        # No offer carries more tags than that, so none has them ALL: answered without a query
        # (each tag is a condition of its own, and hundreds of them kept PostgreSQL busy for minutes).
        return [], 0
    page, count = _statements(_shape(query, tag_ids))
    values = _parameters(workspace_id, query, tag_ids, now)
    # On the driver: rows of the selected columns in wire form, without SQLAlchemy's execution and
    # result machinery (more CPU than the statement itself; `herald.direct_reads`).
    rows = await reads.rows(page, values)
    total = rows[0][-1] if rows else await reads.scalar(count, values)
    return rows, int(total or 0)


_OFFERS = typed(Table, Offer.__table__)
# Built once: O3 and O5 run them on every request. Core statements on the session's connection: a
# plain row in, the changed columns out, without the ORM's identity map, unit of work and flush.
_LOCKED = (
    select(_OFFERS)
    .where(_OFFERS.c.workspace_id == bindparam("workspace_id"), _OFFERS.c.id == bindparam("offer_id"))
    .with_for_update()
)
_INSERT = insert(_OFFERS)
# The SET clause is the parameters' columns (one compiled form per set of columns).
_UPDATE = update(_OFFERS).where(
    _OFFERS.c.workspace_id == bindparam("row_workspace_id"), _OFFERS.c.id == bindparam("row_id")
)


async def get_for_update(session: AsyncSession, workspace_id: str, offer_id: str) -> StoredOffer | None:
    """The offer's row, locked until the transaction ends (PostgreSQL; SQLite writers hold the
    database)."""
    connection = await session.connection()
    key = {"workspace_id": workspace_id, "offer_id": offer_id}
    row = (await connection.execute(_LOCKED, key)).first()
    return None if row is None else StoredOffer(**row._mapping)


async def insert_offer(session: AsyncSession, values: dict[str, Any], joined: Joined | None = None) -> None:
    """A new offer row (every column given), and `joined` with it (`herald.joined_writes`)."""
    connection = await session.connection()
    await execute_with(connection, _INSERT, _OFFERS, values, joined)


async def update_offer(
    session: AsyncSession,
    workspace_id: str,
    offer_id: str,
    values: dict[str, Any],
    joined: Joined | None = None,
) -> None:
    """Write `values` (column name -> value) onto one offer's row, and `joined` with it."""
    connection = await session.connection()
    key = {"row_workspace_id": workspace_id, "row_id": offer_id}
    await execute_with(connection, _UPDATE, _OFFERS, {**values, **key}, joined)


async def existing_tags(session: AsyncSession, workspace_id: str, tag_ids: Sequence[str]) -> frozenset[str]:
    if not tag_ids:
        return frozenset()
    query = select(Tag.id).where(Tag.workspace_id == workspace_id, Tag.id.in_(set(tag_ids)))
    return frozenset((await session.scalars(query)).all())


async def template_fields(
    session: AsyncSession, workspace_id: str, template_ids: Sequence[str]
) -> dict[str, list[str]]:
    """Required fields of the named templates that exist in the workspace."""
    if not template_ids:
        return {}
    query = select(OfferTemplate.id, OfferTemplate.fields).where(
        OfferTemplate.workspace_id == workspace_id, OfferTemplate.id.in_(set(template_ids))
    )
    return {row.id: list(row.fields or []) for row in await session.execute(query)}


async def live_names(
    session: AsyncSession, workspace_id: str, names: Sequence[str], except_id: str | None = None
) -> frozenset[str]:
    """Which of `names` a non-archived offer (other than `except_id`) already has."""
    if not names:
        return frozenset()
    query = select(Offer.name).where(
        Offer.workspace_id == workspace_id,
        Offer.name.in_(set(names)),
        Offer.stored_status != STORED_ARCHIVED,
    )
    if except_id is not None:
        query = query.where(Offer.id != except_id)
    return frozenset((await session.scalars(query)).all())


async def replace_tags(
    session: AsyncSession, workspace_id: str, offer_id: str, tag_ids: Sequence[str]
) -> None:
    await session.execute(
        delete(OfferTag).where(OfferTag.workspace_id == workspace_id, OfferTag.offer_id == offer_id)
    )
    await add_tags(session, workspace_id, offer_id, tag_ids)


async def add_tags(session: AsyncSession, workspace_id: str, offer_id: str, tag_ids: Sequence[str]) -> None:
    """The tag rows of an offer that has none (yet)."""
    if tag_ids:
        await session.execute(
            insert(OfferTag),
            [{"workspace_id": workspace_id, "tag_id": tag, "offer_id": offer_id} for tag in tag_ids],
        )


def is_duplicate_name(exc: IntegrityError) -> bool:
    """Whether a failed write broke the live-name index (a concurrent create or rename won)."""
    text = str(exc.orig)
    return LIVE_NAME_INDEX in text or "offers.workspace_id, offers.name" in text
