"""A JSON column's text reads back as the standard library reads it, whichever parser reads it
(`herald.db._json_value`: orjson where it agrees, the standard library for the rest), but for whole
numbers beyond 64 bits: the doubles they equal, as in a request body (`json_numbers.wide_as_doubles`)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from herald.db import _json_text, _json_value
from herald.json_numbers import wide_as_doubles

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: read as doubles
    | st.floats()  # NaN and the infinities too: orjson refuses those
    | st.text()  # lone surrogates too: orjson refuses their escapes
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _same(left: Any, right: Any) -> bool:
    """Equal, type for type (1 is not 1.0 here), NaN equal to NaN."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        return (math.isnan(left) and math.isnan(right)) or left == right
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    return bool(left == right)


@given(_VALUES)
def test_a_value_written_by_the_standard_library_reads_back_as_it_does(value: Any) -> None:
    text = json.dumps(value)
    assert _same(_json_value(text), _as_read(text))


@given(_VALUES)
def test_a_value_written_as_herald_writes_it_reads_back_as_the_standard_library_reads_it(value: Any) -> None:
    text = _json_text(value)
    assert _same(_json_value(text), _as_read(text))


def _as_read(text: str) -> Any:
    return wide_as_doubles(json.loads(text), text.encode())


def test_the_cases_orjson_reads_otherwise() -> None:
    assert _json_value(json.dumps(2**63 - 1)) == 2**63 - 1
    read = _json_value(json.dumps([2**70, -(2**63) - 1]))
    assert read == [float(2**70), float(-(2**63) - 1)]
    assert all(type(item) is float for item in read)
    assert math.isnan(_json_value("NaN"))
    assert _json_value("[1e400]") == [math.inf]
    assert _json_value('"\\ud800"') == "\ud800"
    assert _json_value('{"a": 1, "a": 2}') == {"a": 2}
