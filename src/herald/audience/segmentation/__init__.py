"""Segmentation: FilterGroups compiled to SQL over the audience tables, and campaign audiences.

- `compile_filter_group(group, ...) -> (Select | None, problems)`: the customer ids a FilterGroup
  matches (compiler.py); value shapes per operator are documented in conditions.py.
- `audience_query` / `count_audience`: included minus excluded, with opt-outs (audience.py).
- `load_segments`: the custom segments a group refers to (catalog.py).
- `event_predicate` / `goal_filter`: a conversion goal's attribute condition over given events.
- `reference`: the same semantics in plain Python, which the tests hold the SQL to.
"""

from herald.audience.segmentation.audience import (
    audience_count_query,
    audience_query,
    count_audience,
    read_segmentation,
)
from herald.audience.segmentation.catalog import SegmentCatalog, SegmentDefinition, load_segments
from herald.audience.segmentation.compiler import compile_filter_group, event_predicate
from herald.audience.segmentation.conditions import check_value, read_criterion
from herald.audience.segmentation.goals import goal_filter

__all__ = [
    "SegmentCatalog",
    "SegmentDefinition",
    "audience_count_query",
    "audience_query",
    "check_value",
    "compile_filter_group",
    "count_audience",
    "event_predicate",
    "goal_filter",
    "load_segments",
    "read_criterion",
    "read_segmentation",
]
