"""The compiled SQL selects exactly what the reference evaluator does, on random audiences and filters.

Examples are derandomized (the same ones on every run and machine) and bounded in size; each one is
seeded into a workspace of its own in the test database (SQLite, or PostgreSQL when
HERALD_TEST_DATABASE_URL is set), so both engines are held to the one reference.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.audience.segmentation.reference import Reference
from herald.campaigns.schemas.filters import FilterGroup

from .seed import audience_count, matching, seed
from .strategies import events, groups, nows, segments, users

SEGMENT_IDS = ["static", "dynamic"]
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@st.composite
def audiences(draw: st.DrawFn) -> dict[str, Any]:
    people = draw(users())
    ids = [user.customer_id for user in people]
    return {
        "users": people,
        "events": draw(events(ids)),
        "segments": draw(segments(ids)),
        "now": draw(nows()),
    }


@st.composite
def segmentations(draw: st.DrawFn) -> dict[str, Any]:
    segmentation: dict[str, Any] = {}
    for key in ("included_filters", "excluded_filters"):
        if draw(st.booleans()):
            segmentation[key] = draw(groups(SEGMENT_IDS))
    for key in ("is_all_user_campaign", "send_campaign_to_opt_out_users"):
        flag = draw(st.sampled_from([None, False, True]))
        if flag is not None:
            segmentation[key] = flag
    return segmentation


def _reference(audience: dict[str, Any]) -> Reference:
    segments = {segment.definition.id: segment for segment in audience["segments"]}
    return Reference(audience["users"], audience["events"], segments, now=audience["now"])


# Hypothesis draws everything before the test's coroutine starts: a draw inside it could stop the
# example with a BaseException, which the async runner does not survive.
@pytest.mark.anyio
@SETTINGS
@given(audience=audiences(), raw_group=groups(SEGMENT_IDS))
async def test_compiled_filters_select_what_the_reference_selects(
    app: FastAPI, audience: dict[str, Any], raw_group: dict[str, Any]
) -> None:
    group = FilterGroup.model_validate(raw_group)
    workspace_id = await seed(app, audience["users"], audience["events"], audience["segments"])
    found, problems = await matching(app, workspace_id, group, audience["now"])
    assert problems == []
    reference = _reference(audience)
    assert found == reference.matching(group)


# A trigger evaluates only the users of its batch, where "did it / did it not" compiles to a probe
# per user instead of a count: the same answer, among those users.
@pytest.mark.anyio
@settings(SETTINGS, max_examples=100)
@given(audience=audiences(), raw_group=groups(SEGMENT_IDS), picks=st.lists(st.booleans(), max_size=12))
async def test_compiled_filters_for_given_users_select_what_the_reference_selects_among_them(
    app: FastAPI, audience: dict[str, Any], raw_group: dict[str, Any], picks: list[bool]
) -> None:
    group = FilterGroup.model_validate(raw_group)
    workspace_id = await seed(app, audience["users"], audience["events"], audience["segments"])
    given_users = [user.customer_id for user, picked in zip(audience["users"], picks, strict=False) if picked]
    found, problems = await matching(app, workspace_id, group, audience["now"], customers=given_users)
    assert problems == []
    reference = _reference(audience)
    assert found == reference.matching(group) & set(given_users)


@pytest.mark.anyio
@settings(SETTINGS, max_examples=60)
@given(
    audience=audiences(),
    segmentation=segmentations(),
    channel=st.sampled_from(["PUSH", "EMAIL", "SMS"]),
    reachable_only=st.booleans(),
)
async def test_audience_counts_match_the_reference(
    app: FastAPI, audience: dict[str, Any], segmentation: dict[str, Any], channel: str, reachable_only: bool
) -> None:
    workspace_id = await seed(app, audience["users"], audience["events"], audience["segments"])
    count = await audience_count(
        app, workspace_id, channel, segmentation, audience["now"], reachable_only=reachable_only
    )
    reference = _reference(audience)
    assert count == len(reference.audience(segmentation, channel, reachable_only=reachable_only))
