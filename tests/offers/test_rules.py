"""The pure offer rules, case by case: body in, (code, target) problems out.

The HTTP tests prove the wiring; these prove each rule, without a database.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from herald.offers import parsing, rules
from herald.offers.requests import OfferCreate, OfferFields
from herald.offers.rules.scheduling import zulu
from herald.offers.writes import everything
from tests.offers.builders import TEMPLATE_FIELDS, TEMPLATE_ID, flat_body, offer_body

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
Body = dict[str, Any]


def problems_of(body: Body, *, name_taken: bool = False, draft: bool = False) -> set[tuple[str, str]]:
    parsed = parsing.parse(body, OfferCreate)
    lookups = rules.Lookups(
        now=NOW,
        existing_tags=frozenset({"seasonal01"}),
        templates={TEMPLATE_ID: list(TEMPLATE_FIELDS)},
        name_taken=name_taken,
        draft=draft,
    )
    found = parsed.problems + rules.check(parsed.values, everything(parsed.valid), lookups, parsed.failed)
    return {(p.code, p.target) for p in found}


def at(**scheduling: str) -> Callable[[Body], None]:
    def change(body: Body) -> None:
        body["scheduling"].update(scheduling)

    return change


def _parent(body: Body, path: str) -> tuple[Any, str | int]:
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    node: Any = body
    for part in parents:
        node = node[part]
    return node, last


def setting(path: str, value: Any) -> Callable[[Body], None]:
    def change(body: Body) -> None:
        node, last = _parent(body, path)
        node[last] = value

    return change


def removing(path: str) -> Callable[[Body], None]:
    def change(body: Body) -> None:
        node, last = _parent(body, path)
        del node[last]

    return change


def template_block(value: Any, template_id: Any = TEMPLATE_ID) -> dict[str, Any]:
    meta = {} if template_id is None else {"templateId": template_id}
    return {"type": "template", "value": value, "meta": meta}


def flat(*blocks: dict[str, Any]) -> Callable[[Body], None]:
    def change(body: Body) -> None:
        body["offer_content"] = {f"content_{i}": block for i, block in enumerate(blocks, start=1)}
        body["variation_meta"] = {"type": "DMV"}

    return change


GOOD_GOAL = {"goal_name": "bought", "action": "purchase"}

CASES: list[tuple[str, Callable[[Body], None], tuple[str, str]]] = [
    ("name too short", setting("name", "abcd"), ("INVALID_OFFER_NAME", "name")),
    ("name with a space", setting("name", "Winter sale"), ("INVALID_OFFER_NAME", "name")),
    ("name too long", setting("name", "x" * 101), ("INVALID_OFFER_NAME", "name")),
    ("name not a string", setting("name", 12345), ("INVALID_TYPE", "name")),
    ("priority zero", setting("priority", 0), ("OUT_OF_RANGE", "priority")),
    ("priority 101", setting("priority", 101), ("OUT_OF_RANGE", "priority")),
    ("priority as text", setting("priority", "5"), ("INVALID_TYPE", "priority")),
    ("delivery unknown", setting("delivery", "instant"), ("INVALID_ENUM_VALUE", "delivery")),
    ("creator not an e-mail", setting("created_by", "owner"), ("INVALID_TYPE", "created_by")),
    ("description too long", setting("description", "d" * 501), ("OUT_OF_RANGE", "description")),
    ("eleven tags", setting("tags", ["seasonal01"] * 11), ("OUT_OF_RANGE", "tags")),
    ("unknown tag", setting("tags", ["tag_seasonal01", "tag_nope"]), ("INVALID_TAG_ID", "tags.1")),
    ("unknown raw tag", setting("tags", ["nope"]), ("INVALID_TAG_ID", "tags.0")),
    ("unknown field", setting("colour", "red"), ("UNKNOWN_FIELD", "colour")),
    ("name missing", removing("name"), ("REQUIRED_FIELD_MISSING", "name")),
    ("segment_info missing", removing("segment_info"), ("REQUIRED_FIELD_MISSING", "segment_info")),
    (
        "start missing",
        removing("scheduling.start_datetime"),
        ("REQUIRED_FIELD_MISSING", "scheduling.start_datetime"),
    ),
    (
        "start with offset",
        at(start_datetime="2026-02-01T10:00:00+01:00"),
        ("INVALID_TYPE", "scheduling.start_datetime"),
    ),
    (
        "start without zone",
        at(start_datetime="2026-02-01T10:00:00"),
        ("INVALID_TYPE", "scheduling.start_datetime"),
    ),
    (
        "expiry impossible date",
        at(expiry_datetime="2026-02-30T10:00:00Z"),
        ("INVALID_TYPE", "scheduling.expiry_datetime"),
    ),
    ("timezone unknown", at(timezone="Mars/Olympus"), ("INVALID_TIMEZONE", "scheduling.timezone")),
    (
        "start in the past",
        at(start_datetime=zulu(NOW - timedelta(minutes=2))),
        ("INVALID_SCHEDULING", "scheduling.start_datetime"),
    ),
    (
        "expiry before start",
        at(expiry_datetime=zulu(NOW + timedelta(minutes=30))),
        ("INVALID_SCHEDULING", "scheduling.expiry_datetime"),
    ),
    (
        "expiry within 10 minutes",
        at(start_datetime=zulu(NOW), expiry_datetime=zulu(NOW + timedelta(minutes=9))),
        ("INVALID_SCHEDULING", "scheduling.expiry_datetime"),
    ),
    (
        "operator not for the data type",
        setting("segment_info.filters.included_filters.filters.0.operator", "between"),
        ("INVALID_ENUM_VALUE", "segment_info.filters.included_filters.filters.0.operator"),
    ),
    (
        "filter value missing",
        removing("segment_info.filters.included_filters.filters.0.value"),
        ("REQUIRED_FIELD_MISSING", "segment_info.filters.included_filters.filters.0.value"),
    ),
    (
        "unknown filter type",
        setting("segment_info.filters.included_filters.filters.0.filter_type", "devices"),
        ("INVALID_ENUM_VALUE", "segment_info.filters.included_filters.filters.0.filter_type"),
    ),
    (
        "flat and locales together",
        setting("offer_content.content_1", {"type": "json", "value": "{}"}),
        ("MUTUALLY_EXCLUSIVE", "offer_content.locales"),
    ),
    (
        "no content at all",
        setting("offer_content", {}),
        ("REQUIRED_FIELD_MISSING", "offer_content.content_1"),
    ),
    (
        "badly named slot",
        setting("offer_content", {"slot": {"type": "json", "value": "{}"}}),
        ("UNKNOWN_FIELD", "offer_content.slot"),
    ),
    (
        "json value not text",
        flat({"type": "json", "value": {"a": 1}}),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "json value not JSON",
        flat({"type": "json", "value": "{nope"}),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "json value nested beyond any parser's depth",
        flat({"type": "json", "value": "[" * 5000 + "]" * 5000}),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "json value holding NaN (not JSON)",
        flat({"type": "json", "value": "[1, NaN]"}),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "json value holding Infinity (not JSON)",
        flat({"type": "json", "value": "Infinity"}),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "block type unknown",
        flat({"type": "html", "value": "x"}),
        ("INVALID_ENUM_VALUE", "offer_content.content_1.type"),
    ),
    (
        "content block not named",
        flat({"type": "content_block", "value": ""}),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "template unknown",
        flat(template_block({"headline": "h", "image_url": "u"}, "nope")),
        ("INVALID_TEMPLATE_ID", "offer_content.content_1.meta.templateId"),
    ),
    (
        "template not named",
        flat(template_block({"headline": "h", "image_url": "u"}, None)),
        ("REQUIRED_FIELD_MISSING", "offer_content.content_1.meta.templateId"),
    ),
    (
        "template field missing",
        flat(template_block({"headline": "h"})),
        ("MISSING_TEMPLATE_FIELD", "offer_content.content_1.value.image_url"),
    ),
    (
        "template value not an object",
        flat(template_block("h")),
        ("INVALID_TYPE", "offer_content.content_1.value"),
    ),
    (
        "split keys are not the variants",
        setting("variation_meta.smv_distribution.split", {"A": 50, "C": 50}),
        ("SPLIT_KEY_MISMATCH", "variation_meta.smv_distribution.split"),
    ),
    (
        "split adds up to 90",
        setting("variation_meta.smv_distribution.split", {"A": 50, "B": 40}),
        ("INVALID_SPLIT", "variation_meta.smv_distribution.split"),
    ),
    (
        "split share zero",
        setting("variation_meta.smv_distribution.split", {"A": 0, "B": 100}),
        ("OUT_OF_RANGE", "variation_meta.smv_distribution.split.A"),
    ),
    (
        "SMV without a split",
        removing("variation_meta.smv_distribution"),
        ("REQUIRED_FIELD_MISSING", "variation_meta.smv_distribution"),
    ),
    (
        "declared three variants, content has two",
        setting("variation_meta.variantsPerLocale", ["A", "B", "C"]),
        ("VARIANT_COUNT_MISMATCH", "offer_content.locales.en.variations"),
    ),
    (
        "one locale lacks a variant",
        removing("offer_content.locales.de.variations.B"),
        ("VARIANT_COUNT_MISMATCH", "offer_content.locales.de.variations"),
    ),
    (
        "variation type unknown",
        setting("variation_meta.type", "XMV"),
        ("INVALID_ENUM_VALUE", "variation_meta.type"),
    ),
    (
        "control group enabled at 0",
        setting("variation_meta.control_group", {"is_enabled": True, "percentage": 0}),
        ("OUT_OF_RANGE", "variation_meta.control_group.percentage"),
    ),
    (
        "control group enabled without a percentage",
        setting("variation_meta.control_group", {"is_enabled": True}),
        ("REQUIRED_FIELD_MISSING", "variation_meta.control_group.percentage"),
    ),
    (
        "control group at 100",
        setting("variation_meta.control_group", {"is_enabled": True, "percentage": 100}),
        ("OUT_OF_RANGE", "variation_meta.control_group.percentage"),
    ),
    (
        "enabled cap without a limit",
        setting("capping_rules", {"overall": {"enabled": True}}),
        ("REQUIRED_FIELD_MISSING", "capping_rules.overall.limit_value"),
    ),
    (
        "enabled cap at 0",
        setting("capping_rules", {"user_level": {"enabled": True, "limit_value": 0}}),
        ("OUT_OF_RANGE", "capping_rules.user_level.limit_value"),
    ),
    (
        "cap at -1",
        setting("capping_rules", {"overall": {"enabled": False, "limit_value": -1}}),
        ("OUT_OF_RANGE", "capping_rules.overall.limit_value"),
    ),
    (
        "cap schedule unknown",
        setting(
            "capping_rules", {"user_level": {"enabled": True, "limit_value": 1, "limit_schedule": "HOURLY"}}
        ),
        ("INVALID_ENUM_VALUE", "capping_rules.user_level.limit_schedule"),
    ),
    ("impression window 241 h", setting("imp_track_hours", 241), ("OUT_OF_RANGE", "imp_track_hours")),
    (
        "six attribute configurations",
        setting("offering_attribute_configuration", [{}] * 6),
        ("OUT_OF_RANGE", "offering_attribute_configuration"),
    ),
    (
        "currency not ISO 4217",
        setting(
            "conversion",
            {
                "primary": {
                    **GOOD_GOAL,
                    "is_revenue_tracking": True,
                    "revenue_amount": "order_value",
                    "revenue_currency": "usd",
                }
            },
        ),
        ("INVALID_CURRENCY_CODE", "conversion.primary.revenue_currency"),
    ),
    (
        "revenue tracking without currency",
        setting(
            "conversion",
            {
                "secondary": [
                    GOOD_GOAL,
                    {**GOOD_GOAL, "is_revenue_tracking": True, "revenue_amount": "order_value"},
                ]
            },
        ),
        ("REVENUE_FIELDS_INCOMPLETE", "conversion.secondary.1.revenue_currency"),
    ),
    (
        "revenue amount without tracking",
        setting("conversion", {"primary": {**GOOD_GOAL, "revenue_amount": "order_value"}}),
        ("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.is_revenue_tracking"),
    ),
    (
        "revenue attribute name empty",
        setting("conversion", {"primary": {**GOOD_GOAL, "is_revenue_tracking": True, "revenue_amount": ""}}),
        ("OUT_OF_RANGE", "conversion.primary.revenue_amount"),
    ),
    (
        "goal without action",
        setting("conversion", {"primary": {"goal_name": "x"}}),
        ("REQUIRED_FIELD_MISSING", "conversion.primary.action"),
    ),
]


class TestCreateRules:
    def test_the_reference_bodies_are_valid(self) -> None:
        assert problems_of(offer_body(NOW)) == set()
        assert problems_of(flat_body(NOW)) == set()

    @pytest.mark.parametrize(
        ("change", "expected"), [(c, e) for _, c, e in CASES], ids=[n for n, _, _ in CASES]
    )
    def test_rule(self, change: Callable[[Body], None], expected: tuple[str, str]) -> None:
        body = offer_body(NOW)
        change(body)
        assert expected in problems_of(body)

    def test_taken_name_is_duplicate(self) -> None:
        assert problems_of(offer_body(NOW), name_taken=True) == {("DUPLICATE_OFFER_NAME", "name")}

    def test_start_a_few_seconds_ago_counts_as_now(self) -> None:
        assert problems_of(offer_body(NOW, starts_in=timedelta(seconds=-30))) == set()

    def test_full_revenue_goal_is_valid(self) -> None:
        goal = {
            **GOOD_GOAL,
            "is_revenue_tracking": True,
            "revenue_amount": "order_value",
            "revenue_currency": "EUR",
        }
        assert problems_of(offer_body(NOW, conversion={"primary": goal, "secondary": [goal]})) == set()

    def test_control_group_may_be_zero_when_disabled(self) -> None:
        body = offer_body(NOW)
        body["variation_meta"]["control_group"] = {"is_enabled": False, "percentage": 0}
        assert problems_of(body) == set()

    def test_caps_may_be_zero_when_disabled(self) -> None:
        body = offer_body(NOW)
        zero = {"enabled": False, "limit_value": 0}
        body["capping_rules"] = {"overall": zero, "user_level": zero}
        assert problems_of(body) == set()

    def test_filters_empty_means_all_users(self) -> None:
        assert problems_of(offer_body(NOW, segment_info={"filters": {}})) == set()

    def test_problems_of_different_fields_are_all_reported(self) -> None:
        body = offer_body(NOW, name="bad name", priority=0, tags=["nope"])
        body["scheduling"]["timezone"] = "Nowhere/City"
        body["variation_meta"]["smv_distribution"]["split"] = {"A": 30, "B": 30}
        assert problems_of(body, name_taken=True) == {
            ("INVALID_OFFER_NAME", "name"),
            ("OUT_OF_RANGE", "priority"),
            ("INVALID_TAG_ID", "tags.0"),
            ("INVALID_TIMEZONE", "scheduling.timezone"),
            ("INVALID_SPLIT", "variation_meta.smv_distribution.split"),
        }

    def test_drafts_need_only_name_and_creator(self) -> None:
        parsed = parsing.parse({"name": "Draft_One"}, OfferFields)
        lookups = rules.Lookups(now=NOW, draft=True)
        found = rules.check(parsed.values, everything(parsed.valid), lookups)
        assert {(p.code, p.target) for p in found} == {("REQUIRED_FIELD_MISSING", "created_by")}
