"""The renderer and the sandbox as pure logic: tables of templates, limits made small, a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from herald.personalization import check_template
from herald.personalization.limits import Limits, RenderFailed, RenderLimitExceeded
from herald.personalization.render import Block, RenderData, Renderer

DATA = RenderData(
    user={"first_name": "Ana", "points": 120, "tags": ["a", "b"], "address": {"city": "Lyon"}},
    event={"product": "Shoe"},
    blocks={
        "footer": Block("html", "<p>Bye {{ user.first_name }} & co</p>"),
        "note": Block("text", "T&C for {{ user.first_name }}"),
        "nested": Block("text", "[{{ ContentBlock['note'] }}]"),
    },
    product_sets={"bestsellers": [{"title": "Hat"}, {"price": 3}]},
    content_apis={"weather": {"summary": "Sunny"}},
)


def render(template: str, *, html: bool = False, limits: Limits | None = None) -> tuple[str, list[str]]:
    renderer = Renderer(DATA, limits) if limits else Renderer(DATA)
    text = renderer.render(template, "f", html=html)
    return text, [item.expression for item in renderer.missing]


@pytest.mark.parametrize(
    ("template", "text", "missing"),
    [
        ("{{ UserAttribute['first_name'] }}", "Ana", []),
        ("{{ user.address.city }}", "Lyon", []),
        ("{{ user['address']['city'] }}", "Lyon", []),
        ("{{ user.address.zip }}", "", ["user.address.zip"]),
        ("{{ UserAttribute['address']['zip code'] }}", "", ["UserAttribute['address']['zip code']"]),
        ("{{ user.tags[5] }}", "", ["user.tags[5]"]),
        ("{{ ProductSet['bestsellers'][1].title }}", "", ["ProductSet['bestsellers'][1].title"]),
        ("{{ ProductSet['other'][0].title }}", "", ["ProductSet['other']"]),
        ("{{ ContentApi['weather'].summary }}", "Sunny", []),
        ("{{ ContentBlock['nested'] }}", "[T&C for Ana]", []),
        ("{% for t in user.tags %}{{ t }}{% endfor %}", "ab", []),
        ("{% for t in user.nothing %}x{% endfor %}", "", ["user.nothing"]),
        ("{{ [user.nothing] }}", "[null]", ["user.nothing"]),
        ("{{ user.points > 100 }} {{ user.nothing > 1 }}", "true false", []),
        ("{{ user.nothing | int }}", "0", ["user.nothing"]),
        ("{{ user.items }}{{ user.get }}", "", ["user.items", "user.get"]),
        ("{{ user.first_name ~ '!' }}", "Ana!", []),
        ("{{ event.product | lower | replace('s', 'S') }}", "Shoe", []),
        ("{{ '{} has {}'.format(user.first_name, user.points) }}", "Ana has 120", []),
        ("{{ '%s/%d' % (user.first_name, user.points) }}", "Ana/120", []),
        ("{{ [1, 2, 3] | sum }} {{ range(3) | list }}", "6 [0,1,2]", []),
        ("{{ {'a': 1} | tojson }}", '{"a": 1}', []),
    ],
)
def test_values_and_missing_expressions(template: str, text: str, missing: list[str]) -> None:
    assert render(template) == (text, missing)


@pytest.mark.parametrize(
    ("template", "html", "text"),
    [
        ("<b>{{ ContentBlock['footer'] }}</b>", True, "<b><p>Bye Ana & co</p></b>"),
        ("{{ ContentBlock['note'] }}", True, "T&amp;C for Ana"),
        ("{{ ContentBlock['footer'] }}", False, "<p>Bye Ana & co</p>"),
        ("{{ '<i>' ~ user.first_name }}", True, "&lt;i&gt;Ana"),
        ("{{ '<i>' | safe }}", True, "<i>"),
    ],
)
def test_html_escaping(template: str, html: bool, text: str) -> None:
    assert render(template, html=html)[0] == text


@pytest.mark.parametrize(
    ("limits", "template"),
    [
        (Limits(steps=50), "{% for i in range(100) %}{% endfor %}"),
        (Limits(steps=50), "{{ range(100) | map('string') | join }}"),
        (Limits(items=10), "{{ range(11) | list }}"),
        (Limits(output_chars=100), "{% for i in range(20) %}0123456789{% endfor %}"),
        (
            Limits(output_chars=100),
            "{% set s %}{% for i in range(20) %}{{ 'x' * 10 }}{% endfor %}{% endset %}",
        ),
        (Limits(field_chars=10), "{{ 'x' * 11 }}"),
        (Limits(value_size=100), "{{ 'x' * 101 }}"),
        (Limits(value_size=100), "{{ ('x' * 60) ~ ('y' * 60) }}"),
        (Limits(int_bits=64), "{{ 2 ** 65 }}"),
        (Limits(block_depth=1), "{{ ContentBlock['nested'] }}"),
    ],
)
def test_each_limit_stops_the_render(limits: Limits, template: str) -> None:
    with pytest.raises(RenderLimitExceeded):
        render(template, limits=limits)


def test_the_deadline_stops_a_render_that_is_slow_rather_than_long() -> None:
    ticks: Iterator[float] = iter(float(n) for n in range(1_000_000))

    def clock() -> float:
        return next(ticks)

    renderer = Renderer(DATA, Limits(seconds=5.0), clock=clock)
    with pytest.raises(RenderLimitExceeded, match="longer than 5 seconds"):
        renderer.render("{% for i in range(100000) %}{% endfor %}", "f")


def test_the_budget_is_shared_across_renders() -> None:
    renderer = Renderer(DATA, Limits(steps=150))
    renderer.render("{% for i in range(100) %}{% endfor %}", "a")
    with pytest.raises(RenderLimitExceeded):
        renderer.render("{% for i in range(100) %}{% endfor %}", "b")


@pytest.mark.parametrize(
    "template",
    [
        "{{ ['a'] | map(attribute='__class__') | list }}",
        "{{ 1/0 }}",
        "{{ range }}",
        "{{ ''['__cla' ~ 'ss__'] }}",
        "{{ (1).bit_length() }}",
        "{{ 'x' | sum(start=[]) }}",
    ],
)
def test_failures_for_this_data_are_render_failures(template: str) -> None:
    with pytest.raises(RenderFailed):
        render(template)


def test_missing_values_are_recorded_per_field() -> None:
    renderer = Renderer(DATA)
    renderer.render("{{ user.x }}{{ user.x }}", "a")
    renderer.render("{{ user.x }}", "b")
    assert [(item.field, item.expression) for item in renderer.missing] == [("a", "user.x"), ("b", "user.x")]


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("Hello", True),
        ("{{ user.first_name }}", True),
        ("{{UserAttribute['first_name']}}", True),
        ("{% for p in ProductSet['x'] %}{{ p.title }}{% endfor %}", True),
        ("{# a comment #}{{ x | default('y') | upper }}", True),
        ("width: {100%}", True),
        ("{{ user.first_name", False),
        ("{% if x %}", False),
        ("{{ x | nope }}", False),
        ("{{ x is nope }}", False),
        ("{% include 'a' %}", False),
        ("{% import 'a' as b %}", False),
        ("{% from 'a' import b %}", False),
        ("{% extends 'a' %}", False),
        ("{{ x._private }}", False),
        ("{{ x['__class__'] }}", False),
        ("{{ x.urlize }}", True),
        ("{{ x | urlize }}", False),
    ],
)
def test_check_template(text: str, valid: bool) -> None:
    assert (check_template(text) is None) is valid


def test_syntax_errors_name_the_line_of_multiline_texts() -> None:
    message = check_template("line one\n{{ oops")
    assert message is not None
    assert "line 2" in message


def test_rendering_does_not_change_plain_text() -> Any:
    text = "Tab\there, 100% {braces} and a trailing newline\n"
    assert render(text) == (text, [])


def test_a_renderer_started_on_another_user_keeps_nothing_of_the_last() -> None:
    """A delivery batch renders every user with one renderer (`Renderer.start`): each user gets
    their own values, their own record of missing values and a whole budget."""
    limits = Limits(steps=4, seconds=5, output_chars=100, field_chars=100, value_size=100)
    first = RenderData({"first_name": "Ana"}, {}, DATA.blocks, {}, {})
    renderer = Renderer(first, limits)
    assert renderer.render("{{ user.first_name }}{{ user.city }}", "f") == "Ana"
    assert [item.expression for item in renderer.missing] == ["user.city"]
    with pytest.raises(RenderLimitExceeded):  # the first user's budget used up
        renderer.render("{{ user.a }}{{ user.b }}{{ user.c }}", "f")

    renderer.start(RenderData({"city": "Lyon"}, {"product": "Hat"}, DATA.blocks, {}, {}))
    text = renderer.render("{{ user.first_name }}{{ user.city }} {{ ContentBlock['note'] }}", "f")
    assert text == "Lyon T&C for "
    assert [item.expression for item in renderer.missing] == ["user.first_name"]
