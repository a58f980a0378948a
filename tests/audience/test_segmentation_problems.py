"""Invalid filters: each is a problem with the dot path of what is wrong, and compiles to no query."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from herald.audience.segmentation import compile_filter_group

from .audience_fixtures import EVENTS, SEGMENTS, USERS, action, attr, filter_group, segment
from .seed import matching, seed, services

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
    found, problems = await matching(
        app, workspace_id, filter_group("and", [item]), services(app).clock.now()
    )
    assert found is None
    assert (code, target) in [(problem.code, problem.target) for problem in problems]


async def test_problems_carry_the_callers_path(app: FastAPI) -> None:
    group = filter_group("or", [attr("string", "city", "is", "x"), attr("bool", "vip", "between", [1, 2])])
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
        app, workspace_id, filter_group("and", [segment("static1")]), services(app).clock.now()
    )
    assert found is None
    assert [(p.code, p.target) for p in problems] == [("INVALID_ENUM_VALUE", "filters.0.id")]


async def test_another_workspaces_users_and_events_are_never_counted(app: FastAPI) -> None:
    first = await seed(app, USERS, EVENTS)
    second = await seed(app, USERS[:2], EVENTS[:1])
    now = services(app).clock.now()
    group = filter_group("and", [action("Added To Cart", execution={"type": "atmost", "count": 1})])
    assert (await matching(app, first, group, now))[0] == {"bo", "cy", "di"}
    assert (await matching(app, second, group, now))[0] == {"ana", "bo"}
