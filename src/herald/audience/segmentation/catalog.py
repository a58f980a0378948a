"""The custom segments a FilterGroup refers to, loaded from the workspace before compiling.

Compiling is pure; it reads segments from a catalog (id -> definition). `load_segments` fills the
catalog with every segment reachable through `custom_segments` filters, following filter segments
that refer to further segments, in one query per level of reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import Segment
from herald.campaigns.schemas.filters import ActionFilter, CustomSegmentFilter, FilterGroup
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error

# Deepest chain of segments referring to segments that is followed (deeper chains are a problem).
MAX_SEGMENT_DEPTH = 16
STATIC = "static"
FILTER = "filter"


@dataclass(frozen=True)
class SegmentDefinition:
    id: str
    name: str
    kind: str  # "filter" (its `filters` decide) or "static" (its member list decides)
    filters: FilterGroup | None = None
    # What is wrong with the stored filters (targets relative to the segment's FilterGroup).
    problems: tuple[Problem, ...] = field(default=())


SegmentCatalog = dict[str, SegmentDefinition]


def read_segment(segment_id: str, name: str, kind: str, filters: object) -> SegmentDefinition:
    """A stored segment as a definition; stored filters that no longer parse become its problems."""
    if kind == STATIC:
        return SegmentDefinition(segment_id, name, kind)
    if kind != FILTER:
        problem = Problem("INVALID_ENUM_VALUE", "kind", f"Unknown segment kind '{kind}'.")
        return SegmentDefinition(segment_id, name, kind, problems=(problem,))
    try:
        group = FilterGroup.model_validate(filters)
    except ValidationError as exc:
        return SegmentDefinition(
            segment_id, name, kind, problems=tuple(problems_from_validation_error(exc, filters))
        )
    return SegmentDefinition(segment_id, name, kind, group)


def _segment_filters(group: FilterGroup | None) -> Iterator[CustomSegmentFilter]:
    if group is None:
        return
    for item in group.filters:
        if isinstance(item, CustomSegmentFilter):
            yield item
        elif isinstance(item, ActionFilter):
            yield from _segment_filters(item.attributes)


def referenced_segment_ids(groups: Iterable[FilterGroup | None]) -> set[str]:
    return {item.id for group in groups for item in _segment_filters(group)}


async def load_segments(
    session: AsyncSession, workspace_id: str, groups: Iterable[FilterGroup | None]
) -> SegmentCatalog:
    """Every segment of the workspace reachable from `groups` (unknown ids are simply absent)."""
    catalog: SegmentCatalog = {}
    wanted = referenced_segment_ids(groups)
    for _ in range(MAX_SEGMENT_DEPTH + 1):
        wanted -= catalog.keys()
        if not wanted:
            break
        rows = await session.execute(
            select(Segment.id, Segment.name, Segment.kind, Segment.filters).where(
                Segment.workspace_id == workspace_id, Segment.id.in_(sorted(wanted))
            )
        )
        found = [read_segment(*row) for row in rows]
        catalog.update((definition.id, definition) for definition in found)
        wanted = referenced_segment_ids(definition.filters for definition in found)
    return catalog
