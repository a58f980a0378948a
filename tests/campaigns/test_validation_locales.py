"""Keyed content (locale x variation) and variation_details rules."""

from __future__ import annotations

import pytest

from herald.campaigns.validation import Stage

from .payloads import (
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_MULTI_LOCALE_AB,
    PUSH_ONE_TIME,
    Case,
    check,
    fails,
    passes,
    variant,
)

C = Stage.DRAFT_CREATE
VD = "campaign_content.variation_details"
KEYED = "campaign_content.content"

_EMAIL = EMAIL_ONE_TIME_PROMOTIONAL["campaign_content"]["content"]["email"]
# The promotional e-mail in two locales, two variations each.
EMAIL_KEYED = variant(
    EMAIL_ONE_TIME_PROMOTIONAL,
    {
        "campaign_content": {
            "locales": ["es-ES"],
            "variation_details": {
                "distribution_type": "SHERPA",
                "no_of_variations": 2,
                "sherpa_campaign_duration": 6,
                "sherpa_distribution_metric": "OPEN_RATE",
            },
            "content": {
                locale: {
                    f"variation_{n}": {"email": {**_EMAIL, "subject": f"{subject} #{n}"}} for n in (1, 2)
                }
                for locale, subject in (("default", "Spring is here"), ("es-ES", "Llega la primavera"))
            },
        }
    },
)

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


@pytest.mark.parametrize(
    "case",
    [
        passes("email-keyed", EMAIL_KEYED),
        fails(
            "email-keyed-no-subject",
            EMAIL_KEYED,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.es-ES.variation_2.email.subject"),
            drop=(f"{KEYED}.es-ES.variation_2.email.subject",),
        ),
        fails(
            "email-keyed-both-bodies",
            EMAIL_KEYED,
            ("MUTUALLY_EXCLUSIVE", f"{KEYED}.default.variation_1.email.html_content"),
            {f"{KEYED}.default.variation_1.email.custom_template_id": "tmpl_9"},
            stage=C,
        ),
        fails(
            "email-keyed-missing-variation",
            EMAIL_KEYED,
            ("REQUIRED_FIELD_MISSING", f"{KEYED}.es-ES.variation_2"),
            drop=(f"{KEYED}.es-ES.variation_2",),
            stage=C,
        ),
        fails(
            "email-keyed-broken-template",
            EMAIL_KEYED,
            ("INVALID_TEMPLATE", f"{KEYED}.es-ES.variation_1.email.subject"),
            {f"{KEYED}.es-ES.variation_1.email.subject": "Hola {{ UserAttribute['name'] "},
        ),
        fails(
            "email-keyed-push-object",
            EMAIL_KEYED,
            ("UNKNOWN_FIELD", f"{KEYED}.default.variation_1.push"),
            {f"{KEYED}.default.variation_1.push": {}},
            stage=C,
        ),
    ],
)
def test_keyed_email_content(case: Case) -> None:
    check(case)
