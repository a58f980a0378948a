"""Request ids are made without `uuid.UUID`; they must still be canonical random UUID v4 text."""

from __future__ import annotations

import uuid

import pytest

from herald.http.guards import parse_uuid4
from herald.ids import is_object_id, uuid4_text


def test_uuid4_text_is_canonical_version_4_and_random() -> None:
    made = [uuid4_text() for _ in range(2000)]
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # canonical: lower-case, hyphenated
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert parse_uuid4(text) == text  # what Herald accepts back from a client
    assert len(set(made)) == len(made)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("65f1c0ffee0123456789abcd", True),
        ("65f1c0ffee0123456789abcd\n", False),
        ("65F1C0FFEE0123456789ABCD", False),
    ],
)
def test_an_object_id_is_the_whole_text(text: str, expected: bool) -> None:
    assert is_object_id(text) is expected
