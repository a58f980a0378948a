"""The engine's deterministic per-user choices (pure): control group, variation, locale, utm."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.delivery.engine.split import (
    assign_variations,
    control_group_size,
    html_with_utm,
    locale_for,
    rank_of,
    split_sizes,
    with_utm,
)

USERS = [f"user-{i}" for i in range(10_000)]


def held_out(campaign_id: str, users: list[str], percentage: float) -> set[str]:
    """The engine's rule: the control_group_size users with the smallest rank."""
    size = control_group_size(len(users), percentage)
    return set(sorted(users, key=lambda user: rank_of(campaign_id, user))[:size])


@settings(max_examples=40, deadline=None)
@given(campaign_id=st.text(min_size=1, max_size=24), percentage=st.integers(min_value=0, max_value=100))
def test_the_control_group_share_is_exact_to_one_point_on_10000_users(
    campaign_id: str, percentage: int
) -> None:
    group = held_out(campaign_id, USERS, percentage)
    assert abs(len(group) / len(USERS) * 100 - percentage) <= 1


@settings(max_examples=20, deadline=None)
@given(campaign_id=st.text(min_size=1, max_size=24), percentage=st.integers(min_value=1, max_value=99))
def test_a_user_is_on_the_same_side_on_every_evaluation(campaign_id: str, percentage: int) -> None:
    first = held_out(campaign_id, USERS[:500], percentage)
    again = held_out(campaign_id, list(reversed(USERS[:500])), percentage)
    assert first == again


def test_control_groups_differ_between_campaigns() -> None:
    assert held_out("campaign-a", USERS[:1000], 10) != held_out("campaign-b", USERS[:1000], 10)


@st.composite
def manual_shares(draw: st.DrawFn) -> list[tuple[str, float]]:
    """2 to 5 variations with whole percentages adding up to 100 (MANUAL distribution)."""
    count = draw(st.integers(min_value=2, max_value=5))
    cuts = sorted(draw(st.lists(st.integers(0, 100), min_size=count - 1, max_size=count - 1)))
    edges = [0, *cuts, 100]
    return [(f"variation_{i + 1}", float(edges[i + 1] - edges[i])) for i in range(count)]


@settings(max_examples=25, deadline=None)
@given(campaign_id=st.text(min_size=1, max_size=24), shares=manual_shares())
def test_manual_variations_are_exact_to_one_point_on_10000_users(
    campaign_id: str, shares: list[tuple[str, float]]
) -> None:
    chosen = assign_variations(campaign_id, USERS, shares)
    for name, percentage in shares:
        share = sum(1 for v in chosen.values() if v == name) / len(USERS) * 100
        assert abs(share - percentage) <= 1, (name, share, percentage)


@settings(max_examples=25, deadline=None)
@given(
    campaign_id=st.text(min_size=1, max_size=24),
    shares=manual_shares(),
    control=st.integers(min_value=0, max_value=90),
)
def test_variations_split_exactly_what_the_control_group_leaves(
    campaign_id: str, shares: list[tuple[str, float]], control: int
) -> None:
    held = held_out(campaign_id, USERS, control)
    left = [user for user in USERS if user not in held]
    chosen = assign_variations(campaign_id, left, shares)
    for name, percentage in shares:
        count = sum(1 for v in chosen.values() if v == name)
        assert abs(count - len(left) * percentage / 100) <= 1


@settings(max_examples=15, deadline=None)
@given(campaign_id=st.text(min_size=1, max_size=24), shares=manual_shares(), seed=st.randoms())
def test_a_user_gets_the_same_variation_on_every_evaluation(
    campaign_id: str, shares: list[tuple[str, float]], seed: random.Random
) -> None:
    users = USERS[:2000]
    shuffled = list(users)
    seed.shuffle(shuffled)
    assert assign_variations(campaign_id, users, shares) == assign_variations(campaign_id, shuffled, shares)


@given(total=st.integers(min_value=0, max_value=1_000_000), shares=manual_shares())
def test_split_sizes_add_up_and_are_within_one_user(total: int, shares: list[tuple[str, float]]) -> None:
    sizes = split_sizes(total, shares)
    assert sum(sizes) == total
    for size, (_, percentage) in zip(sizes, shares, strict=True):
        assert abs(size - total * percentage / 100) <= 1


def test_variations_differ_between_campaigns() -> None:
    shares = [("variation_1", 50.0), ("variation_2", 50.0)]
    assert assign_variations("a", USERS[:1000], shares) != assign_variations("b", USERS[:1000], shares)


def test_locale_matches_exactly_then_by_language_else_default() -> None:
    locales = ["default", "es-ES", "fr"]
    assert locale_for("es-ES", locales, "default") == "es-ES"
    assert locale_for("es_es", locales, "default") == "es-ES"
    assert locale_for("fr-CA", locales, "default") == "fr"
    assert locale_for("de-DE", locales, "default") == "default"
    assert locale_for(None, locales, "default") == "default"
    # A campaign locale written with an underscore is the same locale (it was never matched).
    underscored = ["default", "zh_TW", "pt_BR"]
    for user in ("zh_TW", "zh-TW", "ZH-tw", " zh-TW ", "zh"):
        assert locale_for(user, underscored, "default") == "zh_TW", user
    assert locale_for("pt-PT", underscored, "default") == "pt_BR"  # by language
    assert locale_for("  ", underscored, "default") == "default"


UTM = {"utm_source": "herald", "utm_medium": "email"}


def test_utm_is_added_to_http_links_keeping_their_query() -> None:
    assert with_utm("https://a.example/x?ref=1#top", UTM) == (
        "https://a.example/x?ref=1&utm_source=herald&utm_medium=email#top"
    )
    assert with_utm("https://a.example/?utm_source=mine", UTM) == (
        "https://a.example/?utm_source=mine&utm_medium=email"
    )
    # Protocol-relative: opened over http(s) like the page around it.
    assert with_utm("//a.example/x", UTM) == "//a.example/x?utm_source=herald&utm_medium=email"
    assert with_utm("///x", UTM) == "///x"  # no host: a path, not a link to tag
    assert with_utm("myapp://open/home", UTM) == "myapp://open/home"
    assert with_utm("mailto:x@example.com", UTM) == "mailto:x@example.com"


def test_utm_is_added_to_every_link_of_the_html_and_nothing_else() -> None:
    html = (
        '<p>See <a class="b" href="https://a.example/1?q=2&amp;r=3">one</a> and '
        "<a href='http://b.example'>two</a>, <img src=\"https://c.example/i.png\"> "
        '<a href="mailto:x@example.com">mail</a></p>'
    )
    assert html_with_utm(html, UTM) == (
        '<p>See <a class="b" href="https://a.example/1?q=2&amp;r=3&amp;utm_source=herald&amp;utm_medium=email">one</a>'
        " and <a href='http://b.example?utm_source=herald&amp;utm_medium=email'>two</a>, "
        '<img src="https://c.example/i.png"> <a href="mailto:x@example.com">mail</a></p>'
    )
