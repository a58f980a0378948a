"""Pure C8 rules: reading the body, which messages a test sends, and whether each can be sent."""

from __future__ import annotations

from typing import Any

import pytest

from herald.campaigns.schemas.basic_details import PushBasicDetails
from herald.campaigns.schemas.common import Channel, Platform
from herald.campaigns.schemas.content import EmailCampaignContent, PushCampaignContent
from herald.delivery.rendering import message_at, pruned_content
from herald.delivery.testsend_plan import narrow, readiness_problems, slot_messages
from herald.delivery.testsend_request import channel_problems, parse_test_body, variation_key

META = {"identifier": "EMAIL", "identifier_values": ["a@example.com"]}


def _targets(problems: list[Any]) -> set[tuple[str, str]]:
    return {(problem.code, problem.target) for problem in problems}


class TestBody:
    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ([], {("INVALID_TYPE", "")}),
            ({}, {("REQUIRED_FIELD_MISSING", "test_campaign_meta")}),
            (
                {"test_campaign_meta": {**META, "identifier_values": ["x"] * 11}, "draft_id": "d"},
                {("OUT_OF_RANGE", "test_campaign_meta.identifier_values")},
            ),
            (
                {"test_campaign_meta": {**META, "identifier_values": [""]}, "draft_id": "d"},
                {("OUT_OF_RANGE", "test_campaign_meta.identifier_values.0")},
            ),
            (
                {"test_campaign_meta": {**META, "platform": "BLACKBERRY"}, "draft_id": "d"},
                {("INVALID_ENUM_VALUE", "test_campaign_meta.platform")},
            ),
            (
                {"test_campaign_meta": META, "draft_id": "d", "campaign_content": {}},
                {("MUTUALLY_EXCLUSIVE", "campaign_content")},
            ),
            (
                {"test_campaign_meta": META, "channel": "SMS", "campaign_content": {}},
                {("INVALID_ENUM_VALUE", "channel")},
            ),
            (
                {
                    "test_campaign_meta": META,
                    "channel": "EMAIL",
                    "campaign_content": {"content": {"email": {}}},
                },
                {("REQUIRED_FIELD_MISSING", "connector")},
            ),
            (
                {
                    "test_campaign_meta": META,
                    "channel": "EMAIL",
                    "campaign_content": {
                        "content": {"email": {"html_content": "x", "custom_template_id": "t"}}
                    },
                    "connector": {"connector_type": "SMTP", "connector_name": "m"},
                },
                {
                    ("MUTUALLY_EXCLUSIVE", "campaign_content.content.email.html_content"),
                    ("INVALID_ENUM_VALUE", "connector.connector_type"),
                },
            ),
            (
                {"test_campaign_meta": META, "draft_id": "d", "personalization_details": {"users": {}}},
                {("UNKNOWN_FIELD", "personalization_details.users")},
            ),
        ],
    )
    def test_problems(self, body: Any, expected: set[tuple[str, str]]) -> None:
        request, problems = parse_test_body(body)
        assert request is None
        assert _targets(problems) == expected

    def test_a_good_body(self) -> None:
        request, problems = parse_test_body(
            {
                "test_campaign_meta": {**META, "variation": 2},
                "draft_id": "d",
                "personalization_details": {
                    "user_attributes": {"first_name": "Zoe"},
                    "event_attributes": {"sku": "1"},
                },
            }
        )
        assert problems == []
        assert request is not None
        assert request.variation_key == "variation_2"
        assert request.user_overrides == {"first_name": "Zoe"}
        assert request.event_attributes == {"sku": "1"}

    @pytest.mark.parametrize(
        ("value", "key"),
        [
            (1, "variation_1"),
            ("variation_3", "variation_3"),
            (0, None),
            ("variation_0", None),
            ("3", None),
            ("v_1", None),
        ],
    )
    def test_variation_forms(self, value: str | int, key: str | None) -> None:
        assert variation_key(value) == key

    @pytest.mark.parametrize(
        ("meta", "channel", "expected"),
        [
            (
                {"identifier": "PUSH_ID", "identifier_values": ["t"]},
                Channel.EMAIL,
                {("INVALID_ENUM_VALUE", "test_campaign_meta.identifier")},
            ),
            (
                {"identifier": "ID", "identifier_values": ["u"]},
                Channel.PUSH,
                {("INVALID_ENUM_VALUE", "test_campaign_meta.identifier")},
            ),
            ({"identifier": "CUSTOM_SEGMENT", "identifier_values": ["s"]}, Channel.PUSH, set()),
            ({"identifier": "CUSTOM_SEGMENT", "identifier_values": ["s"]}, Channel.EMAIL, set()),
            (
                {"identifier": "EMAIL", "identifier_values": ["ok@example.com", "nope"]},
                Channel.EMAIL,
                {("INVALID_TYPE", "test_campaign_meta.identifier_values.1")},
            ),
            (
                {"identifier": "ID", "identifier_values": ["u"], "platform": "IOS"},
                Channel.EMAIL,
                {("INVALID_ENUM_VALUE", "test_campaign_meta.platform")},
            ),
        ],
    )
    def test_channel_rules(
        self, meta: dict[str, Any], channel: Channel, expected: set[tuple[str, str]]
    ) -> None:
        request, problems = parse_test_body({"test_campaign_meta": meta, "draft_id": "d"})
        assert request is not None, problems
        assert _targets(channel_problems(request, channel)) == expected


def _push(content: dict[str, Any], **extra: Any) -> PushCampaignContent:
    return PushCampaignContent.model_validate({"content": content, **extra})


