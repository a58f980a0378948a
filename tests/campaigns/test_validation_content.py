"""Rules of campaign_content: spec rules 1 and 2 (template types), and what publishing needs."""

from __future__ import annotations

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    EMAIL_BUSINESS_EVENT,
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_BROADCAST_LIVE_ACTIVITY,
    PUSH_ONE_TIME,
    PUSH_WEB,
    Case,
    check,
    fails,
    passes,
)

C = Stage.DRAFT_CREATE
EMAIL = "campaign_content.content.email"
ANDROID = "campaign_content.content.push.android"
IOS = "campaign_content.content.push.ios"
WEB = "campaign_content.content.push.web"

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
