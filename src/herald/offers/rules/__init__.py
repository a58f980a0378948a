"""Offer validation rules (contract §4): pure functions from parsed values to problems.

One entry point, `check`, serves O2 (create), O3 (update, on the merged offer) and the importer.
Rules look only at fields that changed (everything, on create), and rules spanning several fields
skip when one of them failed to parse — its problem is already reported, and judging the rest
against a stale or missing value would only add noise. What the database knows (tags, templates,
whether the name is taken) is loaded by the service into `Lookups` beforehand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from herald.campaigns.validation.filters import check_filter_group
from herald.ids import parse_tag_id
from herald.offers.currencies import is_currency_code
from herald.offers.requests import (
    OFFER_NAME_PATTERN,
    REQUIRED_ON_CREATE,
    REQUIRED_ON_DRAFT,
    REVENUE_ATTRIBUTE_MAX,
    CappingRules,
    Conversion,
    Goal,
    OfferFields,
)
from herald.offers.rules.content import check_content, check_variants, check_variation_meta
from herald.offers.rules.scheduling import EXPIRY, START, check_scheduling
from herald.problems import Problem, join_path

OFFER_NAME = re.compile(OFFER_NAME_PATTERN)


@dataclass(frozen=True)
class Lookups:
    """The facts rules need besides the body."""

    now: datetime
    existing_tags: frozenset[str] = frozenset()  # raw ids, among those the body names
    templates: Mapping[str, Sequence[str]] = field(default_factory=dict)  # id -> required fields
    name_taken: bool = False
    draft: bool = False  # drafts (and archived imports) need only a name and a creator
    check_time: bool = True  # off for imports: "start in the past" is normal history there


def check(
    values: OfferFields,
    changed: frozenset[str],
    lookups: Lookups,
    failed: frozenset[str] = frozenset(),
) -> list[Problem]:
    """Problems of `values`. `changed`: top-level names (plus `scheduling.<end>`) that changed;
    `failed`: top-level names that did not parse (their rules are skipped)."""
    problems = _check_complete(values, failed, lookups.draft)
    if "name" in changed and values.name is not None:
        problems += check_name(values.name, lookups.name_taken)
    if "tags" in changed and values.tags:
        problems += check_tags(values.tags, lookups.existing_tags)
    if values.scheduling is not None and "scheduling" in changed:
        problems += check_scheduling(
            values.scheduling,
            now=lookups.now,
            start_changed=START in changed,
            expiry_changed=EXPIRY in changed,
            check_time=lookups.check_time,
        )
    if values.segment_info is not None and "segment_info" in changed:
        filters = values.segment_info.filters
        base = ("segment_info", "filters")
        problems += check_filter_group(filters.included_filters, (*base, "included_filters"))
        problems += check_filter_group(filters.excluded_filters, (*base, "excluded_filters"))
    if values.offer_content is not None and "offer_content" in changed:
        problems += check_content(values.offer_content, lookups.templates)
    if values.variation_meta is not None and "variation_meta" in changed:
        problems += check_variation_meta(values.variation_meta)
    content_or_meta = {"offer_content", "variation_meta"}
    if (
        values.offer_content is not None
        and values.variation_meta is not None
        and changed & content_or_meta
        and not failed & content_or_meta
    ):
        problems += check_variants(values.variation_meta, values.offer_content)
    if values.capping_rules is not None and "capping_rules" in changed:
        problems += check_capping(values.capping_rules)
    if values.conversion is not None and "conversion" in changed:
        problems += check_conversion(values.conversion)
    return problems


def _check_complete(values: OfferFields, failed: frozenset[str], draft: bool) -> list[Problem]:
    """Required fields that are absent or were cleared with null (parse failures aside)."""
    required = REQUIRED_ON_DRAFT if draft else REQUIRED_ON_CREATE
    problems = [
        Problem("REQUIRED_FIELD_MISSING", name, f"'{name}' is required.")
        for name in required
        if getattr(values, name) is None and name not in failed
    ]
    if not draft and values.scheduling is not None:
        for target, value in (
            (START, values.scheduling.start_datetime),
            (EXPIRY, values.scheduling.expiry_datetime),
        ):
            if value is None:
                problems.append(
                    Problem("REQUIRED_FIELD_MISSING", target, f"'{target.rsplit('.', 1)[1]}' is required.")
                )
    return problems


def check_name(name: str, taken: bool) -> list[Problem]:
    if not OFFER_NAME.fullmatch(name):
        return [
            Problem(
                "INVALID_OFFER_NAME",
                "name",
                "Offer names are 5-100 characters of letters, digits and underscores.",
            )
        ]
    if taken:
        return [Problem("DUPLICATE_OFFER_NAME", "name", f"An offer named '{name}' already exists.")]
    return []


def check_tags(tags: Sequence[str], existing: frozenset[str]) -> list[Problem]:
    return [
        Problem("INVALID_TAG_ID", join_path("tags", index), f"No tag '{tag}' in this workspace.")
        for index, tag in enumerate(tags)
        if parse_tag_id(tag) not in existing
    ]


def check_capping(rules: CappingRules) -> list[Problem]:
    """An enabled cap needs a limit_value of at least 1 (a disabled one may hold any count)."""
    problems = []
    for name, cap in (("overall", rules.overall), ("user_level", rules.user_level)):
        if cap is None or not cap.enabled:
            continue
        target = join_path("capping_rules", name, "limit_value")
        if cap.limit_value is None:
            problems.append(
                Problem("REQUIRED_FIELD_MISSING", target, "An enabled cap needs limit_value (at least 1).")
            )
        elif cap.limit_value < 1:
            problems.append(
                Problem("OUT_OF_RANGE", target, "An enabled cap's limit_value must be at least 1.")
            )
    return problems


def check_conversion(conversion: Conversion) -> list[Problem]:
    goals: list[tuple[Goal, tuple[str | int, ...]]] = []
    if conversion.primary is not None:
        goals.append((conversion.primary, ("conversion", "primary")))
    goals += [(goal, ("conversion", "secondary", i)) for i, goal in enumerate(conversion.secondary or [])]
    problems: list[Problem] = []
    for goal, path in goals:
        problems += check_goal(goal, path)
    return problems


def check_goal(goal: Goal, path: tuple[str | int, ...]) -> list[Problem]:
    """Revenue tracking needs the amount's attribute name and a currency; revenue fields need
    tracking switched on."""
    problems: list[Problem] = []
    amount = goal.revenue_amount
    if amount is not None and not 1 <= len(amount) <= REVENUE_ATTRIBUTE_MAX:
        problems.append(
            Problem(
                "OUT_OF_RANGE",
                join_path(*path, "revenue_amount"),
                f"revenue_amount names an event attribute: 1-{REVENUE_ATTRIBUTE_MAX} characters.",
            )
        )
    if goal.revenue_currency is not None and not is_currency_code(goal.revenue_currency):
        problems.append(
            Problem(
                "INVALID_CURRENCY_CODE",
                join_path(*path, "revenue_currency"),
                f"'{goal.revenue_currency}' is not an ISO 4217 currency code (e.g. USD, EUR).",
            )
        )
    if goal.is_revenue_tracking:
        for name in ("revenue_amount", "revenue_currency"):
            if getattr(goal, name) is None:
                problems.append(
                    Problem(
                        "REVENUE_FIELDS_INCOMPLETE",
                        join_path(*path, name),
                        f"Revenue tracking needs revenue_amount and revenue_currency; '{name}' is missing.",
                    )
                )
    elif goal.revenue_amount is not None or goal.revenue_currency is not None:
        problems.append(
            Problem(
                "REVENUE_FIELDS_INCOMPLETE",
                join_path(*path, "is_revenue_tracking"),
                "revenue_amount and revenue_currency are sent only with is_revenue_tracking: true.",
            )
        )
    return problems
