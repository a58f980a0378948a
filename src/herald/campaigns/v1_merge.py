"""The earlier API's update (L1) carries only the fields that change (contract §5 L1).

Each sent component is merged into the stored one before the body is read: objects field by field
(recursively), arrays and other values replace, and a null removes the field (as in a JSON merge
patch). The result is then read and checked exactly like a C3 body that sent the whole components,
so error targets stay dot paths from the body root and editability compares whole components.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herald.campaigns.schemas.campaign import COMPONENT_NAMES

_COMPONENTS = frozenset(COMPONENT_NAMES)


def merge(stored: Any, sent: Any) -> Any:
    """`sent` merged into `stored`: objects field by field, a null removes, anything else replaces."""
    if not isinstance(sent, dict):
        return sent
    merged = dict(stored) if isinstance(stored, dict) else {}
    for key, value in sent.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge(merged.get(key), value)
    return merged


def merged_body(stored_components: Mapping[str, Any], raw: object) -> object:
    """The L1 body with every sent component object merged into the stored component.

    A component sent as null still clears it, and anything that is not an object is left for the
    reader to refuse, so only well-formed partial components are completed.
    """
    if not isinstance(raw, dict):
        return raw
    return {
        key: merge(stored_components.get(key), value)
        if key in _COMPONENTS and isinstance(value, dict)
        else value
        for key, value in raw.items()
    }
