"""Rules of campaign_content: spec rules 1-3, keyed content, variations, publish completeness."""

from __future__ import annotations

from typing import Any

import pytest

from herald.campaigns.schemas.campaign import CampaignDocument
from herald.campaigns.schemas.common import Channel, DeliveryType
from herald.campaigns.validation import (
    Stage,
    balanced_delimiters,
    parse_create,
    parse_update,
    validate_campaign,
)

from .payloads import (
    ALL_FEATURES,
    EMAIL_BUSINESS_EVENT,
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_BROADCAST_LIVE_ACTIVITY,
    PUSH_MULTI_LOCALE_AB,
    PUSH_ONE_TIME,
    PUSH_WEB,
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
IOS = "campaign_content.content.push.ios"
WEB = "campaign_content.content.push.web"
VD = "campaign_content.variation_details"
KEYED = "campaign_content.content"

_CAROUSEL = [{"image_url": "https://cdn.example.com/1.png"}, {"image_url": "https://cdn.example.com/2.png"}]
_TIMER = {"duration": 3600, "expiry_action": "DISMISS"}


@pytest.mark.parametrize(
    "case",
    [
        # spec rule 1: custom_template_id and html_content are mutually exclusive
        fails(
            "email-both-bodies",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("MUTUALLY_EXCLUSIVE", f"{EMAIL}.html_content"),
            {f"{EMAIL}.custom_template_id": "tmpl_1"},
            stage=C,
        ),
        passes("email-custom-template-only", EMAIL_EVENT_TRIGGERED, stage=C),
        passes("email-html-only", EMAIL_ONE_TIME_PROMOTIONAL, stage=C),
        # spec rule 2: template types per platform
        fails(
            "ios-timer",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{IOS}.template_type"),
            {f"{IOS}.template_type": "TIMER", f"{IOS}.timer": _TIMER},
            stage=C,
        ),
        fails(
            "ios-banner",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{IOS}.template_type"),
            {f"{IOS}.template_type": "IMAGE_BANNER_WITH_TEXT"},
            stage=C,
        ),
        fails(
            "web-stylized",
            PUSH_WEB,
            ("INVALID_ENUM_VALUE", f"{WEB}.template_type"),
            {f"{WEB}.template_type": "STYLIZED_BASIC"},
            stage=C,
        ),
        fails(
            "android-lowercase-custom",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", f"{ANDROID}.template_type"),
            {f"{ANDROID}.template_type": "CUSTOM"},
            stage=C,
        ),
        passes(
            "ios-carousel",
            PUSH_ONE_TIME,
            {f"{IOS}.template_type": "SIMPLE_IMAGE_CAROUSEL", f"{IOS}.carousel_content": _CAROUSEL},
        ),
        passes(
            "android-timer-progress",
            PUSH_ONE_TIME,
            {f"{ANDROID}.template_type": "TIMER_WITH_PROGRESS_BAR", f"{ANDROID}.timer": _TIMER},
        ),
        passes(
            "android-banner",
            PUSH_ONE_TIME,
            {
                f"{ANDROID}.template_type": "IMAGE_BANNER_WITH_TEXT",
                f"{ANDROID}.basic_details.image_url": "https://x/y.png",
            },
        ),
        fails(
            "basic-details-type-not-for-ios",
            PUSH_ONE_TIME,
            ("INVALID_ENUM_VALUE", "basic_details.template_type"),
            {"basic_details.template_type": "TIMER"},
            stage=C,
        ),
        passes("basic-details-type-for-all", PUSH_ONE_TIME, {"basic_details.template_type": "BASIC"}),
        # spec rule 2: Custom needs custom_template_id (at every stage)
        fails(
            "custom-without-id",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.custom_template_id"),
            {f"{ANDROID}.template_type": "Custom"},
            stage=C,
        ),
        fails(
            "custom-from-basic-details",
            PUSH_WEB,
            ("INVALID_ENUM_VALUE", "basic_details.template_type"),
            {"basic_details.template_type": "Custom"},
            drop=(f"{WEB}.template_type",),
            stage=C,
        ),
        passes(
            "custom-with-id",
            PUSH_ONE_TIME,
            {
                f"{IOS}": {
                    "template_type": "Custom",
                    "custom_template_id": "ct_7",
                    "custom_template_version": "2",
                }
            },
        ),
        # publish: the platform's required fields
        fails(
            "android-basic-no-message",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.basic_details.message"),
            drop=(f"{ANDROID}.basic_details.message",),
        ),
        fails(
            "android-basic-empty-title",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.basic_details.title"),
            {f"{ANDROID}.basic_details.title": ""},
        ),
        fails(
            "carousel-without-slides",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.carousel_content"),
            {f"{ANDROID}.template_type": "SIMPLE_IMAGE_CAROUSEL"},
        ),
        fails(
            "timer-without-timer",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.timer"),
            {f"{ANDROID}.template_type": "TIMER"},
        ),
        fails(
            "banner-without-image",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.basic_details.image_url"),
            {f"{ANDROID}.template_type": "IMAGE_BANNER_WITH_TEXT"},
        ),
        fails(
            "no-template-type",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{ANDROID}.template_type"),
            drop=(f"{ANDROID}.template_type",),
        ),
        passes(
            "template-type-from-basic-details",
            PUSH_ONE_TIME,
            {"basic_details.template_type": "BASIC"},
            drop=(f"{ANDROID}.template_type",),
        ),
        passes(
            "partial-content-is-fine-in-a-draft",
            PUSH_ONE_TIME,
            stage=C,
            drop=(f"{ANDROID}.basic_details.message",),
        ),
        fails("platform-without-content", PUSH_ONE_TIME, ("REQUIRED_FIELD_MISSING", IOS), drop=(IOS,)),
        passes("content-beyond-platforms-is-kept", PUSH_ONE_TIME, {"basic_details.platforms": ["ANDROID"]}),
        fails(
            "live-activity-needs-ios-content",
            PUSH_BROADCAST_LIVE_ACTIVITY,
            ("REQUIRED_FIELD_MISSING", IOS),
            {"campaign_content.content.push": {"android": {"template_type": "BASIC"}}},
        ),
        fails(
            "push-without-content",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", "campaign_content"),
            drop=("campaign_content",),
        ),
        # publish: Email content
        fails(
            "email-no-subject",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{EMAIL}.subject"),
            drop=(f"{EMAIL}.subject",),
        ),
        fails(
            "email-no-from",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{EMAIL}.from_address"),
            drop=(f"{EMAIL}.from_address",),
        ),
        fails(
            "email-no-body",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{EMAIL}.html_content"),
            drop=(f"{EMAIL}.html_content",),
        ),
        passes(
            "email-no-body-in-draft", EMAIL_ONE_TIME_PROMOTIONAL, drop=(f"{EMAIL}.html_content",), stage=C
        ),
        fails(
            "email-without-content",
            EMAIL_BUSINESS_EVENT,
            ("REQUIRED_FIELD_MISSING", "campaign_content"),
            drop=("campaign_content",),
        ),
        fails(
            "promotional-without-category",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", "basic_details.subscription_category"),
            drop=("basic_details.subscription_category",),
        ),
        passes(
            "transactional-without-category",
            EMAIL_ONE_TIME_PROMOTIONAL,
            {"basic_details.content_type": "TRANSACTIONAL"},
            drop=("basic_details.subscription_category",),
        ),
    ],
)
def test_content_rules(case: Case) -> None:
    check(case)


_TWO = {
    "distribution_type": "MANUAL",
    "no_of_variations": 2,
    "manual_distribution_percentage": {"variation_1": 50, "variation_2": 50},
}


@pytest.mark.parametrize(
    "case",
    [
        # keyed content: `default` required; other locales listed; variation keys match the count
        fails(
            "no-default-locale",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.default"),
            drop=(f"{KEYED}.default",),
            stage=C,
        ),
        fails(
            "unlisted-locale",
            PUSH_MULTI_LOCALE_AB,
            ("UNKNOWN_FIELD", f"{KEYED}.fr-FR"),
            {"campaign_content.locales": ["es-ES"]},
            stage=C,
        ),
        fails(
            "variation-beyond-count",
            PUSH_MULTI_LOCALE_AB,
            ("UNKNOWN_FIELD", f"{KEYED}.es-ES.variation_3"),
            {f"{KEYED}.es-ES.variation_3": {"push": {}}},
            stage=C,
        ),
        fails(
            "variation-not-numbered",
            PUSH_MULTI_LOCALE_AB,
            ("UNKNOWN_FIELD", f"{KEYED}.default.variant_a"),
            {f"{KEYED}.default.variant_a": {"push": {}}},
            stage=C,
        ),
        fails(
            "variation-missing",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.fr-FR.variation_2"),
            drop=(f"{KEYED}.fr-FR.variation_2",),
            stage=C,
        ),
        fails(
            "listed-locale-without-content",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.de-DE"),
            {"campaign_content.locales": ["es-ES", "fr-FR", "de-DE"]},
        ),
        passes(
            "listed-locale-without-content-in-draft",
            PUSH_MULTI_LOCALE_AB,
            {"campaign_content.locales": ["es-ES", "fr-FR", "de-DE"]},
            stage=C,
        ),
        passes(
            "keyed-single-variation",
            PUSH_ONE_TIME,
            {KEYED: {"default": {"variation_1": PUSH_ONE_TIME["campaign_content"]["content"]}}},
        ),
        fails(
            "flat-with-two-variations",
            PUSH_ONE_TIME,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.default"),
            {f"{VD}": _TWO},
            stage=C,
        ),
        fails(
            "flat-with-listed-locale",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.es-ES"),
            {"campaign_content.locales": ["es-ES"]},
        ),
        # variation_details
        fails(
            "manual-sum-not-100",
            PUSH_MULTI_LOCALE_AB,
            ("OUT_OF_RANGE", f"{VD}.manual_distribution_percentage"),
            {f"{VD}.manual_distribution_percentage.variation_2": 30},
            stage=C,
        ),
        fails(
            "manual-key-mismatch",
            PUSH_MULTI_LOCALE_AB,
            ("UNKNOWN_FIELD", f"{VD}.manual_distribution_percentage.variation_3"),
            {f"{VD}.manual_distribution_percentage": {"variation_1": 60, "variation_3": 40}},
            stage=C,
        ),
        fails(
            "manual-key-missing",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{VD}.manual_distribution_percentage.variation_2"),
            {f"{VD}.manual_distribution_percentage": {"variation_1": 100}},
            stage=C,
        ),
        fails(
            "manual-without-split",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{VD}.manual_distribution_percentage"),
            drop=(f"{VD}.manual_distribution_percentage",),
            stage=C,
        ),
        fails(
            "manual-percentage-over-100",
            PUSH_MULTI_LOCALE_AB,
            ("OUT_OF_RANGE", f"{VD}.manual_distribution_percentage.variation_1"),
            {f"{VD}.manual_distribution_percentage.variation_1": 160},
            stage=C,
        ),
        fails(
            "variations-without-distribution",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{VD}.distribution_type"),
            drop=(f"{VD}.distribution_type", f"{VD}.manual_distribution_percentage"),
            stage=C,
        ),
        fails(
            "zero-variations",
            PUSH_MULTI_LOCALE_AB,
            ("OUT_OF_RANGE", f"{VD}.no_of_variations"),
            {f"{VD}.no_of_variations": 0},
            stage=C,
        ),
        fails(
            "sherpa-without-metric",
            PUSH_MULTI_LOCALE_AB,
            ("REQUIRED_FIELD_MISSING", f"{VD}.sherpa_distribution_metric"),
            {VD: {"distribution_type": "SHERPA", "no_of_variations": 2, "sherpa_campaign_duration": 4}},
            stage=C,
        ),
        fails(
            "sherpa-bad-metric",
            PUSH_MULTI_LOCALE_AB,
            ("INVALID_ENUM_VALUE", f"{VD}.sherpa_distribution_metric"),
            {
                VD: {
                    "distribution_type": "SHERPA",
                    "no_of_variations": 2,
                    "sherpa_campaign_duration": 4,
                    "sherpa_distribution_metric": "REVENUE",
                }
            },
            stage=C,
        ),
        passes(
            "sherpa-complete",
            PUSH_MULTI_LOCALE_AB,
            {
                VD: {
                    "distribution_type": "SHERPA",
                    "no_of_variations": 2,
                    "sherpa_campaign_duration": 4,
                    "sherpa_distribution_metric": "BOTH",
                }
            },
        ),
    ],
)
def test_locale_and_variation_rules(case: Case) -> None:
    check(case)


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


def test_content_rules_read_the_delivery_type_of_the_document() -> None:
    document = _document(PUSH_WEB)
    assert document.delivery_type is DeliveryType.ONE_TIME
