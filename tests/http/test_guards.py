"""Property tests of the raw-body checks of `herald.http.guards` against plain reference readings."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from herald.http.guards import json_depth_exceeds

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab{}[]"\\\u00e9 '),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=40,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(child) for child in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(child) for child in value), default=0)
    return 0


@given(_json_values, st.integers(min_value=0, max_value=8), st.booleans())
def test_depth_is_the_nesting_of_the_value_whatever_its_strings_hold(
    value: object, limit: int, ascii_only: bool
) -> None:
    # Brackets, quotes and backslashes inside strings (escaped in the text) never count.
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_depth_exceeds(body, limit) == (_depth(value) > limit)


@given(st.integers(min_value=1, max_value=200))
def test_an_unterminated_string_does_not_hide_the_brackets_after_it(depth: int) -> None:
    body = b'{"a": "no end ' + b"[" * depth
    assert json_depth_exceeds(body, 32) == (depth + 1 > 32)
