"""C9 `POST /v5/personalization/preview` through the HTTP API: forms, fields, users, missing values."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from herald.audience.models import User
from herald.campaigns.models import Campaign
from herald.workspaces.scopes import Scope
from tests.factories import Tenant, add_key, is_replay_of
from tests.personalization.helpers import (
    PREVIEW,
    add_resources,
    add_user,
    by_id,
    detail_codes,
    email_body,
    preview,
    push_body,
    render_title,
    sms_body,
    title_of,
)

TITLE = "campaign_content.content.push.android.basic_details.title"
BESTSELLERS = [{"title": "Hat", "price": 10}, {"title": "Scarf", "price": 25}]


class TestExpressionForms:
    @pytest.mark.parametrize(
        ("template", "expected"),
        [
            ("Hi {{UserAttribute['first_name']}}", "Hi Ana"),
            ("Hi {{ user.first_name }}", "Hi Ana"),
            ("{{ user.city }} / {{ UserAttribute['city'] }}", "Lyon / Lyon"),
            ("{{ UserAttribute['points'] + 5 }} points", "125 points"),
            ("{{ user.customer_id }} {{ user.email }}", "u1 ana@example.com"),
            ("{{ user.first_name | upper }}", "ANA"),
            ("{{ user.interests | join(' & ') }}", "shoes & hats"),
            ("{% if user.vip %}VIP{% else %}member{% endif %}", "VIP"),
            ("Hi {{ user.nickname | default('there') }}", "Hi there"),
            ("Hi {{ UserAttribute['nickname'] | default('there') }}", "Hi there"),
            ("{{ '%.1f' | format(user.points / 100) }}", "1.2"),
        ],
    )
    async def test_user_attribute_forms(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str, expected: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 200, response.text
        assert title_of(response) == expected
        assert response.json()["data"]["missing"] == []

    async def test_event_attribute_form(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await render_title(
            client,
            workspace,
            "{{ event.product_name }} for {{ event['price'] }}",
            event_attributes={"product_name": "Shoe", "price": "49"},
        )
        assert response.status_code == 200, response.text
        assert title_of(response) == "Shoe for 49"

    async def test_content_block_form(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_resources(app, workspace, blocks={"greeting": "Dear {{ user.first_name }}"})
        response = await render_title(client, workspace, "{{ ContentBlock['greeting'] }}, hello")
        assert title_of(response) == "Dear Ana, hello"

    async def test_product_set_form(self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant) -> None:
        await add_resources(app, workspace, product_sets={"bestsellers": BESTSELLERS})
        template = (
            "{{ ProductSet['bestsellers'][0].title }}: "
            "{% for item in ProductSet['bestsellers'] %}{{ item.title }}={{ item.price }}"
            "{% if not loop.last %}, {% endif %}{% endfor %}"
        )
        response = await render_title(client, workspace, template)
        assert title_of(response) == "Hat: Hat=10, Scarf=25"

    async def test_text_without_expressions_is_unchanged(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        text = "50% off {width:100%} }} %} — today\n"
        response = await render_title(client, workspace, text)
        assert title_of(response) == text


class TestEveryField:
    async def test_push_every_platform_and_every_text_is_resolved(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        details = {
            "title": "T {{ user.first_name }}",
            "message": "M {{ user.city }}",
            "summary": "S {{ user.points }}",
            "subtitle": "Sub {{ user.last_name }}",
            "image_url": "https://cdn.example.com/{{ user.customer_id }}.png",
            "key_value_pairs": [{"key": "city", "value": "{{ user.city }}"}],
            "custom_extra": "X {{ user.first_name }}",
        }
        body = push_body({"android": details, "ios": details, "web": details})
        body["campaign_content"]["content"]["push"]["android"]["buttons"] = [
            {"title": "Go {{ user.first_name }}", "action": "deeplink"}
        ]
        response = await preview(client, workspace, body)
        assert response.status_code == 200, response.text
        push = response.json()["data"]["personalized_content"]["content"]["push"]
        expected = {
            "title": "T Ana",
            "message": "M Lyon",
            "summary": "S 120",
            "subtitle": "Sub Lima",
            "image_url": "https://cdn.example.com/u1.png",
            "key_value_pairs": [{"key": "city", "value": "Lyon"}],
            "custom_extra": "X Ana",
        }
        for platform in ("android", "ios", "web"):
            assert push[platform]["basic_details"] == expected
            assert push[platform]["template_type"] == "BASIC"
        assert push["android"]["buttons"] == [{"title": "Go Ana", "action": "deeplink"}]

    async def test_email_subject_preview_text_and_html_are_resolved(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        email = {
            "subject": "Hello {{ user.first_name }}",
            "preview_text": "From {{ user.city }}",
            "sender_name": "Shop for {{ user.first_name }}",
            "from_address": "shop@example.com",
            "html_content": "<p>Hi {{ UserAttribute['first_name'] }}, {{ user.points }} points</p>",
        }
        response = await preview(client, workspace, email_body(email))
        assert response.status_code == 200, response.text
        assert response.json()["data"]["personalized_content"]["content"]["email"] == {
            "subject": "Hello Ana",
            "preview_text": "From Lyon",
            "sender_name": "Shop for Ana",
            "from_address": "shop@example.com",
            "html_content": "<p>Hi Ana, 120 points</p>",
        }

    async def test_html_body_escapes_values_and_other_fields_do_not(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_user(app, workspace, "u2", first_name="Tom & <Jerry>")
        email = {"subject": "Hi {{ user.first_name }}", "html_content": "<b>{{ user.first_name }}</b>"}
        response = await preview(client, workspace, email_body(email, user="u2"))
        email_out = response.json()["data"]["personalized_content"]["content"]["email"]
        assert email_out["subject"] == "Hi Tom & <Jerry>"
        assert email_out["html_content"] == "<b>Tom &amp; &lt;Jerry&gt;</b>"

    async def test_sms_message_is_resolved(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await preview(
            client,
            workspace,
            sms_body("Hi {{ user.first_name }}, code {{ event.code }}", event_attributes={"code": "1234"}),
        )
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert data["personalized_content"] == {"content": {"sms": {"message": "Hi Ana, code 1234"}}}

    async def test_every_locale_and_variation_is_resolved(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        def variation(greeting: str) -> dict[str, Any]:
            return {
                "push": {"android": {"basic_details": {"title": f"{greeting} {{{{ user.first_name }}}}"}}}
            }

        content = {
            "locales": ["es-ES"],
            "variation_details": {"no_of_variations": 2},
            "content": {
                "default": {"variation_1": variation("Hi"), "variation_2": variation("Hey")},
                "es-ES": {"variation_1": variation("Hola"), "variation_2": variation("Buenas")},
            },
        }
        body = push_body({}, campaign_content=content)
        response = await preview(client, workspace, body)
        assert response.status_code == 200, response.text
        out = response.json()["data"]["personalized_content"]
        assert out["locales"] == ["es-ES"]
        assert out["variation_details"] == {"no_of_variations": 2}
        titles = {
            (locale, name): value["push"]["android"]["basic_details"]["title"]
            for locale, variations in out["content"].items()
            for name, value in variations.items()
        }
        assert titles == {
            ("default", "variation_1"): "Hi Ana",
            ("default", "variation_2"): "Hey Ana",
            ("es-ES", "variation_1"): "Hola Ana",
            ("es-ES", "variation_2"): "Buenas Ana",
        }


class TestMissing:
    async def test_missing_values_render_empty_and_are_listed_with_their_field(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_resources(app, workspace, product_sets={"bestsellers": [{"price": 3}]})
        body = push_body(
            {
                "android": {
                    "title": "Hi {{ UserAttribute['nickname'] }}!",
                    "message": "{{ user.age }}|{{ event.product }}|{{ ProductSet['bestsellers'][0].title }}",
                },
                "ios": {
                    "title": "{{ ContentBlock['nope'] }}{{ ContentApi['weather'].summary }}{{ unknown }}"
                },
            }
        )
        response = await preview(client, workspace, body)
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        push = data["personalized_content"]["content"]["push"]
        assert push["android"]["basic_details"] == {"title": "Hi !", "message": "||"}
        assert push["ios"]["basic_details"] == {"title": ""}
        android = "campaign_content.content.push.android.basic_details"
        ios = "campaign_content.content.push.ios.basic_details.title"
        assert data["missing"] == [
            {"field": f"{android}.title", "expression": "UserAttribute['nickname']"},
            {"field": f"{android}.message", "expression": "user.age"},
            {"field": f"{android}.message", "expression": "event.product"},
            {"field": f"{android}.message", "expression": "ProductSet['bestsellers'][0].title"},
            {"field": ios, "expression": "ContentBlock['nope']"},
            {"field": ios, "expression": "ContentApi['weather']"},
            {"field": ios, "expression": "unknown"},
        ]

    async def test_a_default_or_a_test_is_not_a_missing_value(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        template = "{{ user.nickname | default('friend') }}{% if user.age %}{{ user.age }}{% endif %}"
        response = await render_title(client, workspace, template)
        assert title_of(response) == "friend"
        assert response.json()["data"]["missing"] == []

    async def test_operations_on_a_missing_value_render_empty(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await render_title(client, workspace, "[{{ user.age + 1 }}][{{ user.nick.title() }}]")
        assert title_of(response) == "[][]"
        assert [item["expression"] for item in response.json()["data"]["missing"]] == [
            "user.age",
            "user.nick",
        ]

    async def test_the_same_hole_is_listed_once_per_field(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await render_title(client, workspace, "{{ user.age }}{{ user.age }}")
        assert response.json()["data"]["missing"] == [{"field": TITLE, "expression": "user.age"}]


class TestJsonValues:
    """Values are printed as JSON spells them (object keys sorted, whatever the database kept), in
    every field: a preview shows what a send sends."""

    async def test_null_renders_empty_and_is_missing_and_other_values_are_spelled_as_json(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_user(app, workspace, "u2", profile={"nick": None, "tags": [1, None], "seen": False})
        await add_resources(
            app, workspace, product_sets={"nulls": [{"title": None, "price": 1.0, "flag": True}]}
        )
        item = "ProductSet['nulls'][0]"
        template = (
            f"{{{{ {item}.title }}}}|{{{{ {item}.price }}}}|{{{{ {item}.flag }}}}|{{{{ {item} }}}}|"
            "{{ user.profile.nick }}|{{ user.profile.seen }}|{{ user.profile.tags }}|"
            "{{ user.points > 100 }}"
        )
        response = await render_title(client, workspace, template, user="u2")
        assert response.status_code == 200, response.text
        assert title_of(response) == (
            '|1.0|true|{"flag":true,"price":1.0,"title":null}||false|[1,null]|false'
        )
        assert response.json()["data"]["missing"] == [
            {"field": TITLE, "expression": "ProductSet['nulls'][0].title"},
            {"field": TITLE, "expression": "user.profile.nick"},
        ]

    async def test_a_null_is_replaced_by_default_and_is_not_defined(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_user(app, workspace, "u2", profile={"nick": None})
        template = (
            "{{ user.profile.nick | default('friend') }} "
            "{{ user.profile.nick is defined }} {{ user.profile.nick is none }}"
        )
        response = await render_title(client, workspace, template, user="u2")
        assert title_of(response) == "friend false true"
        assert response.json()["data"]["missing"] == []

    async def test_an_html_body_escapes_a_printed_object(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await preview(
            client, workspace, email_body({"subject": "s", "html_content": "<p>{{ user.interests }}</p>"})
        )
        html = response.json()["data"]["personalized_content"]["content"]["email"]["html_content"]
        assert html == "<p>[&#34;shoes&#34;,&#34;hats&#34;]</p>"


class TestEventAttributes:
    async def test_values_must_be_strings(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await render_title(
            client, workspace, "{{ event.n }}", event_attributes={"n": 5, "ok": "x"}
        )
        assert response.status_code == 400
        assert detail_codes(response) == {("INVALID_TYPE", "event_attributes.n")}

    async def test_without_event_attributes_event_values_are_missing(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await render_title(client, workspace, "[{{ event.product }}]")
        assert title_of(response) == "[]"
        assert response.json()["data"]["missing"] == [{"field": TITLE, "expression": "event.product"}]


class TestUserIdentification:
    @pytest.mark.parametrize(
        ("kind", "value"),
        [
            ("USER_ATTRIBUTE_UNIQUE_ID", "u1"),
            ("EMAIL", "ana@example.com"),
            ("SVC_GAID", "gaid-1"),
            ("PUSH_ID", "push-1"),
        ],
    )
    async def test_each_identification_type_finds_the_user(
        self, client: httpx.AsyncClient, workspace: Tenant, kind: str, value: str
    ) -> None:
        body = push_body({"android": {"title": "{{ user.first_name }}"}})
        body["user_identification"] = by_id(value, kind)
        response = await preview(client, workspace, body)
        assert response.status_code == 200, response.text
        assert title_of(response) == "Ana"

    @pytest.mark.parametrize("token", ["g3tok", "g3ios"])
    async def test_a_push_id_finds_the_user_by_any_of_its_tokens(
        self, client: httpx.AsyncClient, workspace: Tenant, token: str
    ) -> None:
        # Ingested once per device, the user keeps a token per platform but one push_id (the last
        # sent): the Android token, which live campaigns deliver to, found no user (404).
        for attributes in (
            {"first_name": "Gil", "push_id": "g3tok", "platform": "ANDROID"},
            {"push_id": "g3ios", "platform": "IOS"},
        ):
            body = {"type": "customer", "customer_id": "g3", "attributes": attributes}
            ingested = await client.post(
                f"/v1/customer/{workspace.workspace_id}", json=body, headers=workspace.headers()
            )
            assert ingested.status_code == 200, ingested.text
        body = push_body({"android": {"title": "{{ user.first_name }}"}})
        body["user_identification"] = by_id(token, "PUSH_ID")
        response = await preview(client, workspace, body)
        assert response.status_code == 200, response.text
        assert title_of(response) == "Gil"

    @pytest.mark.parametrize("kind", ["USER_ATTRIBUTE_UNIQUE_ID", "EMAIL", "SVC_GAID", "PUSH_ID"])
    async def test_unknown_user_is_404(self, client: httpx.AsyncClient, workspace: Tenant, kind: str) -> None:
        body = push_body({"android": {"title": "x"}})
        body["user_identification"] = by_id("nobody", kind)
        response = await preview(client, workspace, body)
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "NOT_FOUND"
        assert error["target"] == "user_identification"
        assert error["request_id"] == body["request_id"]

    async def test_unknown_identification_type_is_400(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body({"android": {"title": "x"}})
        body["user_identification"] = by_id("u1", "MOBILE")
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert detail_codes(response) == {("INVALID_ENUM_VALUE", "user_identification.type")}


class TestRequestValidation:
    async def test_every_required_field_is_reported_at_once(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await preview(client, workspace, {})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "VALIDATION_FAILED"
        assert detail_codes(response) == {
            ("REQUIRED_FIELD_MISSING", field)
            for field in ("request_id", "channel", "user_identification", "campaign_content")
        }

    async def test_a_request_without_a_body_is_400_bad_request(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        # As every JSON route answers it; it was a VALIDATION_FAILED naming an internal "body".
        headers = {**workspace.headers(campaigns=True), "Content-Type": "application/json"}
        response = await client.post("/v5/personalization/preview", content=b"", headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["message"]) == ("BAD_REQUEST", "A JSON body is required.")
        assert "details" not in error or not error["details"]

    @pytest.mark.parametrize("channel", ["WHATSAPP", "push", 3])
    async def test_unknown_channel_is_400(
        self, client: httpx.AsyncClient, workspace: Tenant, channel: object
    ) -> None:
        body = push_body({"android": {"title": "x"}}, channel=channel)
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert ("INVALID_ENUM_VALUE", "channel") in detail_codes(response)

    async def test_a_draft_id_instead_of_inline_content_is_400(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body({"android": {"title": "x"}}, draft_id="0123456789abcdef01234567")
        del body["campaign_content"]
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert detail_codes(response) == {
            ("UNKNOWN_FIELD", "draft_id"),
            ("REQUIRED_FIELD_MISSING", "campaign_content"),
        }

    async def test_campaign_content_given_as_an_id_is_400(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body({}, campaign_content="0123456789abcdef01234567")
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert {code for code, target in detail_codes(response) if target == "campaign_content"} == {
            "INVALID_TYPE"
        }

    async def test_syntax_error_is_400_invalid_template_at_the_exact_field(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await render_title(client, workspace, "Hi {{ user.first_name")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        assert error["target"] == TITLE
        assert detail_codes(response) == {("INVALID_TEMPLATE", TITLE)}

    @pytest.mark.parametrize(
        "template",
        [
            "{{ user.first_name",
            "{% if user.vip %}yes",
            "{{ user.first_name | no_such_filter }}",
            "{% include 'footer.html' %}",
            "{% extends 'base' %}",
            "{{ }}",
        ],
    )
    async def test_each_kind_of_invalid_template_is_refused(
        self, client: httpx.AsyncClient, workspace: Tenant, template: str
    ) -> None:
        response = await render_title(client, workspace, template)
        assert response.status_code == 400
        assert detail_codes(response) == {("INVALID_TEMPLATE", TITLE)}

    async def test_all_problems_are_collected_in_one_400(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        email = {"subject": "{{ oops", "html_content": "<p>{% for %}</p>", "preview_text": 5}
        body = email_body(email)
        body["user_identification"] = {"type": "EMAIL"}
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        root = "campaign_content.content.email"
        assert detail_codes(response) == {
            ("INVALID_TEMPLATE", f"{root}.subject"),
            ("INVALID_TEMPLATE", f"{root}.html_content"),
            ("INVALID_TYPE", f"{root}.preview_text"),
            ("REQUIRED_FIELD_MISSING", "user_identification.value"),
        }

    async def test_template_problems_come_before_an_unknown_user(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await render_title(client, workspace, "{{ x", user="nobody")
        assert response.status_code == 400

    async def test_custom_template_and_html_content_are_mutually_exclusive(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        response = await preview(
            client, workspace, email_body({"custom_template_id": "t", "html_content": "x"})
        )
        assert response.status_code == 400
        assert ("MUTUALLY_EXCLUSIVE", "campaign_content.content.email.html_content") in detail_codes(response)

    @pytest.mark.parametrize(
        ("channel", "content", "own", "other"),
        [
            ("SMS", {"email": {"subject": "x"}}, "sms", "email"),
            ("SMS", {"push": {"android": {}}}, "sms", "push"),
            ("EMAIL", {"sms": {"message": "x"}}, "email", "sms"),
            ("PUSH", {"sms": {"message": "x"}}, "push", "sms"),
        ],
    )
    async def test_another_channels_content_is_missing_content_and_an_unknown_field(
        self,
        client: httpx.AsyncClient,
        workspace: Tenant,
        channel: str,
        content: dict[str, Any],
        own: str,
        other: str,
    ) -> None:
        body = {**sms_body("x"), "channel": channel, "campaign_content": {"content": content}}
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert response.json()["error"]["details"] == [
            {
                "code": "REQUIRED_FIELD_MISSING",
                "target": f"campaign_content.content.{own}",
                "message": f"'{own}' is required.",
            },
            {
                "code": "UNKNOWN_FIELD",
                "target": f"campaign_content.content.{other}",
                "message": f"'{other}' is not a recognised field here.",
            },
        ]

    async def test_a_value_that_should_be_an_object_is_reported_without_internal_names(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = {**sms_body("x"), "user_identification": "u1"}
        body["campaign_content"] = {"content": {"default": {"variation_1": {"sms": "x"}}}}
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert response.json()["error"]["details"] == [
            {"code": "INVALID_TYPE", "target": target, "message": "Expected an object."}
            for target in ("user_identification", "campaign_content.content.default.variation_1.sms")
        ]

    async def test_sms_needs_a_message(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        body = sms_body("x")
        body["campaign_content"] = {"content": {"sms": {}}}
        response = await preview(client, workspace, body)
        assert response.status_code == 400
        assert detail_codes(response) == {("REQUIRED_FIELD_MISSING", "campaign_content.content.sms.message")}

    async def test_unknown_top_level_field_is_400(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        response = await render_title(client, workspace, "x", basic_details={})
        assert response.status_code == 400
        assert detail_codes(response) == {("UNKNOWN_FIELD", "basic_details")}


class TestCustomTemplates:
    async def test_email_template_is_rendered_into_the_content(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = {"subject": "Default {{ user.city }}", "html_content": "<h1>{{ user.first_name }}</h1>"}
        await add_resources(app, workspace, templates={"welcome": ("EMAIL", body)})
        email = {"custom_template_id": "welcome", "subject": "For {{ user.first_name }}"}
        response = await preview(client, workspace, email_body(email))
        assert response.status_code == 200, response.text
        assert response.json()["data"]["personalized_content"]["content"]["email"] == {
            "custom_template_id": "welcome",
            "subject": "For Ana",  # the content's own subject wins over the template's
            "html_content": "<h1>Ana</h1>",
        }

    async def test_push_template_fills_the_platform_object(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        template = {"basic_details": {"title": "{{ user.first_name }}!", "message": "{{ user.age }}"}}
        await add_resources(app, workspace, templates={"promo": ("PUSH", template)})
        body = push_body({})
        body["campaign_content"]["content"]["push"] = {
            "android": {"template_type": "Custom", "custom_template_id": "promo"}
        }
        response = await preview(client, workspace, body)
        assert response.status_code == 200, response.text
        assert title_of(response) == "Ana!"
        assert response.json()["data"]["missing"] == [
            {"field": "campaign_content.content.push.android.basic_details.message", "expression": "user.age"}
        ]

    async def test_a_version_can_be_pinned(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        await add_resources(app, workspace, templates={"t": ("EMAIL", {"html_content": "one"})})
        await add_resources(app, workspace, templates={"t": ("EMAIL", {"html_content": "two"})})
        for version, expected in ((None, "two"), (1, "one"), ("2", "two")):
            email: dict[str, Any] = {"custom_template_id": "t"}
            if version is not None:
                email["custom_template_version"] = version
            response = await preview(client, workspace, email_body(email))
            assert (
                response.json()["data"]["personalized_content"]["content"]["email"]["html_content"]
                == expected
            )

    @pytest.mark.parametrize(
        "email",
        [
            {"custom_template_id": "nope"},
            {"custom_template_id": "t", "custom_template_version": 9},
            {"custom_template_id": "push_one"},
        ],
    )
    async def test_unknown_template_version_or_channel_is_400(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, email: dict[str, Any]
    ) -> None:
        await add_resources(
            app,
            workspace,
            templates={
                "t": ("EMAIL", {"html_content": "x"}),
                "push_one": ("PUSH", {"basic_details": {"title": "x"}}),
            },
        )
        response = await preview(client, workspace, email_body(email))
        assert response.status_code == 400
        assert detail_codes(response) == {
            ("INVALID_TEMPLATE_ID", "campaign_content.content.email.custom_template_id")
        }


class TestSurface:
    async def test_envelope(self, client: httpx.AsyncClient, workspace: Tenant) -> None:
        request_id = str(uuid.uuid4())
        response = await client.post(
            PREVIEW,
            json=push_body({"android": {"title": "x"}}),
            headers={**workspace.headers(campaigns=True), "X-SVC-Request-Id": request_id},
        )
        body = response.json()
        assert body["response_id"] == f"resp_{request_id}"
        assert body["type"] == "personalization"
        assert set(body["data"]) == {"personalized_content", "missing"}

    async def test_without_credentials_is_401_and_without_app_key_is_401(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body({"android": {"title": "x"}})
        assert (await client.post(PREVIEW, json=body)).status_code == 401
        assert (await client.post(PREVIEW, json=body, headers=workspace.headers())).status_code == 401

    async def test_campaigns_view_scope_is_enough_and_offers_scopes_are_not(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body({"android": {"title": "{{ user.first_name }}"}})
        viewer = await add_key(app, workspace, [Scope.CAMPAIGNS_VIEW])
        offers_only = await add_key(app, workspace, [Scope.OFFERS_READ, Scope.OFFERS_WRITE])
        assert (await preview(client, viewer, body)).status_code == 200
        refused = await preview(client, offers_only, body)
        assert refused.status_code == 403
        assert refused.json()["code"] == "ER007"

    async def test_an_idempotency_key_is_honoured_when_sent(
        self, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        body = push_body({"android": {"title": "{{ user.first_name }}"}})
        headers = workspace.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
        first = await client.post(PREVIEW, json=body, headers=headers)
        again = await client.post(PREVIEW, json=body, headers=headers)
        assert first.status_code == again.status_code == 200
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert is_replay_of(again, first)

    async def test_nothing_is_stored(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
    ) -> None:
        async def counts() -> tuple[int, int]:
            async with app.state.herald.database.reader() as session:
                users = await session.scalar(
                    select(func.count()).select_from(User).where(User.workspace_id == workspace.workspace_id)
                )
                campaigns = await session.scalar(
                    select(func.count())
                    .select_from(Campaign)
                    .where(Campaign.workspace_id == workspace.workspace_id)
                )
            return int(users or 0), int(campaigns or 0)

        before = await counts()
        response = await render_title(client, workspace, "{{ user.first_name }}")
        assert response.status_code == 200
        assert await counts() == before == (1, 0)
