"""Which routes a path belongs to, decided once per request before any other work.

The request middleware answers an unknown path (404) and a known path with a method it does not
take (405) from this table without entering the framework's router: both answers need nothing but
the path. The table is built once per app from its routes; a lookup tries the literal paths first
(a dict) and then only the templates whose literal prefix the path starts with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp


@dataclass(frozen=True)
class _Template:
    prefix: str  # the path up to its first parameter
    pattern: re.Pattern[str]
    parameters: int
    methods: frozenset[str]


@dataclass(frozen=True)
class Lookup:
    """`served`: the methods the path's most specific routes take (empty: no route has the path),
    also a 405's Allow header. A literal route beats a template: `/v5/campaigns/meta` is not
    `/v5/campaigns/{campaign_id}`, so a GET of it is 405 (POST only), as its OPTIONS says, not
    C2's 404 for a campaign named "meta" (no campaign id is a word)."""

    served: frozenset[str]


class RouteTable:
    def __init__(self, app: ASGIApp) -> None:
        templates: list[_Template] = []
        literal: dict[str, set[str]] = {}
        self.literal_routes: dict[str, object] = {}
        router = getattr(app, "router", None)
        for route in iter_route_contexts(router.routes if router is not None else []):
            methods = getattr(route, "methods", None)
            pattern = getattr(route, "path_regex", None)
            path = getattr(route, "path", None)
            if not methods or pattern is None or path is None:
                continue
            if route.param_convertors:
                prefix = path.split("{", 1)[0]
                templates.append(_Template(prefix, pattern, len(route.param_convertors), frozenset(methods)))
            else:
                literal.setdefault(path, set()).update(methods)
                self.literal_routes.setdefault(path, route)
        # Templates by the first segment of their prefix: a path is tried against those of its own
        # first segment only (a 404's lookup no longer walks every template), and against those
        # whose first segment is itself a parameter (None: tried for every path).
        self._templates: dict[str | None, list[_Template]] = {}
        for template in templates:
            literal_first = "/" in template.prefix[1:]
            key = _first_segment(template.prefix) if literal_first else None
            self._templates.setdefault(key, []).append(template)
        self._literal = {path: frozenset(methods) for path, methods in literal.items()}
        # The literal paths' answers, worked out once (templated paths are unbounded: never kept).
        self._known = {path: self._find(path) for path in self._literal}

    def lookup(self, path: str) -> Lookup:
        known = self._known.get(path)
        return known if known is not None else self._find(path)

    def _find(self, path: str) -> Lookup:
        matches = [
            (t.parameters, t.methods)
            for t in (*self._templates.get(_first_segment(path), ()), *self._templates.get(None, ()))
            if path.startswith(t.prefix) and t.pattern.match(path)
        ]
        if path in self._literal:
            matches.append((0, self._literal[path]))
        if not matches:
            return Lookup(frozenset())
        fewest = min(parameters for parameters, _ in matches)
        served = frozenset(
            method for parameters, methods in matches if parameters == fewest for method in methods
        )
        return Lookup(served)


def _first_segment(path: str) -> str:
    """`/v5/campaigns/x` → `v5`."""
    return path[1:].split("/", 1)[0]
