"""Personalization syntax at publish, and spec rule 2's change of template type on update."""

from __future__ import annotations

from typing import Any

import pytest

from herald.campaigns.schemas.campaign import CampaignDocument
from herald.campaigns.schemas.common import Channel
from herald.campaigns.validation import (
    Stage,
    balanced_delimiters,
    parse_create,
    parse_update,
    validate_campaign,
)

from .payloads import (
    ALL_FEATURES,
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_MULTI_LOCALE_AB,
    PUSH_ONE_TIME,
    Case,
    check,
    codes,
    fails,
    passes,
    problems,
    variant,
)

C = Stage.DRAFT_CREATE
EMAIL = "campaign_content.content.email"
ANDROID = "campaign_content.content.push.android"
KEYED = "campaign_content.content"
_CAROUSEL = [{"image_url": "https://cdn.example.com/1.png"}, {"image_url": "https://cdn.example.com/2.png"}]
_TIMER = {"duration": 3600, "expiry_action": "DISMISS"}


# ---- spec rule 2: a change of template type needs the new type's fields in the same request -----


def _document(raw: dict[str, Any]) -> CampaignDocument:
    body, found = parse_create(raw)
    assert body is not None, found
    return CampaignDocument.from_create(body)


def _patch(stored: CampaignDocument, android: dict[str, Any]) -> list[tuple[str, str]]:
    content = variant(PUSH_ONE_TIME["campaign_content"], {"content.push.android": android})
    update, found = parse_update({"campaign_content": content}, stored_channel=Channel.PUSH)
    assert update is not None, found
    merged = stored.merged(update)
    found = validate_campaign(
        merged, Stage.DRAFT_PATCH, ALL_FEATURES, frozenset({"campaign_content"}), previous=stored
    )
    return sorted((p.code, p.target) for p in found)


_BASIC_TITLE_ONLY = {"template_type": "BASIC", "basic_details": {"title": "Hi"}}


@pytest.mark.parametrize(
    ("android", "expected"),
    [
        (
            {"template_type": "TIMER", "basic_details": {"title": "t", "message": "m"}},
            [("REQUIRED_FIELD_MISSING", f"{ANDROID}.timer")],
        ),
        ({"template_type": "TIMER", "basic_details": {"title": "t", "message": "m"}, "timer": _TIMER}, []),
        (
            {"template_type": "SIMPLE_IMAGE_CAROUSEL", "carousel_content": _CAROUSEL},
            [
                ("REQUIRED_FIELD_MISSING", f"{ANDROID}.basic_details.message"),
                ("REQUIRED_FIELD_MISSING", f"{ANDROID}.basic_details.title"),
            ],
        ),
        ({"template_type": "Custom", "custom_template_id": "ct_1"}, []),
        # same type: not a change, a draft may stay partial
        (_BASIC_TITLE_ONLY, []),
    ],
)
def test_template_type_change_needs_new_fields(
    android: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    stored = _document(PUSH_ONE_TIME)
    assert _patch(stored, android) == expected


def test_first_template_type_is_not_a_change() -> None:
    stored = _document({k: v for k, v in PUSH_ONE_TIME.items() if k != "campaign_content"})
    assert _patch(stored, {"template_type": "TIMER"}) == []


# ---- personalization syntax (publish) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("Hello", True),
        ("Hi {{UserAttribute['first_name']}}", True),
        ("{{ event.product_name }} and {{ event.price }}", True),
        ("{% if x %}a{% endif %}", True),
        (".wrap{width:100%} p{margin:0}", True),  # CSS: stray closers are text
        ("}} is just text", True),
        ("Hi {{UserAttribute['first_name']}", False),
        ("Hi {{ name", False),
        ("{% if x }", False),
        ("{{ }}", False),
        ("{{ a {{ b }} }}", False),
    ],
)
def test_balanced_delimiters(text: str, ok: bool) -> None:
    assert (balanced_delimiters(text) is None) is ok


@pytest.mark.parametrize(
    "case",
    [
        fails(
            "unclosed-title",
            PUSH_ONE_TIME,
            ("INVALID_TEMPLATE", f"{ANDROID}.basic_details.title"),
            {f"{ANDROID}.basic_details.title": "Hi {{UserAttribute['first_name']"},
        ),
        fails(
            "unclosed-button",
            PUSH_ONE_TIME,
            ("INVALID_TEMPLATE", f"{ANDROID}.buttons.0.title"),
            {f"{ANDROID}.buttons.0.title": "Go {{ x"},
        ),
        fails(
            "unclosed-subject",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("INVALID_TEMPLATE", f"{EMAIL}.subject"),
            {f"{EMAIL}.subject": "{% if vip }"},
        ),
        fails(
            "unclosed-unknown-key",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("INVALID_TEMPLATE", f"{EMAIL}.amp_content"),
            {f"{EMAIL}.amp_content": "{{ x"},
        ),
        fails(
            "unclosed-keyed",
            PUSH_MULTI_LOCALE_AB,
            ("INVALID_TEMPLATE", f"{KEYED}.fr-FR.variation_2.push.android.basic_details.message"),
            {f"{KEYED}.fr-FR.variation_2.push.android.basic_details.message": "{{"},
        ),
        fails(
            "unclosed-dynamic-filter-value",
            EMAIL_EVENT_TRIGGERED,
            ("INVALID_TEMPLATE", "trigger_condition.included_filters.filters.0.attributes.filters.0.value"),
            {
                "trigger_condition.included_filters.filters.0.attributes.filters.0.value": "{{ UserAttribute['x'] "
            },
        ),
        passes(
            "static-filter-value-is-not-parsed",
            EMAIL_EVENT_TRIGGERED,
            {
                "trigger_condition.included_filters.filters.0.attributes.filters.0.value": "{{ not a template",
                "trigger_condition.included_filters.filters.0.attributes.filters.0.is_dynamic_value": False,
            },
        ),
        passes(
            "draft-may-hold-broken-text", PUSH_ONE_TIME, {f"{ANDROID}.basic_details.title": "{{"}, stage=C
        ),
    ],
)
def test_personalization_must_parse(case: Case) -> None:
    check(case)


def test_plugged_in_template_checker() -> None:
    def no_events(text: str) -> str | None:
        return "event attributes are not allowed here" if "event." in text else None

    found = problems(EMAIL_EVENT_TRIGGERED, check_template=no_events)
    assert codes(found) == {("INVALID_TEMPLATE", f"{EMAIL}.subject")}
    assert found[0].message == "event attributes are not allowed here"
    assert problems(PUSH_ONE_TIME, check_template=no_events) == []


def test_template_change_is_seen_across_content_forms() -> None:
    stored = _document(PUSH_ONE_TIME)  # flat content: default / variation_1
    keyed = {
        "default": {
            "variation_1": {
                "push": {
                    "android": {"template_type": "TIMER", "basic_details": {"title": "t", "message": "m"}}
                }
            }
        }
    }
    update, found = parse_update({"campaign_content": {"content": keyed}}, stored_channel=Channel.PUSH)
    assert update is not None, found
    found = validate_campaign(
        stored.merged(update),
        Stage.DRAFT_PATCH,
        ALL_FEATURES,
        frozenset({"campaign_content"}),
        previous=stored,
    )
    assert codes(found) == {
        ("REQUIRED_FIELD_MISSING", "campaign_content.content.default.variation_1.push.android.timer")
    }
