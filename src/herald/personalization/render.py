"""Rendering the texts of one personalization: one context, one budget, one record of missing values.

The context (contract §6):
- `UserAttribute['x']` and `user.x`: the user's standard and custom attributes;
- `event.x`: the triggering event's attributes;
- `ContentBlock['name']`: a workspace content block, itself rendered with this context;
- `ProductSet['name']`: a workspace product set (a list of objects);
- `ContentApi['name']`: the JSON a workspace content API answered (fetched beforehand).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from herald.personalization import state
from herald.personalization.compiling import TemplateInvalid, compile_template
from herald.personalization.limits import DEFAULT_LIMITS, Budget, Limits, RenderFailed, RenderLimitExceeded
from herald.personalization.state import Missing, RenderState
from herald.personalization.values import BlockView, View


@dataclass(frozen=True, slots=True)
class Block:
    """A content block: `html` blocks are inserted as markup in HTML, `text` blocks are escaped."""

    kind: str
    body: str


@dataclass(frozen=True, slots=True)
class RenderData:
    user: Mapping[str, Any]
    event: Mapping[str, Any]
    blocks: Mapping[str, Block]
    product_sets: Mapping[str, Any]
    content_apis: Mapping[str, Any]


class Renderer:
    """Renders texts for one user and event at a time (`start` moves it to the next); not shared
    between threads."""

    def __init__(
        self,
        data: RenderData,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._limits = limits
        self._clock = clock
        self._blocks = data.blocks
        self._block_view = BlockView(data.blocks, self._render_block)
        self.start(data)

    def start(self, data: RenderData) -> None:
        """Render for `data` from now on, with a budget and a record of missing values of its own.
        Its blocks must be this renderer's: a delivery batch renders every user with one renderer,
        and building one per user (its views, its block renderer) cost more than rendering a short
        title."""
        assert data.blocks is self._blocks, "a renderer's content blocks are fixed"
        self.state = RenderState(budget=Budget(self._limits, self._clock))
        user = data.user
        self._variables: dict[str, Any] = {
            "UserAttribute": View("UserAttribute", "item", user),
            "user": View("user", "attribute", user),
            "event": View("event", "attribute", data.event),
            "ContentBlock": self._block_view,
            "ProductSet": View("ProductSet", "item", data.product_sets),
            "ContentApi": View("ContentApi", "item", data.content_apis),
        }

    @property
    def missing(self) -> list[Missing]:
        return self.state.missing

    def render(self, source: str, field: str, *, html: bool = False, quote_outputs: bool = False) -> str:
        """`source` rendered; raises TemplateInvalid, RenderLimitExceeded or RenderFailed."""
        token = state.activate(self.state)
        self.state.field, self.state.html, self.state.quote_outputs = field, html, quote_outputs
        try:
            return self._render(source, html)
        except (TemplateInvalid, RenderLimitExceeded, RenderFailed):
            raise
        except (RecursionError, MemoryError):
            raise RenderLimitExceeded("The template nests or grows too much.") from None
        except Exception as exc:  # any failure of client code is the client's: a 4xx, not a 500
            raise RenderFailed(_describe(exc)) from None
        finally:
            state.restore(token)

    def _render(self, source: str, html: bool) -> str:
        compiled = compile_template(source, html=html)
        template = compiled.template
        context = compiled.context(self._variables)
        parts: list[str] = []
        size = 0
        for piece in template.root_render_func(context):
            size += len(piece)
            if size > self._limits.field_chars:
                raise RenderLimitExceeded(
                    f"A field renders to more than {self._limits.field_chars} characters."
                )
            parts.append(piece)
        return "".join(parts)

    def _render_block(self, name: str) -> str:
        current = self.state
        if current.block_depth >= self._limits.block_depth:
            raise RenderLimitExceeded(
                f"Content blocks use content blocks more than {self._limits.block_depth} deep."
            )
        block = self._blocks[name]
        # An HTML block in an HTML body escapes the values inside it and goes in as markup; anywhere
        # else a block is text, escaped (once) where it is inserted.
        as_html = current.html and block.kind == "html"
        saved = current.html
        current.block_depth += 1
        current.html = as_html
        try:
            text = self._render(block.body, as_html)
        except TemplateInvalid as exc:
            raise RenderFailed(f"Content block '{name}': {exc}") from None
        finally:
            current.block_depth -= 1
            current.html = saved
        return Markup(text) if as_html else text


def _describe(exc: Exception) -> str:
    message = str(exc).strip() or type(exc).__name__
    return message if message.endswith(".") else f"{message}."
