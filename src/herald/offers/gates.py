"""What O3 may change in each effective status (contract §4), and what changed at all.

- `draft`, `scheduled`: everything but `created_by`.
- `active`: not `scheduling.start_datetime`, not `conversion`; in `variation_meta` only the split
  percentages and the control-group percentage.
- `expired`, `archived`: nothing (403 for the whole request).

Sending a field with the value it already has is not a change, so clients may send whole documents.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from herald.errors import ArchivedOffering, ExpiredOffering, HeraldError
from herald.offers.rules.scheduling import EXPIRY, START, parse_zulu
from herald.offers.status import OfferStatus
from herald.problems import Problem, join_path

_FIXED_WHEN_ACTIVE = (START, "conversion")


def refusal(status: OfferStatus) -> HeraldError | None:
    """The 403 for statuses that allow no change at all."""
    if status is OfferStatus.EXPIRED:
        return ExpiredOffering()
    if status is OfferStatus.ARCHIVED:
        return ArchivedOffering()
    return None


def changed_fields(current: Mapping[str, Any], merged: Mapping[str, Any]) -> frozenset[str]:
    """Top-level names whose value differs, plus `scheduling.<end>` for each end that moved."""
    changed = {name for name in current.keys() | merged.keys() if current.get(name) != merged.get(name)}
    before, after = current.get("scheduling") or {}, merged.get("scheduling") or {}
    for target in (START, EXPIRY):
        key = target.split(".")[1]
        if _instant(before.get(key)) != _instant(after.get(key)):
            changed.add(target)
    if before.get("timezone") == after.get("timezone") and not changed & {START, EXPIRY}:
        changed.discard("scheduling")  # the same instants, only written differently
    return frozenset(changed)


def _instant(value: Any) -> Any:
    return (parse_zulu(value) or value) if isinstance(value, str) else value


def gate_problems(
    status: OfferStatus, current: Mapping[str, Any], merged: Mapping[str, Any], changed: frozenset[str]
) -> list[Problem]:
    """IMMUTABLE_FIELD for every change the status does not allow."""
    # Contract §4: O3 changes any O2 field (`created_by` too) but for these gates.
    fixed = [name for name in _FIXED_WHEN_ACTIVE if name in changed] if status is OfferStatus.ACTIVE else []
    problems = [
        Problem("IMMUTABLE_FIELD", name, f"'{name}' cannot change while the offering is {status.value}.")
        for name in fixed
    ]
    if status is OfferStatus.ACTIVE and "variation_meta" in changed:
        before = _fixed_part(current.get("variation_meta"))
        after = _fixed_part(merged.get("variation_meta"))
        problems += [
            Problem(
                "IMMUTABLE_FIELD",
                path,
                "While the offering is active only the split and control-group percentages of "
                "variation_meta can change.",
            )
            for path in _differences(before, after, "variation_meta")
        ]
    return problems


def _fixed_part(meta: Any) -> Any:
    """`variation_meta` with the percentages that may change on an active offering masked out."""
    if not isinstance(meta, dict):
        return meta
    masked = dict(meta)
    distribution = masked.get("smv_distribution")
    if isinstance(distribution, dict) and isinstance(distribution.get("split"), dict):
        masked["smv_distribution"] = {**distribution, "split": dict.fromkeys(distribution["split"])}
    group = masked.get("control_group")
    if isinstance(group, dict):
        masked["control_group"] = {k: v for k, v in group.items() if k != "percentage"}
    return masked


def _differences(before: Any, after: Any, path: str) -> Iterator[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(before.keys() | after.keys()):
            yield from _differences(before.get(key), after.get(key), join_path(path, key))
    elif before != after:
        yield path
