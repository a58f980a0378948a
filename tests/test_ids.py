"""Request ids are made without `uuid.UUID`; they must still be canonical random UUID v4 text."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald import ids
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


@given(
    instants=st.lists(
        st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
        min_size=2,
        max_size=20,
        unique=True,
    ),
    processes=st.lists(st.binary(min_size=3, max_size=3), min_size=2, max_size=20),
)
def test_object_ids_of_several_processes_sort_by_their_instants(
    instants: list[datetime], processes: list[bytes]
) -> None:
    # Two workers making ids within one second: id order is creation order (16 µs apart at least),
    # whichever process made each (contract §4: "newest first (id descending)").
    made = []
    for index, at in enumerate(instants):
        with _process(processes[index % len(processes)]):
            made.append((at, ids.object_id(at)))
    by_id = [at for at, _ in sorted(made, key=lambda pair: pair[1])]
    by_instant = sorted(instants)
    assert [at.replace(microsecond=at.microsecond // 16 * 16) for at in by_id] == [
        at.replace(microsecond=at.microsecond // 16 * 16) for at in by_instant
    ]
    assert all(is_object_id(made_id) for _, made_id in made)


@contextlib.contextmanager
def _process(random_bytes: bytes) -> Iterator[None]:
    saved = ids._process_random
    ids._process_random = random_bytes
    try:
        yield
    finally:
        ids._process_random = saved
