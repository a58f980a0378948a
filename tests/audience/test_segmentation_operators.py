"""Segmentation, operator by operator: who each filter selects from a small fixed audience.

Every case runs the compiled SQL on the test database and the reference evaluator, and both must
give the expected customers. The clock is the tests' frozen clock: 2026-01-15T12:00:00Z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI

from herald.audience.segmentation.catalog import SegmentDefinition
from herald.audience.segmentation.reference import Reference, RefEvent, RefSegment, RefUser
from herald.campaigns.schemas.filters import FilterGroup

from .seed import matching, seed, services

USERS = [
    RefUser(
        "ana",
        {"email": "Ana@Example.com", "first_name": "Ana", "mobile": "+911", "push_id": "p-ana"},
        {
            "city": "Pune",
            "ltv": 120.5,
            "vip": True,
            "last_seen": "2026-01-14T09:00:00Z",
            "renewal": "2026-01-20T00:00:00Z",
            "tags": ["gold", "Early"],
            "scores": [3, 10],
            "pref_pay": "UPI",
            "alias": "ANA",
        },
    ),
    RefUser(
        "bo",
        {"email": "bo@shop.io", "first_name": "Bo", "push_opt_out": True, "push_id": "p-bo"},
        {
            "city": "pune",
            "ltv": 80,
            "vip": False,
            "last_seen": "2026-01-15T11:59:59Z",
            "renewal": "2026-02-20T00:00:00Z",
            "tags": ["silver"],
            "scores": [1, 250],
            "pref_pay": "card",
        },
    ),
    RefUser(
        "cy",
        {"first_name": "Cyrille", "sms_opt_out": True, "mobile": "+913"},
        {
            "city": "Mumbai",
            "ltv": 999.99,
            "vip": "yes",
            "last_seen": "2025-12-01T00:00:00Z",
            "nickname": "Élodie",
        },
    ),
    RefUser("di", {"email": "di@example.com", "email_opt_out": True}, {}),
    RefUser(
        "ed",
        {"email": "ed@x.org", "first_name": "Ed"},
        {"city": ["Delhi", "Pune"], "ltv": "500", "vip": True, "last_seen": "not a date"},
    ),
]
EVERYONE = {"ana", "bo", "cy", "di", "ed"}
EVENTS = [
    RefEvent("ana", "Added To Cart", {"price": 50, "payment": "card"}),
    RefEvent("ana", "Added To Cart", {"price": 150, "payment": "UPI"}),
    RefEvent("ana", "Added To Cart", {"price": 300, "payment": "upi"}),
    RefEvent("ana", "Purchased", {"price": 300}),
    RefEvent("bo", "Added To Cart", {"price": 20, "payment": "card"}),
    RefEvent("cy", "Purchased", {"price": 10}),
    RefEvent("cy", "Purchased", {"price": 12}),
    RefEvent("ed", "Added To Cart", {"price": [10, 500], "category": "shoes"}),
    RefEvent("ed", "Added To Cart", {"price": 5, "category": "Shoes"}),
]


def _group(filter_operator: str, filters: list[dict[str, Any]]) -> FilterGroup:
    return FilterGroup.model_validate({"filter_operator": filter_operator, "filters": filters})


SEGMENTS = [
    RefSegment(SegmentDefinition("static1", "Testers", "static"), frozenset({"ana", "di", "ghost"})),
    RefSegment(
        SegmentDefinition(
            "vips",
            "VIPs",
            "filter",
            _group(
                "and",
                [
                    {
                        "filter_type": "user_attributes",
                        "data_type": "bool",
                        "name": "vip",
                        "operator": "is",
                        "value": True,
                    }
                ],
            ),
        )
    ),
    RefSegment(
        SegmentDefinition(
            "vip_testers",
            "VIP testers",
            "filter",
            _group(
                "or",
                [
                    {"filter_type": "custom_segments", "name": "VIPs", "id": "vips"},
                    {"filter_type": "custom_segments", "name": "Testers", "id": "static1"},
                ],
            ),
        )
    ),
    RefSegment(
        SegmentDefinition(
            "loop_a",
            "Loop A",
            "filter",
            _group("and", [{"filter_type": "custom_segments", "name": "Loop B", "id": "loop_b"}]),
        )
    ),
    RefSegment(
        SegmentDefinition(
            "loop_b",
            "Loop B",
            "filter",
            _group("and", [{"filter_type": "custom_segments", "name": "Loop A", "id": "loop_a"}]),
        )
    ),
    RefSegment(
        SegmentDefinition(
            "broken",
            "Broken",
            "filter",
            _group(
                "and",
                [
                    {
                        "filter_type": "user_attributes",
                        "data_type": "bool",
                        "name": "vip",
                        "operator": "in",
                        "value": True,
                    }
                ],
            ),
        )
    ),
]


def attr(data_type: str, name: str, operator: str, value: Any = None, **extra: Any) -> dict[str, Any]:
    item = {"filter_type": "user_attributes", "data_type": data_type, "name": name, "operator": operator}
    if value is not None:
        item["value"] = value
    return item | extra


def action(name: str, **extra: Any) -> dict[str, Any]:
    return {"filter_type": "actions", "action_name": name} | extra


def segment(segment_id: str) -> dict[str, Any]:
    return {"filter_type": "custom_segments", "name": segment_id, "id": segment_id}


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
    group = _group(case.filter_operator, case.filters)
    workspace_id = await seed(app, USERS, EVENTS, SEGMENTS)
    now = services(app).clock.now()
    found, problems = await matching(app, workspace_id, group, now)
    assert problems == []
    assert found == case.expected
    reference = Reference(USERS, EVENTS, {s.definition.id: s for s in SEGMENTS}, now=now)
    assert reference.matching(group) == case.expected


def test_every_operator_of_the_spec_table_has_cases() -> None:
    from herald.campaigns.schemas.filters import OPERATORS_BY_DATA_TYPE

    covered = {
        (item["data_type"], item["operator"])
        for param in CASES
        for item in param.values[0].filters
        if item["filter_type"] == "user_attributes"
    }
    wanted = {(data_type.value, op.value) for data_type, ops in OPERATORS_BY_DATA_TYPE.items() for op in ops}
    assert wanted <= covered


# ---- invalid filters: problems with the path of what is wrong ----------------------------------------

F = "filters.0"


@pytest.mark.parametrize(
    ("item", "code", "target"),
    [
        pytest.param(
            attr("bool", "vip", "in", [True]), "INVALID_ENUM_VALUE", f"{F}.operator", id="operator-vs-type"
        ),
        pytest.param(
            attr("double", "ltv", "lessThan"), "REQUIRED_FIELD_MISSING", f"{F}.value", id="value-missing"
        ),
        pytest.param(attr("bool", "vip", "is", "true"), "INVALID_TYPE", f"{F}.value", id="bool-not-bool"),
        pytest.param(
            attr("double", "ltv", "in", [1, "2"]), "INVALID_TYPE", f"{F}.value.1", id="double-list-item"
        ),
        pytest.param(attr("double", "ltv", "in", []), "OUT_OF_RANGE", f"{F}.value", id="double-empty-list"),
        pytest.param(
            attr("double", "ltv", "between", [5, 1]), "OUT_OF_RANGE", f"{F}.value", id="between-reversed"
        ),
        pytest.param(
            attr("double", "ltv", "between", 5), "INVALID_TYPE", f"{F}.value", id="between-not-a-pair"
        ),
        pytest.param(attr("string", "city", "is", ["a"]), "INVALID_TYPE", f"{F}.value", id="string-is-list"),
        pytest.param(
            attr("string", "city", "contains", ""), "OUT_OF_RANGE", f"{F}.value", id="contains-empty"
        ),
        pytest.param(
            attr("string", "city", "startWithInTheFollowing", ["a", 1]),
            "INVALID_TYPE",
            f"{F}.value.1",
            id="starts-item",
        ),
        pytest.param(
            attr("datetime", "d", "inTheLast", "7"), "INVALID_TYPE", f"{F}.value", id="window-not-number"
        ),
        pytest.param(
            attr("datetime", "d", "inTheLast", {"value": 7, "unit": "fortnights"}),
            "INVALID_ENUM_VALUE",
            f"{F}.value.unit",
            id="window-unit",
        ),
        pytest.param(
            attr("datetime", "d", "inTheNext", {"value": -1}),
            "OUT_OF_RANGE",
            f"{F}.value.value",
            id="window-negative",
        ),
        pytest.param(
            attr("datetime", "d", "inTheLast", {"value": 1, "every": 2}),
            "UNKNOWN_FIELD",
            f"{F}.value.every",
            id="window-unknown-key",
        ),
        pytest.param(
            attr("datetime", "d", "on", "15/01/2026"), "INVALID_TYPE", f"{F}.value", id="on-not-a-date"
        ),
        pytest.param(
            attr("datetime", "d", "between", ["2026-02-01", "2026-01-01"]),
            "OUT_OF_RANGE",
            f"{F}.value",
            id="dates-reversed",
        ),
        pytest.param(
            attr("datetime", "d", "between", ["2026-01-01", "soon"]),
            "INVALID_TYPE",
            f"{F}.value.1",
            id="between-item",
        ),
        pytest.param(
            attr("double", "ltv", "between", "{{UserAttribute['x']}}", is_dynamic_value=True),
            "INVALID_TYPE",
            f"{F}.value",
            id="dynamic-operator",
        ),
        pytest.param(
            attr("string", "city", "is", "{{ event.city }}", is_dynamic_value=True),
            "INVALID_TYPE",
            f"{F}.value",
            id="dynamic-not-a-user-attribute",
        ),
        pytest.param(segment("nope"), "INVALID_ENUM_VALUE", f"{F}.id", id="unknown-segment"),
        pytest.param(segment("loop_a"), "OUT_OF_RANGE", f"{F}.id", id="segment-cycle"),
        pytest.param(segment("broken"), "INVALID_ENUM_VALUE", f"{F}.id", id="segment-with-bad-filters"),
        pytest.param(
            action("Added To Cart", attributes={"filter_operator": "and", "filters": [segment("static1")]}),
            "INVALID_ENUM_VALUE",
            f"{F}.attributes.filters.0.filter_type",
            id="segment-inside-an-action",
        ),
        pytest.param(
            action(
                "Added To Cart",
                attributes={"filter_operator": "and", "filters": [attr("double", "price", "is", 1)]},
            ),
            "INVALID_ENUM_VALUE",
            f"{F}.attributes.filters.0.operator",
            id="nested-operator",
        ),
    ],
)
async def test_invalid_filter_is_a_problem_at_its_path(
    app: FastAPI, item: dict[str, Any], code: str, target: str
) -> None:
    workspace_id = await seed(app, USERS[:1], (), SEGMENTS)
    found, problems = await matching(app, workspace_id, _group("and", [item]), services(app).clock.now())
    assert found is None
    assert (code, target) in [(problem.code, problem.target) for problem in problems]


async def test_problems_carry_the_callers_path(app: FastAPI) -> None:
    from herald.audience.segmentation import compile_filter_group

    group = _group("or", [attr("string", "city", "is", "x"), attr("bool", "vip", "between", [1, 2])])
    query, problems = compile_filter_group(
        group,
        workspace_id="w",
        now=services(app).clock.now(),
        dialect="sqlite",
        path=("segmentation_details", "included_filters"),
    )
    assert query is None
    assert [p.target for p in problems] == ["segmentation_details.included_filters.filters.1.operator"]


async def test_another_workspaces_segment_is_unknown(app: FastAPI) -> None:
    other = await seed(app, USERS[:1], (), SEGMENTS[:1])
    assert other
    workspace_id = await seed(app, USERS, EVENTS)
    found, problems = await matching(
        app, workspace_id, _group("and", [segment("static1")]), services(app).clock.now()
    )
    assert found is None
    assert [(p.code, p.target) for p in problems] == [("INVALID_ENUM_VALUE", "filters.0.id")]


async def test_another_workspaces_users_and_events_are_never_counted(app: FastAPI) -> None:
    first = await seed(app, USERS, EVENTS)
    second = await seed(app, USERS[:2], EVENTS[:1])
    now = services(app).clock.now()
    group = _group("and", [action("Added To Cart", execution={"type": "atmost", "count": 1})])
    assert (await matching(app, first, group, now))[0] == {"bo", "cy", "di"}
    assert (await matching(app, second, group, now))[0] == {"ana", "bo"}
