"""The sandbox templates run in (compiling and checking text is `compiling`).

`HeraldSandbox` is Jinja's `ImmutableSandboxedEnvironment` (no Python internals, no mutation of
lists or dicts) plus:
- every template is instrumented when compiled: each `for` loop's iterable, each output and each
  `~` concatenation goes through a hook of the environment, so the budget sees every step and
  every character (see `limits`);
- every call, attribute and item lookup and intercepted operator takes a step and is size-checked;
- methods of built-in types are allowed from a short list (`str.upper`, `dict.get`, ...); anything
  else of theirs is refused (`int.to_bytes(10**9)` would allocate a gigabyte);
- no loader: `include`, `extends` and `import` are refused when a template is checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import BuiltinMethodType, MethodType
from typing import Any, cast
from urllib.parse import quote

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, Undefined, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import pass_eval_context
from jinja2.visitor import NodeTransformer

from herald.personalization import guards, state
from herald.personalization.filters import bounded_filters
from herald.personalization.limits import RenderLimitExceeded
from herald.personalization.values import RecordingUndefined, View, is_none, json_default, printed

_STR_METHODS = frozenset(
    [
        "capitalize",
        "casefold",
        "center",
        "count",
        "endswith",
        "escape",
        "find",
        "format",
        "format_map",
        "index",
        "isalnum",
        "isalpha",
        "isascii",
        "isdecimal",
        "isdigit",
        "isidentifier",
        "islower",
        "isnumeric",
        "isprintable",
        "isspace",
        "istitle",
        "isupper",
        "join",
        "ljust",
        "lower",
        "lstrip",
        "partition",
        "removeprefix",
        "removesuffix",
        "replace",
        "rfind",
        "rindex",
        "rjust",
        "rpartition",
        "rsplit",
        "rstrip",
        "split",
        "splitlines",
        "startswith",
        "strip",
        "striptags",
        "swapcase",
        "title",
        "unescape",
        "upper",
        "zfill",
    ]
)
_METHODS: tuple[tuple[type | tuple[type, ...], frozenset[str]], ...] = (
    (str, _STR_METHODS),
    (dict, frozenset({"get", "items", "keys", "values"})),
    ((list, tuple, range), frozenset({"count", "index"})),
    ((int, float, complex, bytes, bytearray, set, frozenset), frozenset()),
)
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})


def _hook(name: str, value: nodes.Expr, *args: nodes.Expr) -> nodes.Filter:
    # Hooks are filters: the compiled code calls them directly, and their names (with ':') cannot
    # be written in a template.
    return nodes.Filter(value, f"herald:{name}", list(args), [], None, None)


class _Instrument(NodeTransformer):
    """Routes loops, output and concatenation through the environment's accounting hooks."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _hook("iter", cast(nodes.Expr, node.iter))
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        children: list[nodes.Expr] = []
        literal = 0
        for child in node.nodes:
            if isinstance(child, nodes.TemplateData):
                literal += len(child.data)  # literal text stays constant (and unescaped)
                children.append(child)
            else:
                children.append(_hook("out", child))
        if literal:
            children.append(_hook("charge", nodes.Const(""), nodes.Const(literal)))
        node.nodes = children
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _hook("concat", *node.nodes)


class _InstrumentedCodeGenerator(CodeGenerator):
    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        _Instrument().visit(node)
        super().visit_Template(node, frame)


class HeraldSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _InstrumentedCodeGenerator

    def __init__(self, *, html: bool) -> None:
        super().__init__(
            autoescape=html,
            undefined=RecordingUndefined,
            # No constant folding: it would evaluate expressions at compile time, outside the budget.
            optimized=False,
            keep_trailing_newline=True,
            cache_size=0,
        )
        self.globals.pop("lipsum", None)  # builds paragraphs in a Python loop the budget cannot see
        self.globals["range"] = _bounded_range
        self.filters = {**bounded_filters(), **_HOOKS}
        self.tests = {**self.tests, "none": is_none}
        self.policies["json.dumps_kwargs"] = {"sort_keys": True, "default": json_default}

    # -- the sandbox's hooks ----------------------------------------------------------------

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        if callable(value):
            for kinds, allowed in _METHODS:
                if isinstance(obj, kinds):
                    return attr in allowed
        return True

    def getattr(self, obj: Any, attribute: str) -> Any:
        state.current().budget.step()
        if type(obj) is View and not attribute.startswith("_"):
            # `user.x`, `event.x`: what the sandbox's own path answers, without its detour (an
            # attribute lookup, then an item lookup, each failing with an exception for a missing
            # value, then the safety check): nearly half of a trigger worker's rendering samples
            # at 1,000 events/s were in that path.
            try:
                value = obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
            if not callable(value) or isinstance(value, Undefined):  # a null is "callable"
                return value
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        state.current().budget.step()
        return super().getitem(obj, argument)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = state.current().budget
        budget.step()
        limits = budget.limits
        if operator == "*":
            guards.check_multiply(left, right, limits)
        elif operator == "**":
            guards.check_power(left, right, limits)
        elif operator == "+":
            guards.check_add(left, right, limits)
        elif operator == "%" and isinstance(left, str):
            guards.check_printf(left, right, limits)
        return guards.check_result(self.binop_table[operator](left, right), limits)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = state.current().budget
        budget.step()
        limits = budget.limits
        owner = getattr(__obj, "__self__", None)
        if isinstance(__obj, BuiltinMethodType | MethodType) and isinstance(owner, str):
            name = __obj.__name__
            if name in _WIDTH_METHODS and args:
                guards.check_width(args[0], limits)
            elif name == "replace" and len(args) >= 2:
                count = args[2] if len(args) > 2 else kwargs.get("count", -1)
                guards.check_replace(owner, args[0], args[1], count, limits)
            elif name == "join" and len(args) == 1:
                args = (guards.bounded_join(owner, args[0], limits),)
        wrapped = getattr(__obj, "__wrapped__", None)  # the sandbox's wrapper of str.format
        if isinstance(wrapped, BuiltinMethodType | MethodType) and isinstance(wrapped.__self__, str):
            if wrapped.__name__ == "format_map" and args and isinstance(args[0], dict):
                guards.check_str_format(wrapped.__self__, (), args[0], limits)
            else:
                guards.check_str_format(wrapped.__self__, args, kwargs, limits)
        return guards.check_result(super().call(__context, __obj, *args, **kwargs), limits)


# -- accounting hooks the instrumented templates call -------------------------------------------


def _count_iterations(iterable: Iterable[Any]) -> Iterator[Any]:
    budget = state.current().budget
    for item in iterable:
        budget.step()
        yield item


def _output(value: Any) -> Any:
    current = state.current()
    if isinstance(value, str):
        size = len(value)
    elif isinstance(value, Undefined):
        size = 0
    else:
        # Bounded before it is spelled: a list may hold one big string a million times.
        size = guards.deep_size(value, current.budget.limits.value_size, for_output=True)
        value = printed(value)
        if isinstance(value, str):
            size = len(value)
    current.budget.charge(size)
    if current.quote_outputs:
        return quote(str(value), safe="")
    return value


def _charge(_value: Any, size: int) -> str:
    state.current().budget.charge(size)
    return ""


@pass_eval_context
def _concat(eval_ctx: EvalContext, *items: Any) -> str:
    limits = state.current().budget.limits
    total = 0
    texts: list[Any] = []
    for item in items:
        if not isinstance(item, str):
            guards.deep_size(item, limits.value_size, for_output=True)
            item = printed(item)
        total += len(item) if isinstance(item, str) else guards.deep_size(item, limits.value_size)
        if total > limits.value_size:
            raise guards.too_big("a joined string", limits.value_size)
        texts.append(item)
    return markup_join(texts) if eval_ctx.autoescape else str_join(texts)


_HOOKS = {
    "herald:iter": _count_iterations,
    "herald:out": _output,
    "herald:charge": _charge,
    "herald:concat": _concat,
}


def _bounded_range(*args: int) -> range:
    limits = state.current().budget.limits
    values = range(*args)
    if len(values) > limits.items:
        raise RenderLimitExceeded(f"range() may make at most {limits.items} numbers.")
    return values


PLAIN = HeraldSandbox(html=False)
HTML = HeraldSandbox(html=True)
