"""Pages of campaigns for Search (C6) and meta (C7): what a page must match and the statement that
reads it. The visibility rules and the order are in `campaigns.search`'s docstring.

How a page is read depends on the engine, because the shown statuses are a set (by default six of
eight) and a workspace may hold thousands of rows of the others (drafts, say):
- A single statement over every shown status is planned badly without statistics: SQLite keeps
  none (Herald never runs ANALYZE) and always walks (workspace_id, created_at, id), reading every
  hidden row it passes (a workspace of 3,000 drafts read all of them for an empty page);
  PostgreSQL before its first ANALYZE of the table (autovacuum off, or a table filled faster than
  autoanalyze runs) guesses one row a table and filters the whole workspace through
  (workspace_id, parent_id, is_latest) and a sort (1.6-2.6 ms for 3,000 drafts, growing with them).
- So the page's ids are a merge of one walk per shown status over (workspace_id, status,
  created_at, id, is_latest, parent_id, flow_id), each already in page order: a page reads about as
  many index entries as it skips and shows, never those of statuses not shown, and then reads only
  its own rows, whatever the statistics. SQLite runs the merge lazily (MERGE (UNION ALL)).
  PostgreSQL merges branches (Merge Append) only when each has its own ORDER BY and LIMIT, so there
  each walk is bounded by the page's end (offset + limit): 0.05 ms for the same empty page (without
  statistics it may instead sort each branch's rows, still only those of shown statuses).

Statements are built once per shape of criteria (which filters are present, not their values) and
page size, and kept; the other values travel as parameters: building a statement, and SQLAlchemy's
cache key of it, cost more than running it. The page size (1-15) is written into the statement: a
prepared statement's generic plan guesses a parameter's LIMIT at a tenth of what it limits, and
PostgreSQL then joined a page's ids to every campaign of the workspace by hashing instead of looking
up each id (the plan it settles on after five executions; 7 ms for a 10,000-campaign workspace,
against 0.2 ms for the lookups).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    and_,
    bindparam,
    exists,
    literal_column,
    or_,
    select,
    union_all,
)

from herald.campaigns.models import Campaign, CampaignTag
from herald.campaigns.schemas.common import CampaignStatus

T = TypeVar("T", bound=tuple[Any, ...])


@dataclass(frozen=True)
class CreatedBounds:
    created_from: datetime | None = None
    created_before: datetime | None = None
    created_until: datetime | None = None


@dataclass(frozen=True)
class Criteria:
    """What a page of campaigns must match; None or empty means "any"."""

    ids: tuple[str, ...] = ()
    name: str | None = None
    channels: tuple[str, ...] | None = None
    statuses: tuple[str, ...] | None = None
    delivery_types: tuple[str, ...] | None = None
    created_by: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    created: CreatedBounds = CreatedBounds()
    version_number: int | None = None
    include_children: bool = False
    include_archived: bool = False


_ALL_BUT_DRAFT = frozenset(status.value for status in CampaignStatus) - {CampaignStatus.DRAFT.value}
# Without `status`: every state but DRAFT, with ARCHIVED or not (made once: every unfiltered page).
_UNLISTED = {
    True: sorted(_ALL_BUT_DRAFT),
    False: sorted(_ALL_BUT_DRAFT - {CampaignStatus.ARCHIVED.value}),
}


def visible_statuses(criteria: Criteria) -> list[str]:
    if criteria.statuses is None:
        return list(_UNLISTED[criteria.include_archived])
    allowed = set(criteria.statuses)
    if not criteria.include_archived:
        allowed.discard(CampaignStatus.ARCHIVED.value)
    return sorted(allowed)


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True)
class Shape:
    """Which conditions a page has, not their values; `merged` is the number of per-status walks
    merged, 0 for one walk over all shown statuses; `bounded` when each walk has its own order and
    limit (PostgreSQL)."""

    merged: int
    bounded: bool
    versioning: bool
    include_children: bool
    ids: bool
    name: bool
    channels: bool
    delivery_types: bool
    created_by: bool
    tags: bool
    created_from: bool
    created_before: bool
    created_until: bool
    version_number: bool

    @classmethod
    def of(cls, criteria: Criteria, *, versioning: bool, merged: int, bounded: bool) -> Shape:
        created = criteria.created
        return cls(
            merged=merged,
            bounded=bounded,
            versioning=versioning,
            include_children=criteria.include_children,
            ids=bool(criteria.ids),
            name=criteria.name is not None,
            channels=criteria.channels is not None,
            delivery_types=criteria.delivery_types is not None,
            created_by=criteria.created_by is not None,
            tags=criteria.tags is not None,
            created_from=created.created_from is not None,
            created_before=created.created_before is not None,
            created_until=created.created_until is not None,
            version_number=criteria.version_number is not None,
        )


def _listed(name: str) -> Any:
    return bindparam(name, expanding=True)


def conditions(shape: Shape) -> list[ColumnElement[bool]]:
    """Every condition of `shape` but the status, its values as parameters (`parameters`)."""
    where: list[ColumnElement[bool]] = [Campaign.workspace_id == bindparam("workspace_id")]
    if not shape.versioning:
        where.append(Campaign.is_latest.expression)
    if not shape.include_children:
        where += [Campaign.parent_id.is_(None), Campaign.flow_id.is_(None)]
    if shape.ids:
        ids = _listed("ids")
        where.append(or_(Campaign.id.in_(ids), Campaign.campaign_id.in_(ids)))
    if shape.name:
        where.append(Campaign.name.ilike(bindparam("name"), escape="\\"))
    for present, column, name in (
        (shape.channels, Campaign.channel, "channels"),
        (shape.delivery_types, Campaign.delivery_type, "delivery_types"),
        (shape.created_by, Campaign.created_by, "created_by"),
    ):
        if present:
            where.append(column.in_(_listed(name)))
    if shape.tags:
        where.append(
            exists().where(
                and_(
                    CampaignTag.workspace_id == Campaign.workspace_id,
                    CampaignTag.campaign_row_id == Campaign.id,
                    CampaignTag.tag.in_(_listed("tags")),
                )
            )
        )
    if shape.created_from:
        where.append(Campaign.created_at >= bindparam("created_from"))
    if shape.created_before:  # the end of a whole date, exclusive
        where.append(Campaign.created_at < bindparam("created_before"))
    if shape.created_until:  # a date-time, inclusive
        where.append(Campaign.created_at <= bindparam("created_until"))
    if shape.version_number:
        where.append(Campaign.version_number == bindparam("version_number"))
    return where


def parameters(
    workspace_id: str, criteria: Criteria, statuses: list[str], *, merged: int, limit: int, offset: int
) -> dict[str, Any]:
    """The values of the statement `conditions` and `PageQuery` build for these criteria."""
    values: dict[str, Any] = {"workspace_id": workspace_id, "offset": offset}
    if merged:
        values |= {f"status_{index}": status for index, status in enumerate(statuses)}
        values["walk_end"] = offset + limit
    else:
        values["statuses"] = statuses
    if criteria.ids:
        values["ids"] = list(criteria.ids)
    if criteria.name is not None:
        values["name"] = _like_pattern(criteria.name)
    for name, listed in (
        ("channels", criteria.channels),
        ("delivery_types", criteria.delivery_types),
        ("created_by", criteria.created_by),
        ("tags", criteria.tags),
    ):
        if listed is not None:
            values[name] = list(listed)
    created = criteria.created
    for name, bound in (
        ("created_from", created.created_from),
        ("created_before", created.created_before),
        ("created_until", created.created_until),
    ):
        if bound is not None:
            values[name] = bound
    if criteria.version_number is not None:
        values["version_number"] = criteria.version_number
    return values


def _built(rows: Select[T], shape: Shape, size: int) -> Select[T]:
    # The offset and the walks' end reach (page - 1) x limit: past 32 bits for a deep page.
    limit, offset = literal_column(str(int(size)), Integer), bindparam("offset", type_=BigInteger)
    where = conditions(shape)
    if not shape.merged:
        return (
            rows.where(*where, Campaign.status.in_(_listed("statuses")))
            .order_by(Campaign.created_at.desc(), Campaign.id.desc())
            .limit(limit)
            .offset(offset)
        )
    walk_end = bindparam("walk_end", type_=BigInteger)

    def walk(n: int) -> Select[tuple[str, datetime]]:
        one = select(Campaign.id, Campaign.created_at).where(
            *where, Campaign.status == bindparam(f"status_{n}")
        )
        if shape.bounded:
            one = one.order_by(Campaign.created_at.desc(), Campaign.id.desc()).limit(walk_end)
        return one

    walks = union_all(*(walk(n) for n in range(shape.merged))).subquery("walks")
    page = (
        select(walks.c.id, walks.c.created_at)
        .order_by(walks.c.created_at.desc(), walks.c.id.desc())
        .limit(limit)
        .offset(offset)
        .subquery("page")
    )
    return rows.join(
        page, and_(Campaign.workspace_id == bindparam("workspace_id"), Campaign.id == page.c.id)
    ).order_by(page.c.created_at.desc(), page.c.id.desc())


class PageQuery(Generic[T]):
    """Pages of `rows` (a select over campaigns), one statement per shape and page size, built on
    first use and kept (there are at most a few thousand shapes, and a workspace uses a handful)."""

    def __init__(self, rows: Select[T]) -> None:
        self._rows = rows
        self._statements: dict[tuple[Shape, int], Select[T]] = {}

    def page(
        self, workspace_id: str, criteria: Criteria, *, versioning: bool, limit: int, page: int, dialect: str
    ) -> tuple[Select[T], dict[str, Any]]:
        """The statement of one page, newest first, and its parameters (the engine's way, above)."""
        statuses = visible_statuses(criteria)
        bounded = dialect != "sqlite"
        merged = len(statuses) if len(statuses) > (0 if bounded else 1) else 0
        shape = Shape.of(criteria, versioning=versioning, merged=merged, bounded=bounded)
        statement = self._statements.get((shape, limit))
        if statement is None:
            statement = self._statements[shape, limit] = _built(self._rows, shape, limit)
        offset = (page - 1) * limit
        return statement, parameters(
            workspace_id, criteria, statuses, merged=merged, limit=limit, offset=offset
        )
