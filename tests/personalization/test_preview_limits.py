"""Templates are client code: sandbox escapes and runaway templates end in a clean 4xx, never a 500.

Decisions: what can be seen without running the template (syntax, `_` attributes, include/extends)
is 400 INVALID_TEMPLATE; what happens while rendering for this user is 422 UNPROCESSABLE_ENTITY with
details RENDER_LIMIT_EXCEEDED (steps, time, output or value size, nesting) or TEMPLATE_RENDER_FAILED
(an error of the template for this data, or an unsafe access found at run time).
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from tests.factories import Tenant
from tests.personalization.helpers import (
    add_resources,
    detail_codes,
    email_body,
    preview,
    push_body,
    render_title,
)

TITLE = "campaign_content.content.push.android.basic_details.title"
INTERNALS = ("<class", "<function", "<built-in", "object at 0x", "jinja2", "Traceback", "builtins")


def _assert_no_internals(response: httpx.Response) -> None:
    for marker in INTERNALS:
        assert marker not in response.text, response.text


class TestSandbox:
    @pytest.mark.parametrize(
        "template",
        [
            "{{ ''.__class__.__mro__ }}",
            "{{ ''.__class__.__mro__[1].__subclasses__() }}",
            "{{ user.__init__ }}",
            "{{ range.__globals__ }}",
            "{{ cycler.__init__.__globals__.os }}",
            "{{ ''['__class__'] }}",
            "{{ user._values }}",
        ],
    )
    async def test_internals_named_in_the_template_are_refused_as_invalid(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 400
        assert detail_codes(response) == {("INVALID_TEMPLATE", TITLE)}
        _assert_no_internals(response)

    @pytest.mark.parametrize(
        "template",
        [
            "{{ ''['__cla' ~ 'ss__'] }}",
            "{% set name = '__' ~ 'class' ~ '__' %}{{ user[name] }}{{ ''[name][name] }}",
            "{{ (1).to_bytes(10, 'big') }}",
            "{{ [1, 2].append(3) }}",
            "{{ {'a': 1}.update({'b': 2}) }}",
            "{{ 'abc'.encode('utf-8') }}",
        ],
    )
    async def test_unsafe_access_found_while_rendering_is_422(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "UNPROCESSABLE_ENTITY"
        assert detail_codes(response) == {("TEMPLATE_RENDER_FAILED", TITLE)}
        _assert_no_internals(response)

    @pytest.mark.parametrize(
        "template", ["{{ range }}", "{{ cycler }}", "{{ namespace }}", "{{ self }}", "{{ [range] }}"]
    )
    async def test_printing_a_function_or_object_is_refused(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 422
        assert detail_codes(response) == {("TEMPLATE_RENDER_FAILED", TITLE)}
        _assert_no_internals(response)

    @pytest.mark.parametrize("template", ["{{ lipsum(5) }}", "{{ config }}", "{{ request }}", "{{ os }}"])
    async def test_what_the_sandbox_does_not_offer_is_simply_missing(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 200
        assert (
            response.json()["data"]["personalized_content"]["content"]["push"]["android"]["basic_details"][
                "title"
            ]
            == ""
        )

    @pytest.mark.parametrize(
        "template",
        ["{{ 1 / 0 }}", "{{ user.first_name + 1 }}", "{{ user.first_name > 1 }}", "{{ 'x' | sum }}"],
    )
    async def test_a_template_error_for_this_data_is_422(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 422
        assert detail_codes(response) == {("TEMPLATE_RENDER_FAILED", TITLE)}

    async def test_every_failing_field_is_reported_and_nothing_else_answers(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body(
            {
                "android": {"title": "{{ 1/0 }}", "message": "{{ user.first_name }}"},
                "ios": {"title": "{{ [].pop() }}"},
            }
        )
        response = await preview(client, workspace, body)
        assert response.status_code == 422
        assert detail_codes(response) == {
            ("TEMPLATE_RENDER_FAILED", TITLE),
            ("TEMPLATE_RENDER_FAILED", "campaign_content.content.push.ios.basic_details.title"),
        }


class TestRunawayTemplates:
    @pytest.mark.parametrize(
        "template",
        [
            "{% for i in range(10**9) %}x{% endfor %}",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{% for j in 'x' * 100000 %}{{ j }}{% endfor %}{% endfor %}",
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
            "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
            "{{ 'a' * 10**9 }}",
            "{{ [1] * 10**9 }}",
            "{{ 2 ** 1000000 }}",
            "{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
            "{{ '%999999999s' % 'x' }}",
            "{{ '%s' | format('x') | center(10**9) }}",
            "{{ 'x'.ljust(10**9) }}",
            "{{ '{:>999999999}'.format(1) }}",
            "{% set s = 'a' * 1000 %}{{ s.replace('a', s * 1000) }}",
            "{% set s = 'a' * 1000000 %}{{ [s, s, s, s, s] }}",
            "{% set s = 'a' * 1000000 %}{{ [s, s, s] | join }}",
            "{{ range(100000) | batch(10**9, 0) | list }}",
            "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
            "{% macro m() %}{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}{% endmacro %}{% set s = m() %}",
            "{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(1) }}",
            "{% for x in range(3) recursive %}{{ loop(range(100000)) }}{% endfor %}",
        ],
    )
    async def test_runaway_template_is_stopped_with_422(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "UNPROCESSABLE_ENTITY"
        assert detail_codes(response) == {("RENDER_LIMIT_EXCEEDED", TITLE)}

    async def test_content_blocks_that_use_each_other_forever_are_stopped(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_resources(
            app, workspace, blocks={"a": "A{{ ContentBlock['b'] }}", "b": "B{{ ContentBlock['a'] }}"}
        )
        response = await render_title(client, workspace, "{{ ContentBlock['a'] }}")
        assert response.status_code == 422
        assert detail_codes(response) == {("RENDER_LIMIT_EXCEEDED", TITLE)}

    async def test_the_budget_is_shared_by_all_fields(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Each field alone is within the limits; together they are not.
        loop = "{% for i in range(90000) %}{% endfor %}"
        body = push_body(
            {"android": {"title": loop, "message": loop}, "ios": {"title": loop}, "web": {"title": loop}}
        )
        response = await preview(client, workspace, body)
        assert response.status_code == 422
        assert [code for code, _ in detail_codes(response)] == ["RENDER_LIMIT_EXCEEDED"]

    async def test_work_within_the_limits_renders(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        template = "{% for i in range(1000) %}{{ i % 10 }}{% endfor %}"
        response = await render_title(client, workspace, template)
        assert response.status_code == 200
        assert (
            len(
                response.json()["data"]["personalized_content"]["content"]["push"]["android"][
                    "basic_details"
                ]["title"]
            )
            == 1000
        )

    async def test_work_past_the_event_loops_small_budget_renders_in_full(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # Far more steps than a render on the event loop may take (`personalize.INLINE_STEPS`): it is
        # rendered again on a worker thread, within the whole budget, and nothing of it is lost.
        template = "{% for i in range(20000) %}{{ i % 10 }}{% endfor %}"
        response = await render_title(client, workspace, template)
        assert response.status_code == 200, response.text
        title = response.json()["data"]["personalized_content"]["content"]["push"]["android"]["basic_details"]
        assert title["title"] == "0123456789" * 2000

    @pytest.mark.parametrize("times", [200_001, 1_000_000])
    async def test_a_repeated_string_counts_its_real_size(
        self, client: httpx.AsyncClient, workspace: Tenant, times: int
    ) -> None:
        # A value may be a million characters (`Limits.value_size`), repeated or not.
        response = await preview(client, workspace, email_body({"subject": f"{{{{ 'x' * {times} }}}}"}))
        assert response.status_code == 200, response.text[:500]
        subject = response.json()["data"]["personalized_content"]["content"]["email"]["subject"]
        assert subject == "x" * times

    async def test_a_repeated_string_past_the_value_size_is_stopped(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await preview(client, workspace, email_body({"subject": "{{ 'xy' * 500_001 }}"}))
        assert response.status_code == 422
        assert detail_codes(response) == {("RENDER_LIMIT_EXCEEDED", "campaign_content.content.email.subject")}
        assert "1000000 characters" in response.text
