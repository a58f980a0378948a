"""The engine's deterministic per-user choices (pure): control group, variation, locale, utm."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.delivery.engine.split import (
    control_group_size,
    html_with_utm,
    locale_for,
    rank_of,
    variation_for,
    with_utm,
)

USERS = [f"user-{i}" for i in range(10_000)]


def held_out(campaign_id: str, users: list[str], percentage: float) -> set[str]:
    """The engine's rule: the control_group_size users with the smallest rank."""
    size = control_group_size(len(users), percentage)
    return set(sorted(users, key=lambda user: rank_of(campaign_id, user))[:size])


@settings(max_examples=20, deadline=None)
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


@settings(max_examples=10, deadline=None)
@given(first=st.integers(min_value=0, max_value=100))
def test_variations_follow_the_manual_percentages_and_are_stable(first: int) -> None:
    shares = [("variation_1", float(first)), ("variation_2", float(100 - first))]
    chosen = [variation_for("c1", user, shares) for user in USERS]
    share = chosen.count("variation_1") / len(USERS) * 100
    assert abs(share - first) <= 2  # a hash bucket per user: statistical, not exact
    assert chosen == [variation_for("c1", user, shares) for user in USERS]


def test_locale_matches_exactly_then_by_language_else_default() -> None:
    locales = ["default", "es-ES", "fr"]
    assert locale_for("es-ES", locales, "default") == "es-ES"
    assert locale_for("es_es", locales, "default") == "es-ES"
    assert locale_for("fr-CA", locales, "default") == "fr"
    assert locale_for("de-DE", locales, "default") == "default"
    assert locale_for(None, locales, "default") == "default"


UTM = {"utm_source": "herald", "utm_medium": "email"}


def test_utm_is_added_to_http_links_keeping_their_query() -> None:
    assert with_utm("https://a.example/x?ref=1#top", UTM) == (
        "https://a.example/x?ref=1&utm_source=herald&utm_medium=email#top"
    )
    assert with_utm("https://a.example/?utm_source=mine", UTM) == (
        "https://a.example/?utm_source=mine&utm_medium=email"
    )
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
