"""Custom segments: a stored FilterGroup ("filter") or a static list of customer ids ("static").

Campaign filters of type `custom_segments` name them by `id`. Segments are made by the CLI (and the
demo); these functions are what both call. Services never commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Table, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import store
from herald.audience.models import Segment, SegmentMember
from herald.campaigns.schemas.filters import CustomSegmentFilter, FilterGroup
from herald.campaigns.validation.filters import check_filter_group, walk_filters
from herald.ids import object_id
from herald.problems import Problem, join_path
from herald.pydantic_errors import problems_from_validation_error
from herald.workspaces.service import AdminError, get_workspace

FILTER, STATIC = "filter", "static"
MAX_NAME_LENGTH = 200
MAX_ID_LENGTH = 200
MEMBER_BATCH = 10_000


class SegmentProblems(AdminError):
    """A segment definition with problems; the message lists each one with its path."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        lines = [f"{p.target or '(root)'}: {p.message} ({p.code})" for p in self.problems]
        super().__init__("the segment is not valid:\n  " + "\n  ".join(lines))


@dataclass(frozen=True)
class SegmentSummary:
    id: str
    name: str
    kind: str
    members: int | None  # static segments only
    created_at: datetime


def parse_filter_group(raw: Any) -> tuple[FilterGroup | None, list[Problem]]:
    """A FilterGroup read with the campaign grammar and rules; paths start at the group's root."""
    if not isinstance(raw, dict):
        return None, [Problem("INVALID_TYPE", "", "A segment's filters are one FilterGroup (a JSON object).")]
    try:
        group = FilterGroup.model_validate(raw)
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, raw)
    problems = check_filter_group(group, ())
    if not group.filters:
        problems.append(
            Problem("REQUIRED_FIELD_MISSING", "filters", "A filter segment needs at least one filter.")
        )
    return group, problems


async def _check_name(session: AsyncSession, workspace_id: str, name: str) -> None:
    await get_workspace(session, workspace_id)
    if not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise AdminError(f"a segment name is 1-{MAX_NAME_LENGTH} characters")
    taken = await session.scalar(
        select(Segment.id).where(Segment.workspace_id == workspace_id, Segment.name == name)
    )
    if taken is not None:
        raise AdminError(f"a segment named {name!r} already exists ({taken})")


async def _unknown_segments(session: AsyncSession, workspace_id: str, group: FilterGroup) -> list[Problem]:
    references = [
        (item, path) for item, path in walk_filters(group, ()) if isinstance(item, CustomSegmentFilter)
    ]
    if not references:
        return []
    ids = {item.id for item, _ in references}
    query = select(Segment.id).where(Segment.workspace_id == workspace_id, Segment.id.in_(ids))
    known = set((await session.scalars(query)).all())
    return [
        Problem("NOT_FOUND", join_path(*path, "id"), f"No segment with id '{item.id}' in this workspace.")
        for item, path in references
        if item.id not in known
    ]


async def create_filter_segment(
    session: AsyncSession, now: datetime, workspace_id: str, name: str, raw_filters: Any
) -> Segment:
    await _check_name(session, workspace_id, name)
    group, problems = parse_filter_group(raw_filters)
    if group is not None:
        problems += await _unknown_segments(session, workspace_id, group)
    if group is None or problems:
        raise SegmentProblems(problems)
    segment = Segment(
        workspace_id=workspace_id,
        id=object_id(now),
        name=name,
        kind=FILTER,
        filters=group.model_dump(mode="json", exclude_unset=True),
        created_at=now,
    )
    session.add(segment)
    await session.flush()
    return segment


def read_customer_ids(lines: Iterable[str]) -> tuple[list[str], list[Problem]]:
    """Customer ids, one a line (blank lines skipped, duplicates dropped); problems name the line."""
    ids: dict[str, None] = {}
    problems: list[Problem] = []
    for number, line in enumerate(lines, start=1):
        customer_id = line.strip()
        if not customer_id:
            continue
        if len(customer_id) > MAX_ID_LENGTH or any(ord(char) < 0x20 for char in customer_id):
            problems.append(
                Problem(
                    "INVALID_TYPE",
                    f"line {number}",
                    f"Not a customer id (1-{MAX_ID_LENGTH} printable characters).",
                )
            )
            continue
        ids[customer_id] = None
    if not ids and not problems:
        problems.append(Problem("REQUIRED_FIELD_MISSING", "", "The list holds no customer ids."))
    return list(ids), problems


async def create_static_segment(
    session: AsyncSession, now: datetime, workspace_id: str, name: str, customer_ids: Sequence[str]
) -> tuple[Segment, int]:
    """The segment and how many of its members are not (yet) known users — members may come first."""
    await _check_name(session, workspace_id, name)
    segment = Segment(
        workspace_id=workspace_id, id=object_id(now), name=name, kind=STATIC, filters=None, created_at=now
    )
    session.add(segment)
    await session.flush()
    members = cast(Table, SegmentMember.__table__)
    unique = list(dict.fromkeys(customer_ids))
    for chunk in store.chunks(unique, MEMBER_BATCH):
        rows = [{"workspace_id": workspace_id, "segment_id": segment.id, "customer_id": c} for c in chunk]
        await session.execute(insert(members), rows)
    known = await store.existing_ids(session, workspace_id, unique)
    return segment, len(unique) - len(known)


async def list_segments(session: AsyncSession, workspace_id: str) -> list[SegmentSummary]:
    counted = await session.execute(
        select(SegmentMember.segment_id, func.count())
        .where(SegmentMember.workspace_id == workspace_id)
        .group_by(SegmentMember.segment_id)
    )
    counts: dict[str, int] = dict(counted.tuples().all())
    segments = await session.scalars(
        select(Segment).where(Segment.workspace_id == workspace_id).order_by(Segment.name)
    )
    return [
        SegmentSummary(
            id=segment.id,
            name=segment.name,
            kind=segment.kind,
            members=counts.get(segment.id, 0) if segment.kind == STATIC else None,
            created_at=segment.created_at,
        )
        for segment in segments
    ]


async def get_segment(session: AsyncSession, workspace_id: str, segment_id: str) -> Segment | None:
    return await session.get(Segment, (workspace_id, segment_id))