BASIC = {"template_type": "BASIC", "basic_details": {"title": "t", "message": "m"}}


class TestSlots:
    def test_flat_content_is_default_variation_1(self) -> None:
        messages = slot_messages(_push({"push": {"android": BASIC, "web": BASIC}}), None)
        assert [(m.slot.key, m.path) for m in messages] == [
            ("ANDROID_default_variation_1", ("campaign_content", "content", "push", "android")),
            ("WEB_default_variation_1", ("campaign_content", "content", "push", "web")),
        ]

    def test_keyed_content_and_listed_platforms(self) -> None:
        content = {
            loc: {"variation_1": {"push": {"android": BASIC, "ios": BASIC}}} for loc in ("default", "fr-FR")
        }
        details = PushBasicDetails.model_validate({"platforms": ["IOS"]})
        messages = slot_messages(_push(content, locales=["fr-FR"]), details)
        assert [m.slot.key for m in messages] == ["IOS_default_variation_1", "IOS_fr-FR_variation_1"]

    def test_order_does_not_depend_on_stored_key_order(self) -> None:
        # PostgreSQL's JSONB returns object keys in its own order; the answer's order must not move.
        variations = {f"variation_{n}": {"push": {"ios": BASIC, "android": BASIC}} for n in (10, 2, 1)}
        content = {"it": variations, "fr": variations, "default": variations}
        details = {
            "distribution_type": "MANUAL",
            "no_of_variations": 10,
            "manual_distribution_percentage": {"variation_1": 100},
        }
        messages = slot_messages(_push(content, locales=["fr", "it"], variation_details=details), None)
        assert [m.slot.key for m in messages][:7] == [
            "ANDROID_default_variation_1",
            "IOS_default_variation_1",
            "ANDROID_default_variation_2",
            "IOS_default_variation_2",
            "ANDROID_default_variation_10",
            "IOS_default_variation_10",
            "ANDROID_fr_variation_1",
        ]

    def test_email(self) -> None:
        content = EmailCampaignContent.model_validate({"content": {"email": {"subject": "s"}}})
        [message] = slot_messages(content, None)
        assert message.slot.key == "EMAIL_default_variation_1"
        assert message.slot.channel is Channel.EMAIL

    def test_narrow(self) -> None:
        content = {
            loc: {v: {"push": {"android": BASIC, "ios": BASIC}} for v in ("variation_1", "variation_2")}
            for loc in ("default", "de")
        }
        messages = slot_messages(_push(content), None)
        kept, problems = narrow(messages, Platform.IOS, "de", "variation_2")
        assert problems == []
        assert [m.slot.key for m in kept] == ["IOS_de_variation_2"]
        kept, problems = narrow(messages, Platform.WEB, None, "variation_9")
        assert kept == []
        assert _targets(problems) == {
            ("INVALID_ENUM_VALUE", "test_campaign_meta.platform"),
            ("INVALID_ENUM_VALUE", "test_campaign_meta.variation"),
        }


class TestReadiness:
    @pytest.mark.parametrize(
        ("obj", "missing"),
        [
            (BASIC, set()),
            ({"basic_details": {"title": "t"}}, {"basic_details.message"}),  # untyped: BASIC
            ({"template_type": "Custom"}, {"custom_template_id"}),
            (
                {"template_type": "IMAGE_BANNER_WITH_TEXT", "basic_details": {"title": "t", "message": "m"}},
                {"basic_details.image_url"},
            ),
        ],
    )
    def test_push(self, obj: dict[str, Any], missing: set[str]) -> None:
        messages = slot_messages(_push({"push": {"android": obj}}), None)
        prefix = "campaign_content.content.push.android."
        assert {
            p.target.removeprefix(prefix) for p in readiness_problems(messages, None, None, {})
        } == missing

    @pytest.mark.parametrize(
        ("email", "senders", "expected"),
        [
            ({"subject": "s", "from_address": "a@shop.example", "html_content": "h"}, None, set()),
            (
                {"subject": "s", "from_address": "a@shop.example", "custom_template_id": "t"},
                ["@shop.example"],
                set(),
            ),
            (
                {"subject": "s", "from_address": "a@other.example", "html_content": "h"},
                ["@shop.example"],
                {("INVALID_ENUM_VALUE", "from_address")},
            ),
            (
                {"subject": "s", "from_address": "nope", "html_content": "h"},
                None,
                {("INVALID_TYPE", "from_address")},
            ),
            (
                {},
                None,
                {("REQUIRED_FIELD_MISSING", name) for name in ("subject", "from_address", "html_content")},
            ),
        ],
    )
    def test_email(
        self, email: dict[str, Any], senders: list[str] | None, expected: set[tuple[str, str]]
    ) -> None:
        content = EmailCampaignContent.model_validate({"content": {"email": email}})
        problems = readiness_problems(slot_messages(content, None), None, senders, {})
        prefix = "campaign_content.content.email."
        assert {(p.code, p.target.removeprefix(prefix)) for p in problems} == expected


def test_pruned_content_keeps_only_what_is_sent() -> None:
    paths = [
        (("campaign_content", "content", "de", "variation_2", "push", "ios"), {"x": 1}),
        (("campaign_content", "content", "de", "variation_2", "push", "android"), {"x": 2}),
    ]
    pruned = pruned_content(paths)
    assert pruned == {"content": {"de": {"variation_2": {"push": {"ios": {"x": 1}, "android": {"x": 2}}}}}}
    assert message_at(pruned, paths[1][0]) == {"x": 2}
