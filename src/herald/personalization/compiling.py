"""Compiling template text (cached) and checking it: what C4 and the preview call "INVALID_TEMPLATE".

A text is refused before it runs when it does not parse, names a filter or test that does not exist,
uses `include`/`extends`/`import` (there is no loader: content blocks are the way to reuse content),
or names an attribute starting with `_`. Compiling also lists the workspace resources the text names
with constants (`ProductSet['bestsellers']`), so they can be loaded before rendering.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.environment import Template
from jinja2.exceptions import TemplateError, TemplateSyntaxError
from jinja2.runtime import Context

from herald.personalization import state
from herald.personalization.environment import HTML, PLAIN, HeraldSandbox

# The names under which templates reach workspace resources (`Reference.kind`).
RESOURCE_NAMES = ("ContentBlock", "ProductSet", "ContentApi")
_NOT_SUPPORTED = {
    nodes.Extends: "extends",
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "import",
}


@dataclass(frozen=True, slots=True)
class Reference:
    """A workspace resource a template names with a constant: `ProductSet['bestsellers']`."""

    kind: str  # one of RESOURCE_NAMES
    name: str


@dataclass(frozen=True, slots=True)
class Compiled:
    template: Template
    references: frozenset[Reference]
    # The template's globals as one plain dict: Jinja's own `new_context` reads them through a
    # ChainMap (the environment's and the template's) twice per render, which cost more than
    # rendering a short template for one user.
    scope: dict[str, Any]

    def context(self, variables: dict[str, Any]) -> Context:
        """A render context for `variables` (what `Template.new_context(variables)` builds)."""
        template = self.template
        return template.environment.context_class(
            template.environment, {**self.scope, **variables}, template.name, template.blocks, self.scope
        )


class TemplateInvalid(Exception):
    """Template text that does not parse, or uses what the sandbox does not offer."""


def _location(lineno: int | None, source: str) -> str:
    return f" (line {lineno})" if lineno and "\n" in source else ""


def _static_problem(tree: nodes.Template) -> str | None:
    for node in tree.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
        return f"'{_NOT_SUPPORTED[type(node)]}' is not supported; use ContentBlock['name'] to reuse content."
    for getattr_node in tree.find_all(nodes.Getattr):
        if getattr_node.attr.startswith("_"):
            return f"The attribute '{getattr_node.attr}' is not allowed."
    for getitem in tree.find_all(nodes.Getitem):
        if isinstance(getitem.arg, nodes.Const) and str(getitem.arg.value).startswith("__"):
            return f"The key '{getitem.arg.value}' is not allowed."
    return None


def _references(tree: nodes.Template) -> frozenset[Reference]:
    found: set[Reference] = set()
    for node in tree.find_all((nodes.Getitem, nodes.Getattr)):
        assert isinstance(node, nodes.Getitem | nodes.Getattr)
        base = node.node
        if not isinstance(base, nodes.Name) or base.name not in RESOURCE_NAMES:
            continue
        if isinstance(node, nodes.Getattr):
            found.add(Reference(base.name, node.attr))
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            found.add(Reference(base.name, node.arg.value))
    return frozenset(found)


@functools.lru_cache(maxsize=4096)
def _compile(source: str, html: bool) -> Compiled | str:
    environment = HTML if html else PLAIN
    # Jinja folds constant expressions while compiling by calling filters. With no render in
    # progress every hook refuses, so nothing is evaluated (or charged) at compile time; this
    # matters when a content block is compiled in the middle of a render.
    token = state.activate(None)
    try:
        return _compile_now(environment, source)
    finally:
        state.restore(token)


def _compile_now(environment: HeraldSandbox, source: str) -> Compiled | str:
    try:
        tree = environment.parse(source)
        problem = _static_problem(tree)
        if problem is not None:
            return problem
        references = _references(tree)
        template = environment.from_string(tree)
    except TemplateSyntaxError as exc:
        return f"Invalid personalization syntax{_location(exc.lineno, source)}: {exc.message}"
    except TemplateError as exc:
        return f"Invalid personalization: {exc.message or exc}"
    except RecursionError:
        return "The template nests too deeply."
    return Compiled(template, references, dict(template.globals))


def compile_template(source: str, *, html: bool = False) -> Compiled:
    """The compiled template for `source` (cached); raises TemplateInvalid with the reason."""
    result = _compile(source, html)
    if isinstance(result, str):
        raise TemplateInvalid(result)
    return result


def check_template(text: str) -> str | None:
    """None when `text` is a valid personalization template; else what is wrong with it."""
    result = _compile(text, False)
    return result if isinstance(result, str) else None
