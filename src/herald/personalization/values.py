"""What templates can read: named views of values, labelled data, and the undefined that records.

Every value a template reaches carries the expression that names it, so that a missing value is
reported the way the template wrote it: `UserAttribute['first_name']`, `user.first_name`,
`ProductSet['bestsellers'][0].title`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.runtime import ChainableUndefined, Undefined
from jinja2.utils import missing

from herald.personalization import state

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def subscript(path: str, key: object, *, prefer_attribute: bool = True) -> str:
    """`path` followed by an access to `key`, written as a template would write it."""
    if isinstance(key, str) and prefer_attribute and _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


class LabeledDict(dict[str, Any]):
    """A JSON object that knows the expression it was reached by."""

    __slots__ = ("_herald_path",)
    _herald_path: str


class LabeledList(list[Any]):
    __slots__ = ("_herald_path",)
    _herald_path: str


def labeled(value: Any, path: str) -> Any:
    """`value` (JSON data) with every object and array inside it labelled by its expression, and
    every null made a `NullValue` at its expression."""
    if value is None:
        return NullValue(path)
    if isinstance(value, dict):
        result: LabeledDict = LabeledDict(
            (key, labeled(item, subscript(path, key))) for key, item in value.items()
        )
        result._herald_path = path
        return result
    if isinstance(value, list):
        items = LabeledList(labeled(item, f"{path}[{index}]") for index, item in enumerate(value))
        items._herald_path = path
        return items
    return value


_UNREAD = object()


class View:
    """A read-only, named bag of values: `UserAttribute`, `user`, `event`, `ProductSet`, `ContentApi`.

    `style` says how templates usually write an access: "item" (`UserAttribute['x']`) or "attribute"
    (`user.x`). Both forms work on every view. A view has no methods, so no value can be shadowed
    by one (`user.items` is the attribute `items`).
    """

    __slots__ = ("_label", "_labeled", "_style", "_values")

    def __init__(self, label: str, style: str, values: Mapping[str, Any]) -> None:
        self._label = label
        self._style = style
        # Labelled when first read, not here: a render reads a few of a user's attributes, and
        # labelling every one (an expression string per value) cost more than the render.
        self._values = values
        self._labeled: dict[str, Any] = {}

    def expression(self, key: object) -> str:
        return subscript(self._label, key, prefer_attribute=self._style == "attribute")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: str) -> Any:
        found = self._labeled.get(key, _UNREAD)
        if found is _UNREAD:  # read once per render: a miss here is the rule, not an exception
            found = self._labeled[key] = labeled(self._values[key], self.expression(key))
        return found

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return self._label


class BlockView(View):
    """`ContentBlock`: a block is rendered (it may hold expressions) when a template reads it."""

    __slots__ = ("_render",)

    def __init__(self, names: Mapping[str, Any], render: Callable[[str], str]) -> None:
        super().__init__("ContentBlock", "item", {})
        self._values = dict(names)
        self._render = render

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            raise KeyError(key)
        return self._render(key)


def expression_of(obj: Any, name: Any) -> str:
    """The expression of the access `obj[name]` / `obj.name` as a template wrote it."""
    if obj is missing:
        return str(name)
    if isinstance(obj, View):
        return obj.expression(name)
    path = getattr(obj, "_herald_path", None)
    if isinstance(path, str):
        return subscript(path, name)
    return str(name)


class RecordingUndefined(ChainableUndefined):
    """A missing value: renders empty, and is reported in `missing` where it is output.

    Being tested (`is defined`, `if`) or replaced (`| default(...)`) is not a hole in the output,
    so only output (also inside a printed container) and iteration record. Operations on it give
    itself, so that `user.age + 1` or `user.name.title()` render empty too instead of failing.
    Access to an unsafe attribute also arrives as an undefined: that one raises.
    """

    __slots__ = ()

    def _check_safe(self) -> None:
        if self._undefined_exception is SecurityError:
            self._fail_with_undefined_error()

    def _record(self) -> None:
        self._check_safe()
        state.current().record(expression_of(self._undefined_obj, self._undefined_name))

    def __str__(self) -> str:
        self._record()
        return ""

    def __iter__(self) -> Iterator[Any]:
        self._record()
        yield from ()

    def __repr__(self) -> str:
        # Printed inside a container (`{{ [user.x] }}`): still a hole, and still refused if unsafe.
        self._record()
        return "Undefined"

    def _same(self, *_args: Any, **_kwargs: Any) -> RecordingUndefined:
        self._check_safe()
        return self

    # Jinja's Undefined types these as "always raises"; ours return themselves instead.
    __call__ = _same  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = _same  # type: ignore[assignment]
    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same  # type: ignore[assignment]
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same  # type: ignore[assignment]
    __pos__ = __neg__ = __pow__ = __rpow__ = _same  # type: ignore[assignment]

    def _false(self, _other: Any) -> bool:
        self._check_safe()
        return False

    __lt__ = __le__ = __gt__ = __ge__ = _false  # type: ignore[assignment]

    def __int__(self) -> int:  # type: ignore[override]
        self._record()
        return 0

    def __float__(self) -> float:  # type: ignore[override]
        self._record()
        return 0.0


class NullValue(RecordingUndefined):
    """A JSON null in the data a template reads (`{"title": null}`, an attribute set to null): a
    missing value like any other. It renders empty and is reported in `missing` at the expression
    that reached it, `| default(...)` replaces it and `is defined` is false; `is none` is true, as
    it was when nulls were None. Inside a printed array or object, and in `tojson`, it is `null`."""

    __slots__ = ("_herald_path",)

    def __init__(self, path: str) -> None:
        super().__init__(name=path)
        self._herald_path = path

    def _record(self) -> None:
        state.current().record(self._herald_path)


def is_none(value: Any) -> bool:
    """Jinja's `none` test, true for a JSON null too."""
    return value is None or isinstance(value, NullValue)


def json_default(value: Any) -> Any:
    """What JSON shows for a value inside a printed container (or `tojson`) that JSON has no type
    for: a null is null; a missing value is null too, and reported; anything else its text."""
    if isinstance(value, NullValue):
        return None
    if isinstance(value, Undefined):
        str(value)  # reports it (a RecordingUndefined) or refuses it (an unsafe access)
        return None
    return str(value)


_COMPACT: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":"), "default": json_default}


def printed(value: Any) -> Any:
    """`value` as output shows it: JSON's spelling of the JSON values (true and false, arrays and
    objects as compact JSON; a null is a missing value, see `NullValue`), so that printing a flag or
    a list reads the same in every channel and not as Python would write it. Strings, numbers and
    missing values are left as they are (Jinja makes their text). The one place output spells
    values: the sandbox's output, `~` and `join` use it; preview, test and live sends all render
    with the sandbox."""
    if isinstance(value, str | Undefined):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        # Keys sorted, as `tojson` sorts them: PostgreSQL's JSONB does not keep an object's key
        # order, and a message must not depend on the database it was stored in.
        try:
            return json.dumps(value, **_COMPACT, sort_keys=True)
        except TypeError:  # keys of several types, in an object a template made: as written
            return json.dumps(value, **_COMPACT)
    if value is None:
        return ""  # `none` written in a template, or a method's answer: nothing to print
    return value
