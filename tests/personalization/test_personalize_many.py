"""`personalize_many`: each item rendered on the caller's loop within a small budget, the items of a
content that needs more rendered with their whole budget on a worker thread; either way, each
item's outcome in the order of the items, as one render with the whole budget would give it."""

from __future__ import annotations

import threading
from typing import Any

from herald.personalization import personalize
from herald.personalization.personalize import Personalized, Prepared, texts_to_render
from herald.personalization.render import Renderer

TITLE = "content.push.android.basic_details.title"


def _prepared(title: str) -> Prepared:
    content: dict[str, Any] = {"content": {"push": {"android": {"basic_details": {"title": title}}}}}
    return Prepared(content, {}, {}, {}, texts_to_render(content))


def _title(outcome: object) -> str:
    assert isinstance(outcome, Personalized), outcome
    return str(outcome.content["content"]["push"]["android"]["basic_details"]["title"])


async def test_short_contents_render_on_the_loop_in_order() -> None:
    hello = _prepared("Hi {{ user.name }}")
    bye = _prepared("Bye {{ user.name | default('you') }}")
    items = [(hello, {"name": "Ana"}, {}), (bye, {}, {}), (hello, {"name": "Bo"}, {})]
    outcomes = await personalize.personalize_many(items)
    assert [_title(outcome) for outcome in outcomes] == ["Hi Ana", "Bye you", "Hi Bo"]


async def test_a_content_beyond_the_small_budget_renders_whole_on_a_worker_thread(
    monkeypatch: Any,
) -> None:
    # Loops of `count` steps: 10 stays within the small budget, 5,000 goes beyond it (2,000 steps)
    # yet within the whole one.
    long = _prepared("{% for i in range(user.count) %}x{% endfor %}")
    short = _prepared("Hi {{ user.name }}")
    rendered_on: dict[int, str] = {}  # the thread each user was last rendered on, by id
    start = Renderer.start

    def recording(self: Renderer, data: Any) -> None:
        rendered_on[id(data.user)] = threading.current_thread().name
        start(self, data)

    monkeypatch.setattr(Renderer, "start", recording)
    items = [
        (long, {"count": 10}, {}),
        (short, {"name": "Ana"}, {}),
        (long, {"count": 5_000}, {}),
        (long, {"count": 3}, {}),
        (short, {"name": "Bo"}, {}),
    ]
    outcomes = await personalize.personalize_many(items)
    assert [_title(outcome) for outcome in outcomes] == ["x" * 10, "Hi Ana", "x" * 5_000, "xxx", "Hi Bo"]
    loop = threading.current_thread().name
    # The long content's first item on the loop; from its item beyond the small budget on, its
    # items on a worker thread; the short content's all on the loop.
    on_loop = [rendered_on[id(user)] == loop for _, user, _ in items]
    assert on_loop == [True, True, False, False, True], rendered_on


async def test_beyond_the_whole_budget_is_that_items_failure_alone() -> None:
    long = _prepared("{% for i in range(user.count) %}x{% endfor %}")
    outcomes = await personalize.personalize_many([(long, {"count": 10**9}, {}), (long, {"count": 2}, {})])
    failed, fine = outcomes
    assert not isinstance(failed, Personalized)
    assert [problem.code for problem in failed.details] == ["RENDER_LIMIT_EXCEEDED"]
    assert _title(fine) == "xx"
