"""Jinja's built-in filters, each taking a budget step and refusing arguments that would blow up.

The filters behave as documented by Jinja; only sizes are checked. `urlize` is left out: its output
grows with attributes repeated per link, and personalization has no use for it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from jinja2.filters import FILTERS, do_join
from jinja2.nodes import EvalContext
from jinja2.utils import pass_eval_context

from herald.personalization import guards, state
from herald.personalization.limits import Limits, RenderFailed, RenderLimitExceeded

Guard = Callable[[Limits, Mapping[str, Any]], None]

# Filters that turn their input into text: its size is checked first (printing a container that
# holds one big string many times is the way to make a huge text in one call).
_STRINGIFYING = frozenset(
    {
        "capitalize",
        "center",
        "e",
        "escape",
        "forceescape",
        "format",
        "indent",
        "lower",
        "pprint",
        "replace",
        "safe",
        "string",
        "striptags",
        "title",
        "tojson",
        "trim",
        "truncate",
        "upper",
        "urlencode",
        "wordcount",
        "wordwrap",
        "xmlattr",
    }
)
_LEFT_OUT = frozenset({"urlize"})
MAX_JSON_INDENT = 16


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    return value if isinstance(value, str) else str(value)


def _center(limits: Limits, arguments: Mapping[str, Any]) -> None:
    guards.check_width(arguments.get("width"), limits)


def _indent(limits: Limits, arguments: Mapping[str, Any]) -> None:
    width = arguments.get("width")
    pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    text = _text(arguments, "s")
    if len(text) + (text.count("\n") + 1) * pad > limits.value_size:
        raise guards.too_big("an indented string", limits.value_size)


def _wordwrap(limits: Limits, arguments: Mapping[str, Any]) -> None:
    text = _text(arguments, "s")
    wrapstring = arguments.get("wrapstring") or "\n"
    width = arguments.get("width")
    lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
    if len(text) + lines * len(str(wrapstring)) > limits.value_size:
        raise guards.too_big("a wrapped string", limits.value_size)


def _replace(limits: Limits, arguments: Mapping[str, Any]) -> None:
    count = arguments.get("count")
    guards.check_replace(_text(arguments, "s"), arguments.get("old"), arguments.get("new"), count, limits)


def _format(limits: Limits, arguments: Mapping[str, Any]) -> None:
    guards.check_printf(_text(arguments, "value"), arguments.get("kwargs") or arguments.get("args"), limits)


def _count(parameter: str) -> Guard:
    def check(limits: Limits, arguments: Mapping[str, Any]) -> None:
        value = arguments.get(parameter)
        if isinstance(value, int) and value > limits.items:
            raise RenderLimitExceeded(f"'{parameter}' may be at most {limits.items}.")

    return check


def _sum(_limits: Limits, arguments: Mapping[str, Any]) -> None:
    # Summing lists (start=[]) copies them over and over: only numbers are summed.
    if not isinstance(arguments.get("start", 0), int | float):
        raise RenderFailed("The sum filter adds numbers only.")


def _tojson(_limits: Limits, arguments: Mapping[str, Any]) -> None:
    indent = arguments.get("indent")
    if isinstance(indent, int) and indent > MAX_JSON_INDENT:
        raise RenderFailed(f"tojson indent may be at most {MAX_JSON_INDENT}.")


_GUARDS: dict[str, Guard] = {
    "center": _center,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "replace": _replace,
    "format": _format,
    "batch": _count("linecount"),
    "slice": _count("slices"),
    "sum": _sum,
    "tojson": _tojson,
}


@pass_eval_context
def _join(eval_ctx: EvalContext, value: Any, d: str = "", attribute: str | int | None = None) -> str:
    """`join` that refuses before the joined text would be too big."""
    if attribute is not None:
        environment = eval_ctx.environment
        value = (environment.getitem(item, attribute) for item in value)
    parts = guards.bounded_join(str(d), value, state.current().budget.limits)
    return str(do_join(eval_ctx, parts, d))


def _wrap(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    guard = _GUARDS.get(name)
    signature = inspect.signature(func) if guard else None
    stringifies = name in _STRINGIFYING
    # Filters that receive the context, eval context or environment get it as first argument.
    offset = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        budget = state.current().budget
        budget.step()
        limits = budget.limits
        if stringifies and len(args) > offset and not isinstance(args[offset], str):
            guards.deep_size(args[offset], limits.value_size, for_output=True)
        if guard is not None and signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise RenderFailed(f"Filter '{name}': {exc}.") from None
            bound.apply_defaults()
            guard(limits, bound.arguments)
        return guards.check_result(func(*args, **kwargs), limits)

    return wrapper


def bounded_filters() -> dict[str, Callable[..., Any]]:
    table = {name: func for name, func in FILTERS.items() if name not in _LEFT_OUT}
    table["join"] = _join
    return {name: _wrap(name, func) for name, func in table.items()}
