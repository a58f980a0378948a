"""Workspace feature flags (CLI-managed): their names and defaults, and which are on. Without the
models (and SQLAlchemy): the command line's listings read them too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

FEATURES = ("campaign_audience_limit", "queuing", "portfolio", "versioning", "campaign_meta")
DEFAULT_FEATURES: dict[str, bool] = {
    "campaign_audience_limit": False,
    "queuing": False,
    "portfolio": False,
    "versioning": False,
    "campaign_meta": True,
}


class HasFeatures(Protocol):
    @property
    def features(self) -> Mapping[str, bool] | None: ...


def enabled_features(workspace: HasFeatures) -> frozenset[str]:
    """The flags on: those set on, and those on by default and not set off."""
    flags: dict[str, Any] = {**DEFAULT_FEATURES, **(workspace.features or {})}
    return frozenset(name for name, on in flags.items() if on)
