"""Size checks made *before* an operation that could make a huge value in one step.

Most operations make values no bigger than their inputs; the budget's step counter bounds how many
run. A few can make a value vastly bigger than their inputs in a single C-level call, which no
step counter can interrupt: `'a' * 10**9`, `2 ** 10**9`, `'%999999999s' % x`, `'x'.ljust(10**9)`,
`s.replace('a', s)`, and printing a list that holds one big string a million times. Each of those
is checked here against `Limits` before it runs.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

from jinja2.runtime import Undefined

from herald.personalization.limits import Limits, RenderFailed, RenderLimitExceeded
from herald.personalization.values import View, printed

_SCALARS = (int, float, bool, type(None), range)
_CONTAINERS = (list, tuple, dict, set, frozenset)


def too_big(what: str, limit: int) -> RenderLimitExceeded:
    return RenderLimitExceeded(f"The template makes {what} larger than {limit} characters.")


def deep_size(value: Any, limit: int, *, for_output: bool = False) -> int:
    """An upper bound of the characters `str(value)` has (strings, numbers, containers, nested).

    Stops as soon as the bound passes `limit` (raising), so the cost is at most `limit` steps.
    With `for_output`, a value that is not data (a function, a macro, a loop) is refused: its text
    would be a Python representation, not content.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 4  # quotes and separator when inside a container
        elif isinstance(item, (*_SCALARS, Undefined, View)):
            total += 24
        elif isinstance(item, Mapping):
            total += 2 + 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, _CONTAINERS):
            total += 2 + len(item)
            stack.extend(item)
        elif for_output:
            raise RenderFailed(f"An expression outputs a {type(item).__name__}, which is not a value.")
        else:
            total += 24
        if total > limit:
            raise too_big("a value", limit)
    return total


def _is_sequence(value: Any) -> bool:
    return isinstance(value, str | list | tuple)


def check_multiply(left: Any, right: Any, limits: Limits) -> None:
    if _is_sequence(left) and isinstance(right, int):
        sequence, times = left, right
    elif _is_sequence(right) and isinstance(left, int):
        sequence, times = right, left
    elif isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > limits.int_bits:
            raise RenderLimitExceeded(f"The template makes a number larger than {limits.int_bits} bits.")
        return
    else:
        return
    if times <= 0:
        return
    if isinstance(sequence, str):
        # A string's size is its length: `deep_size` adds the quotes and separator it would have
        # inside a printed container, five times the size of `'x' * n`.
        size = len(sequence)
    else:
        if len(sequence) * times > limits.items:
            raise RenderLimitExceeded(f"The template makes a list longer than {limits.items} items.")
        size = deep_size(sequence, limits.value_size)
    if size * times > limits.value_size:
        raise too_big("a value", limits.value_size)


def check_power(base: Any, exponent: Any, limits: Limits) -> None:
    growing = isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1
    if growing and base.bit_length() * exponent > limits.int_bits:
        raise RenderLimitExceeded(f"The template makes a number larger than {limits.int_bits} bits.")


def check_add(left: Any, right: Any, limits: Limits) -> None:
    if isinstance(left, int | float) and isinstance(right, int | float):
        return
    if deep_size(left, limits.value_size) + deep_size(right, limits.value_size) > limits.value_size:
        raise too_big("a value", limits.value_size)


# A printf-style conversion: mapping key, flags, width, precision, length, type.
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def check_printf(template: str, args: Any, limits: Limits) -> None:
    """`template % args`: widths must be literal and bounded; the result is estimated from them."""
    conversions = 0
    widths = 0
    for width, precision, kind in _PRINTF.findall(template):
        if "*" in (width, precision):
            raise RenderFailed("'*' widths are not supported in % formatting.")
        padding = max(int(width or 0), int(precision or 0))
        if padding > limits.value_size:
            raise too_big("a formatted value", limits.value_size)
        widths += padding
        conversions += kind != "%"
    size = len(template) + widths + conversions * deep_size(args, limits.value_size)
    if size > limits.value_size:
        raise too_big("a formatted value", limits.value_size)


def check_str_format(template: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], limits: Limits) -> None:
    """`template.format(...)`: literal, bounded widths; every field at most as big as all arguments."""
    fields = 0
    widths = 0
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return  # str.format raises the same error, reported as a render failure
    for _literal, field_name, spec, _conversion in parsed:
        if field_name is None:
            continue
        fields += 1
        spec = spec or ""
        if "{" in spec:
            raise RenderFailed("Nested replacement fields are not supported in format specifications.")
        numbers = [int(number) for number in re.findall(r"\d+", spec)]
        padding = max(numbers, default=0)
        if padding > limits.value_size:
            raise too_big("a formatted value", limits.value_size)
        widths += padding
    arguments = deep_size(args, limits.value_size) + deep_size(dict(kwargs), limits.value_size)
    if len(template) + widths + fields * arguments > limits.value_size:
        raise too_big("a formatted value", limits.value_size)


def check_replace(text: str, old: Any, new: Any, count: Any, limits: Limits) -> None:
    if not isinstance(old, str) or not isinstance(new, str):
        return
    occurrences = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        occurrences = min(occurrences, count)
    if len(text) + occurrences * (len(new) - len(old)) > limits.value_size:
        raise too_big("a string", limits.value_size)


def check_width(width: Any, limits: Limits) -> None:
    if isinstance(width, int) and width > limits.value_size:
        raise too_big("a padded string", limits.value_size)


def bounded_join(separator: str, items: Iterable[Any], limits: Limits) -> list[str]:
    """The items of a join as strings, refusing before the joined result would be too big."""
    parts: list[str] = []
    total = 0
    for item in items:
        text = item if isinstance(item, str) else None
        if text is None:
            deep_size(item, limits.value_size, for_output=True)
            text = str(printed(item))
        total += len(text) + len(separator)
        if total > limits.value_size:
            raise too_big("a joined string", limits.value_size)
        parts.append(text)
    return parts


def check_result(value: Any, limits: Limits) -> Any:
    """A cheap check on what an operation returned (a string's length)."""
    if isinstance(value, str) and len(value) > limits.value_size:
        raise too_big("a string", limits.value_size)
    return value
