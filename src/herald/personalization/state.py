"""The state of the render in progress, reachable from the sandbox's hooks.

Jinja calls the environment's hooks (`call`, `getattr`, ...) without the render's context, so the
state of one personalization travels in a context variable, set by `render.Renderer` around each
render (and per thread: renders run in worker threads).
"""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar, Token
from dataclasses import dataclass

from herald.personalization.limits import Budget


@dataclass(frozen=True, slots=True)
class Missing:
    """An expression that rendered empty because the value it names does not exist."""

    field: str
    expression: str

    def as_json(self) -> dict[str, str]:
        return {"field": self.field, "expression": self.expression}


@dataclass(eq=False, slots=True)
class RenderState:
    budget: Budget
    field: str = ""
    html: bool = False  # autoescaping text (e-mail HTML bodies)
    quote_outputs: bool = False  # URL templates: each expression's output is percent-encoded
    block_depth: int = 0
    missing: list[Missing] = dataclasses.field(default_factory=list)
    _seen: set[Missing] = dataclasses.field(default_factory=set)

    def record(self, expression: str) -> None:
        item = Missing(self.field, expression)
        if item not in self._seen:
            self._seen.add(item)
            self.missing.append(item)


_current: ContextVar[RenderState | None] = ContextVar("herald_render_state", default=None)


class NoRenderInProgress(RuntimeError):
    """A sandbox hook ran outside a render (e.g. Jinja folding constants while compiling)."""


def current() -> RenderState:
    state = _current.get()
    if state is None:
        raise NoRenderInProgress("no render in progress")
    return state


def activate(state: RenderState | None) -> Token[RenderState | None]:
    return _current.set(state)


def restore(token: Token[RenderState | None]) -> None:
    _current.reset(token)
