"""Delivery ids as pure logic: stable, one per message, and in an execution's send order."""

from __future__ import annotations

import hashlib
import string

from hypothesis import given
from hypothesis import strategies as st

from herald.delivery.engine.rank import rank_of
from herald.delivery.engine.run import delivery_id

_IDS = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=12)
_PLATFORMS = st.sampled_from(["ANDROID", "IOS", "WEB", "EMAIL"])


@given(_IDS, st.lists(_IDS, min_size=2, max_size=40, unique=True), _PLATFORMS)
def test_ids_rise_with_the_rank_an_execution_sends_its_users_in(
    execution_id: str, customers: list[str], platform: str
) -> None:
    ranked = sorted(customers, key=lambda customer_id: rank_of("c1", customer_id))
    ids = [delivery_id(execution_id, c, platform, rank=rank_of("c1", c)) for c in ranked]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(len(one) == 24 and set(one) <= set(string.hexdigits.lower()) for one in ids)


@given(_IDS, _IDS, st.integers(0, 2**62 - 1))
def test_each_message_of_a_user_has_an_id_of_its_own_and_always_the_same(
    execution_id: str, customer_id: str, rank: int
) -> None:
    messages = [("ANDROID", ""), ("IOS", ""), ("ANDROID", "firing-1"), ("ANDROID", "firing-2")]
    ids = [delivery_id(execution_id, customer_id, p, f, rank) for p, f in messages]
    assert len(set(ids)) == len(ids)
    assert ids == [delivery_id(execution_id, customer_id, p, f, rank) for p, f in messages]
    other = delivery_id(execution_id + "x", customer_id, "ANDROID", "", rank)
    assert other != ids[0]


def test_without_a_rank_the_id_is_the_hash_of_the_message_key() -> None:
    key = "e1\x00u1\x00ANDROID\x00f1"
    assert delivery_id("e1", "u1", "ANDROID", "f1") == hashlib.sha256(key.encode()).hexdigest()[:24]
