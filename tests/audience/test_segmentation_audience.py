"""Audiences: included minus excluded, all users, opt-outs per channel, reachability of a campaign."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.audience.reachability import reachability_count
from herald.audience.segmentation import audience_query, load_segments
from herald.audience.segmentation.audience import Reach, audience_count_query, audience_counts_query
from herald.audience.segmentation.reference import Reference
from herald.campaigns import repository
from herald.errors import NotFound, ValidationFailed
from tests.factories import make_tenant

from .audience_fixtures import EVENTS, SEGMENTS, USERS, action, attr, segment
from .seed import audience_count, seed, services

# Opt-outs in USERS: bo (push), cy (sms), di (email). Addresses: email ana bo di ed; push_id ana bo;
# mobile ana cy.
PUNE_OR_MUMBAI = {"filter_operator": "or", "filters": [attr("string", "city", "in", ["pune", "mumbai"])]}
BOUGHT = {"filter_operator": "and", "filters": [action("Purchased")]}


def details(**fields: Any) -> dict[str, Any]:
    return fields


@pytest.mark.parametrize(
    ("channel", "segmentation", "reachable_only", "expected"),
    [
        pytest.param(
            "EMAIL", details(included_filters=PUNE_OR_MUMBAI), False, {"ana", "bo", "cy", "ed"}, id="included"
        ),
        pytest.param(
            "EMAIL",
            details(included_filters=PUNE_OR_MUMBAI, excluded_filters=BOUGHT),
            False,
            {"bo", "ed"},
            id="included-minus-excluded",
        ),
        pytest.param(
            "EMAIL", details(is_all_user_campaign=True), False, {"ana", "bo", "cy", "ed"}, id="all-email"
        ),
        pytest.param(
            "PUSH", details(is_all_user_campaign=True), False, {"ana", "cy", "di", "ed"}, id="all-push"
        ),
        pytest.param(
            "SMS", details(is_all_user_campaign=True), False, {"ana", "bo", "di", "ed"}, id="all-sms"
        ),
        pytest.param(
            "PUSH",
            details(is_all_user_campaign=True, send_campaign_to_opt_out_users=True),
            False,
            {"ana", "bo", "cy", "di", "ed"},
            id="opted-out-too",
        ),
        pytest.param(
            "EMAIL",
            details(is_all_user_campaign=True, included_filters=BOUGHT, excluded_filters=BOUGHT),
            False,
            {"bo", "ed"},
            id="all-users-ignores-included-keeps-excluded",
        ),
        pytest.param("EMAIL", details(is_all_user_campaign=False), False, set(), id="no-filters-nobody"),
        pytest.param(
            "EMAIL",
            details(included_filters={"filter_operator": "and", "filters": []}),
            False,
            set(),
            id="empty-included-nobody",
        ),
        pytest.param(
            "EMAIL",
            details(
                included_filters=PUNE_OR_MUMBAI, excluded_filters={"filter_operator": "or", "filters": []}
            ),
            False,
            {"ana", "bo", "cy", "ed"},
            id="empty-excluded-excludes-nobody",
        ),
        pytest.param("EMAIL", None, False, {"ana", "bo", "cy", "ed"}, id="no-segmentation-is-all-users"),
        pytest.param(
            "EMAIL", details(is_all_user_campaign=True), True, {"ana", "bo", "ed"}, id="reachable-email"
        ),
        pytest.param("PUSH", details(is_all_user_campaign=True), True, {"ana"}, id="reachable-push"),
        pytest.param("SMS", details(is_all_user_campaign=True), True, {"ana"}, id="reachable-sms"),
        pytest.param(
            "EMAIL",
            details(
                included_filters={"filter_operator": "and", "filters": [segment("vip_testers")]},
                excluded_filters={
                    "filter_operator": "and",
                    "filters": [attr("bool", "vip", "is", True, negate=True)],
                },
            ),
            False,
            {"ana", "ed"},
            id="segments-and-negated-exclusion",
        ),
    ],
)
async def test_audience(
    app: FastAPI, channel: str, segmentation: dict[str, Any] | None, reachable_only: bool, expected: set[str]
) -> None:
    workspace_id = await seed(app, USERS, EVENTS, SEGMENTS)
    now = services(app).clock.now()
    count = await audience_count(app, workspace_id, channel, segmentation, now, reachable_only=reachable_only)
    assert count == len(expected)
    async with services(app).database.reader() as session:
        catalog = await load_segments(session, workspace_id, [segment_group(segmentation)])
        query = audience_query(
            segmentation,
            channel,
            workspace_id,
            now,
            dialect=session.get_bind().dialect.name,
            segments=catalog,
            reachable_only=reachable_only,
        )
        assert set((await session.scalars(query)).all()) == expected
    reference = Reference(USERS, EVENTS, {s.definition.id: s for s in SEGMENTS}, now=now)
    assert reference.audience(segmentation, channel, reachable_only=reachable_only) == expected


def segment_group(segmentation: dict[str, Any] | None) -> Any:
    from herald.campaigns.schemas.filters import FilterGroup

    merged = [
        item
        for key in ("included_filters", "excluded_filters")
        for item in ((segmentation or {}).get(key) or {}).get("filters", [])
    ]
    return FilterGroup.model_validate({"filter_operator": "and", "filters": merged})


@pytest.mark.parametrize(
    ("segmentation", "code", "target"),
    [
        pytest.param(
            details(
                included_filters={"filter_operator": "and", "filters": [attr("bool", "vip", "contains", "x")]}
            ),
            "INVALID_ENUM_VALUE",
            "segmentation_details.included_filters.filters.0.operator",
            id="operator",
        ),
        pytest.param(
            details(
                is_all_user_campaign=True,
                excluded_filters={
                    "filter_operator": "or",
                    "filters": [attr("double", "x", "in", 1), segment("gone")],
                },
            ),
            "INVALID_ENUM_VALUE",
            "segmentation_details.excluded_filters.filters.1.id",
            id="unknown-segment",
        ),
        pytest.param(
            details(is_all_user_campaign="yes"),
            "INVALID_TYPE",
            "segmentation_details.is_all_user_campaign",
            id="shape",
        ),
    ],
)
async def test_invalid_segmentation_is_400_at_the_field(
    app: FastAPI, segmentation: dict[str, Any], code: str, target: str
) -> None:
    workspace_id = await seed(app, USERS[:1])
    with pytest.raises(ValidationFailed) as raised:
        await audience_count(app, workspace_id, "EMAIL", segmentation, services(app).clock.now())
    assert raised.value.status == 400
    assert (code, target) in [(p.code, p.target) for p in raised.value.details]


async def test_reachability_of_a_stored_campaign(app: FastAPI, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(
        app, rate_limits={"campaign_create": "100/second", "campaign_create_success": "100/minute"}
    )
    await seed(app, USERS, EVENTS, SEGMENTS, workspace_id=tenant.workspace_id)
    body = {
        "channel": "PUSH",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "ana@example.com",
        "segmentation_details": {
            "included_filters": {
                "filter_operator": "or",
                "filters": [segment("vips"), action("Added To Cart")],
            },
            "excluded_filters": {
                "filter_operator": "and",
                "filters": [attr("string", "city", "is", "mumbai")],
            },
        },
    }
    created = await client.post("/v5/campaigns", json=body, headers=tenant.write_headers(campaigns=True))
    assert created.status_code == 201, created.text
    campaign_id = created.json()["data"]["id"]
    now = services(app).clock.now()
    async with services(app).database.reader() as session:
        campaign = await repository.get_latest(session, tenant.workspace_id, campaign_id)
        assert campaign is not None
        # vips {ana, ed} or carts {ana, bo, ed}; bo opted out of push; ed has no push id
        assert await reachability_count(session, tenant.workspace_id, campaign, now) == 1
        with pytest.raises(NotFound):
            await reachability_count(session, "another-workspace", campaign, now)


async def test_reachability_without_segmentation_counts_every_reachable_user(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app)
    await seed(app, USERS, workspace_id=tenant.workspace_id)
    body = {"channel": "EMAIL", "campaign_delivery_type": "EVENT_TRIGGERED", "created_by": "ana@example.com"}
    created = await client.post("/v5/campaigns", json=body, headers=tenant.write_headers(campaigns=True))
    assert created.status_code == 201, created.text
    async with services(app).database.reader() as session:
        campaign = await repository.get_latest(session, tenant.workspace_id, created.json()["data"]["id"])
        assert campaign is not None
        # e-mail addresses: ana bo di ed; di opted out of e-mail
        assert (
            await reachability_count(session, tenant.workspace_id, campaign, services(app).clock.now()) == 3
        )


async def test_a_campaign_with_a_bad_filter_value_is_400_at_its_path(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant(app)
    body = {
        "channel": "EMAIL",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "ana@example.com",
        "segmentation_details": {
            "included_filters": {
                "filter_operator": "and",
                "filters": [attr("datetime", "last_seen", "inTheLast", {"value": 7, "unit": "fortnights"})],
            }
        },
    }
    response = await client.post("/v5/campaigns", json=body, headers=tenant.write_headers(campaigns=True))
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert [(d["code"], d["target"]) for d in details] == [
        ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.0.value.unit")
    ]


@pytest.mark.parametrize("channel", ["EMAIL", "PUSH", "SMS"])
@pytest.mark.parametrize(
    "segmentation",
    [
        details(is_all_user_campaign=True),
        details(included_filters=PUNE_OR_MUMBAI, excluded_filters=BOUGHT),
        details(is_all_user_campaign=True, send_campaign_to_opt_out_users=True),
    ],
    ids=["all", "included-minus-excluded", "opted-out-too"],
)
async def test_the_counts_of_one_statement_are_the_counts_of_each_rule(
    app: FastAPI, channel: str, segmentation: dict[str, Any]
) -> None:
    workspace_id = await seed(app, USERS, EVENTS, SEGMENTS)
    now = services(app).clock.now()
    reach = Reach(subscription_category="news") if channel == "EMAIL" else Reach()
    async with services(app).database.reader() as session:
        catalog = await load_segments(session, workspace_id, [segment_group(segmentation)])
        dialect = session.get_bind().dialect.name

        async def count(given: dict[str, Any], **rules: bool) -> int:
            query = audience_count_query(
                given, channel, workspace_id, now, dialect=dialect, segments=catalog, reach=reach, **rules
            )
            return int((await session.execute(query)).scalar_one())

        everyone = {**segmentation, "send_campaign_to_opt_out_users": True}
        expected = (
            await count(everyone, subscribed_only=False),
            await count(segmentation, subscribed_only=False),
            await count(segmentation),
            await count(segmentation, reachable_only=True),
        )
        query = audience_counts_query(
            segmentation, channel, workspace_id, now, dialect=dialect, segments=catalog, reach=reach
        )
        assert tuple((await session.execute(query)).one()) == expected
    assert expected[0] >= expected[1] >= expected[3]
