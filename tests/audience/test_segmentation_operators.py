"""Segmentation, operator by operator: who each filter selects from a small fixed audience.

Every case runs the compiled SQL on the test database and the reference evaluator, and both must
give the expected customers. The clock is the tests' frozen clock: 2026-01-15T12:00:00Z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI

from herald.audience.segmentation.reference import Reference
from herald.campaigns.schemas.filters import OPERATORS_BY_DATA_TYPE

from .audience_fixtures import EVENTS, EVERYONE, SEGMENTS, USERS, action, attr, filter_group, segment
from .seed import matching, seed, services


@dataclass(frozen=True)
class Case:
    id: str
    filters: list[dict[str, Any]]
    expected: set[str]
    filter_operator: str = "and"


def case(case_id: str, item: dict[str, Any], expected: set[str]) -> Any:
    return pytest.param(Case(case_id, [item], expected), id=case_id)


def group_case(case_id: str, filter_operator: str, items: list[dict[str, Any]], expected: set[str]) -> Any:
    return pytest.param(Case(case_id, items, expected, filter_operator), id=case_id)


CASES = [
    # ---- bool -------------------------------------------------------------------------------------
    case("bool-is-true", attr("bool", "vip", "is", True), {"ana", "ed"}),  # cy's "yes" is a string
    case("bool-is-false", attr("bool", "vip", "is", False), {"bo"}),
    case("bool-is-negated", attr("bool", "vip", "is", True, negate=True), {"bo", "cy", "di"}),
    case("bool-exists", attr("bool", "vip", "exists"), {"ana", "bo", "ed"}),
    case("bool-not-exists", attr("bool", "vip", "exists", negate=True), {"cy", "di"}),
    case("bool-standard-column", attr("bool", "push_opt_out", "is", True), {"bo"}),
    case("bool-standard-column-false", attr("bool", "email_opt_out", "is", False), EVERYONE - {"di"}),
    # ---- double -----------------------------------------------------------------------------------
    case("double-in", attr("double", "ltv", "in", [80, 120.5]), {"ana", "bo"}),
    case("double-in-scalar", attr("double", "ltv", "in", 999.99), {"cy"}),
    case("double-in-negated", attr("double", "ltv", "in", [80], negate=True), EVERYONE - {"bo"}),
    case("double-between-inclusive", attr("double", "ltv", "between", [80, 120.5]), {"ana", "bo"}),
    case("double-between", attr("double", "ltv", "between", [100, 1000]), {"ana", "cy"}),
    case("double-less-than-is-strict", attr("double", "ltv", "lessThan", 120.5), {"bo"}),
    case("double-greater-than", attr("double", "ltv", "greaterThan", 120.5), {"cy"}),
    case(
        "double-greater-than-negated",
        attr("double", "ltv", "greaterThan", 100, negate=True),
        {"bo", "di", "ed"},
    ),
    case("double-exists", attr("double", "ltv", "exists"), {"ana", "bo", "cy"}),  # ed's "500" is a string
    case("double-array-any-element", attr("double", "scores", "greaterThan", 200), {"bo"}),
    case("double-array-in", attr("double", "scores", "in", [3]), {"ana"}),
    case("double-on-a-string-column", attr("double", "email", "exists"), set()),
    # ---- string -----------------------------------------------------------------------------------
    case("string-is-ignores-case", attr("string", "city", "is", "PUNE"), {"ana", "bo", "ed"}),
    case("string-is-case-sensitive", attr("string", "city", "is", "pune", case_sensitive=True), {"bo"}),
    case(
        "string-is-negated",
        attr("string", "city", "is", "Pune", case_sensitive=True, negate=True),
        {"bo", "cy", "di"},
    ),
    case("string-is-unicode-case", attr("string", "nickname", "is", "élodie"), {"cy"}),
    case(
        "string-is-unicode-case-sensitive",
        attr("string", "nickname", "is", "élodie", case_sensitive=True),
        set(),
    ),
    # One lower-case form on both engines: "İ" is "i" (Python's own `lower` made it "i" and a
    # combining dot on SQLite; PostgreSQL's regex flag "i" left "İ" apart from "i" and "I").
    case("string-is-dotted-capital-i", attr("string", "hometown", "is", "istanbul"), {"ana", "bo", "cy"}),
    case(
        "string-contains-dotted-capital-i", attr("string", "hometown", "contains", "İST"), {"ana", "bo", "cy"}
    ),
    case(
        "string-dotted-capital-i-case-sensitive",
        attr("string", "hometown", "is", "İstanbul", case_sensitive=True),
        {"ana"},
    ),
    case(
        "string-column-dotted-capital-i",
        attr("string", "first_name", "startWithInTheFollowing", ["idi"]),
        {"di"},
    ),
    case("string-in", attr("string", "city", "in", ["mumbai", "Delhi"]), {"cy", "ed"}),
    case("string-in-scalar", attr("string", "city", "in", "Mumbai"), {"cy"}),
    case("string-contains", attr("string", "email", "contains", "EXAMPLE"), {"ana", "di"}),
    case(
        "string-contains-case-sensitive",
        attr("string", "email", "contains", "example", case_sensitive=True),
        {"di"},
    ),
    case(
        "string-contains-any", attr("string", "first_name", "containsInTheFollowing", ["RIL", "zz"]), {"cy"}
    ),
    case(
        "string-starts-with-any",
        attr("string", "email", "startWithInTheFollowing", ["ana", "BO"]),
        {"ana", "bo"},
    ),
    case(
        "string-starts-with-case-sensitive",
        attr("string", "email", "startWithInTheFollowing", ["ana", "bo"], case_sensitive=True),
        {"bo"},
    ),
    case(
        "string-ends-with-any",
        attr("string", "email", "endsWithInTheFollowing", [".IO", ".org"]),
        {"bo", "ed"},
    ),
    case("string-ends-with-array-element", attr("string", "tags", "endsWithInTheFollowing", ["LY"]), {"ana"}),
    case("string-exists", attr("string", "email", "exists"), {"ana", "bo", "di", "ed"}),
    case("string-not-exists", attr("string", "email", "exists", negate=True), {"cy"}),
    case("string-customer-id", attr("string", "customer_id", "in", ["ana", "zed"]), {"ana"}),
    case("string-on-a-number", attr("string", "ltv", "exists"), {"ed"}),
    case("string-name-with-quotes-and-dots", attr("string", 'say "hi".now', "is", "hello"), {"ana"}),
    case(
        "dynamic-name-with-quotes",
        attr("string", 'say "hi".now', "is", """{{UserAttribute['say "hi".now']}}""", is_dynamic_value=True),
        {"ana"},
    ),
    case(
        "string-name-with-quotes-negated",
        attr("string", 'say "hi".now', "contains", "ell", case_sensitive=True, negate=True),
        EVERYONE - {"ana"},
    ),
    # ---- datetime (now = 2026-01-15T12:00:00Z) ----------------------------------------------------
    case(
        "datetime-in-the-last-day",
        attr("datetime", "last_seen", "inTheLast", {"value": 1, "unit": "days"}),
        {"bo"},
    ),
    case("datetime-in-the-last-bare-days", attr("datetime", "last_seen", "inTheLast", 2), {"ana", "bo"}),
    case(
        "datetime-in-the-last-hours",
        attr("datetime", "last_seen", "inTheLast", {"value": 3, "value_type": "HOURS"}),
        {"bo"},
    ),
    case(
        "datetime-in-the-last-negated",
        attr("datetime", "last_seen", "inTheLast", {"value": 2, "unit": "days"}, negate=True),
        {"cy", "di", "ed"},
    ),
    case(
        "datetime-in-the-next-week",
        attr("datetime", "renewal", "inTheNext", {"value": 1, "unit": "weeks"}),
        {"ana"},
    ),
    case(
        "datetime-in-the-next-months",
        attr("datetime", "renewal", "inTheNext", {"value": 2, "unit": "months"}),
        {"ana", "bo"},
    ),
    case("datetime-on", attr("datetime", "last_seen", "on", "2026-01-14"), {"ana"}),
    case("datetime-on-a-date-time", attr("datetime", "last_seen", "on", "2026-01-15T23:00:00+05:00"), {"bo"}),
    case(
        "datetime-between-dates",
        attr("datetime", "last_seen", "between", ["2025-12-01", "2026-01-14"]),
        {"ana", "cy"},
    ),
    case(
        "datetime-between-instants",
        attr("datetime", "last_seen", "between", ["2026-01-14T09:00:00Z", "2026-01-15T11:59:58Z"]),
        {"ana"},
    ),
    case("datetime-before-a-date", attr("datetime", "last_seen", "before", "2026-01-14"), {"cy"}),
    case("datetime-after-a-date", attr("datetime", "last_seen", "after", "2026-01-14"), {"bo"}),
    case("datetime-after-is-strict", attr("datetime", "last_seen", "after", "2026-01-14T09:00:00Z"), {"bo"}),
    case(
        "datetime-before-with-offset",
        attr("datetime", "last_seen", "before", "2026-01-14T10:00:01+01:00"),
        {"ana", "cy"},
    ),
    case("datetime-today", attr("datetime", "last_seen", "today"), {"bo"}),
    case(
        "datetime-exists", attr("datetime", "last_seen", "exists"), {"ana", "bo", "cy"}
    ),  # ed's is not a date-time
    # ---- dynamic values: another attribute of the same user --------------------------------------
    case(
        "dynamic-string-is",
        attr("string", "first_name", "is", "{{UserAttribute['alias']}}", is_dynamic_value=True),
        {"ana"},
    ),
    case(
        "dynamic-date-before",
        attr("datetime", "last_seen", "before", "{{ user.renewal }}", is_dynamic_value=True),
        {"ana", "bo"},
    ),
    case(
        "dynamic-missing-attribute",
        attr("string", "city", "is", "{{UserAttribute['nothing']}}", is_dynamic_value=True, negate=True),
        EVERYONE,
    ),
    # ---- actions ----------------------------------------------------------------------------------
    case("action-executed", action("Added To Cart"), {"ana", "bo", "ed"}),
    case("action-not-executed", action("Added To Cart", executed=False), {"cy", "di"}),
    case(
        "action-at-least", action("Added To Cart", execution={"type": "atleast", "count": 2}), {"ana", "ed"}
    ),
    case(
        "action-at-least-zero", action("Added To Cart", execution={"type": "atleast", "count": 0}), EVERYONE
    ),
    case(
        "action-at-most-includes-users-without-events",
        action("Added To Cart", execution={"type": "atmost", "count": 1}),
        {"bo", "cy", "di"},
    ),
    case("action-exactly", action("Added To Cart", execution={"type": "exactly", "count": 3}), {"ana"}),
    case(
        "action-exactly-zero",
        action("Purchased", execution={"type": "exactly", "count": 0}),
        {"bo", "di", "ed"},
    ),
    case(
        "action-with-attributes",
        action(
            "Added To Cart",
            execution={"type": "atleast", "count": 1},
            attributes={"filter_operator": "and", "filters": [attr("double", "price", "greaterThan", 100)]},
        ),
        {"ana", "ed"},  # ed: one element of the price array is above 100
    ),
    case(
        "action-with-attributes-counted",
        action(
            "Added To Cart",
            execution={"type": "atleast", "count": 2},
            attributes={
                "filter_operator": "or",
                "filters": [
                    attr("double", "price", "greaterThan", 100),
                    attr("string", "category", "is", "shoes"),
                ],
            },
        ),
        {"ana", "ed"},
    ),
    case(
        "action-with-dynamic-attribute",
        action(
            "Added To Cart",
            execution={"type": "exactly", "count": 2},
            attributes={
                "filter_operator": "and",
                "filters": [
                    attr("string", "payment", "is", "{{UserAttribute['pref_pay']}}", is_dynamic_value=True)
                ],
            },
        ),
        {"ana"},  # UPI and upi; bo has one
    ),
    # ---- custom segments --------------------------------------------------------------------------
    case("segment-static", segment("static1"), {"ana", "di"}),
    case("segment-filter", segment("vips"), {"ana", "ed"}),
    case("segment-of-segments", segment("vip_testers"), {"ana", "di", "ed"}),
    # ---- nesting ----------------------------------------------------------------------------------
    group_case(
        "and-of-filters",
        "and",
        [attr("string", "city", "is", "pune"), attr("double", "ltv", "greaterThan", 100)],
        {"ana"},
    ),
    group_case(
        "or-of-filters",
        "or",
        [
            attr("string", "city", "is", "mumbai"),
            action("Added To Cart", execution={"type": "exactly", "count": 1}),
        ],
        {"bo", "cy"},
    ),
    group_case("empty-and-is-everyone", "and", [], EVERYONE),
    group_case("empty-or-is-nobody", "or", [], set()),
    group_case(
        "or-of-segment-and-action",
        "or",
        [segment("static1"), action("Purchased", execution={"type": "atleast", "count": 2})],
        {"ana", "cy", "di"},
    ),
    group_case(
        "and-with-not-executed",
        "and",
        [action("Purchased", executed=False), attr("string", "email", "exists")],
        {"bo", "di", "ed"},
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_filter_selects(app: FastAPI, case: Case) -> None:
    group = filter_group(case.filter_operator, case.filters)
    workspace_id = await seed(app, USERS, EVENTS, SEGMENTS)
    now = services(app).clock.now()
    found, problems = await matching(app, workspace_id, group, now)
    assert problems == []
    assert found == case.expected
    reference = Reference(USERS, EVENTS, {s.definition.id: s for s in SEGMENTS}, now=now)
    assert reference.matching(group) == case.expected


def test_every_operator_of_the_spec_table_has_cases() -> None:
    covered = {
        (item["data_type"], item["operator"])
        for param in CASES
        for item in param.values[0].filters
        if item["filter_type"] == "user_attributes"
    }
    wanted = {(data_type.value, op.value) for data_type, ops in OPERATORS_BY_DATA_TYPE.items() for op in ops}
    assert wanted <= covered
