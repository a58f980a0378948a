"""API key scopes (contract §2). Each campaigns scope implies the ones below it."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Scope(StrEnum):
    OFFERS_READ = "offers:read"
    OFFERS_WRITE = "offers:write"
    CAMPAIGNS_VIEW = "campaigns:view"
    CAMPAIGNS_CREATE_MANAGE = "campaigns:create_manage"
    CAMPAIGNS_CREATE_MANAGE_PUBLISH = "campaigns:create_manage_publish"
    # Herald extension (contract §2 has no ingestion scope): users and events through /v1/*.
    DATA_WRITE = "data:write"


_IMPLIES: dict[Scope, frozenset[Scope]] = {
    Scope.CAMPAIGNS_CREATE_MANAGE_PUBLISH: frozenset({Scope.CAMPAIGNS_CREATE_MANAGE, Scope.CAMPAIGNS_VIEW}),
    Scope.CAMPAIGNS_CREATE_MANAGE: frozenset({Scope.CAMPAIGNS_VIEW}),
}


def expand(granted: Iterable[str]) -> frozenset[Scope]:
    """Every scope a key effectively holds; unknown names are ignored."""
    scopes: set[Scope] = set()
    for name in granted:
        try:
            scope = Scope(name)
        except ValueError:
            continue
        scopes.add(scope)
        scopes |= _IMPLIES.get(scope, frozenset())
    return frozenset(scopes)


def parse_scopes(names: Iterable[str]) -> list[Scope]:
    """Strict parse for the CLI: unknown scope names are an error."""
    return [Scope(name.strip()) for name in names if name.strip()]
