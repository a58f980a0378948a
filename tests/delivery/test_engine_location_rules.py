"""The pure geofence rules: haversine distance and the crossings a position update makes."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from herald.campaigns.schemas.basic_details import GeofenceTrigger
from herald.campaigns.schemas.scheduling import SchedulingDetails
from herald.delivery.engine.location import (
    EARTH_RADIUS_M,
    Fence,
    crossings,
    distance_m,
    position,
    time_limit_of,
)

lat = st.floats(min_value=-89.0, max_value=89.0)
lon = st.floats(min_value=-179.0, max_value=179.0)
AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def fence(kind: GeofenceTrigger, radius: float = 200.0) -> Fence:
    return Fence("shop", 48.8566, 2.3522, radius, kind, timedelta(minutes=30), timedelta(minutes=10))


def test_known_distance() -> None:
    # One degree of latitude is about 111.2 km on the mean-radius sphere.
    assert abs(distance_m(0.0, 0.0, 1.0, 0.0) - 111_195) < 5
    assert abs(distance_m(48.8566, 2.3522, 51.5074, -0.1278) - 343_500) < 1_000  # two capitals


@given(st.floats(min_value=-80.0, max_value=80.0), st.floats(min_value=1.0, max_value=5_000.0))
def test_a_point_on_the_circle_is_inside(latitude: float, radius: float) -> None:
    # Due north of the centre by exactly `radius` metres (the haversine's own arc on a meridian).
    on_circle = latitude + math.degrees(radius / EARTH_RADIUS_M)
    shop = Fence("shop", latitude, 2.0, radius, GeofenceTrigger.ENTRY, timedelta(0), timedelta(0))
    assert shop.contains((on_circle, 2.0))
    assert not shop.contains((latitude + math.degrees((radius + 0.01) / EARTH_RADIUS_M), 2.0))


@given(lat, lon, lat, lon)
def test_distance_is_symmetric_and_non_negative(a: float, b: float, c: float, d: float) -> None:
    there, back = distance_m(a, b, c, d), distance_m(c, d, a, b)
    assert there >= 0
    assert abs(there - back) < 1e-6
    assert distance_m(a, b, a, b) == 0


@given(st.sampled_from(list(GeofenceTrigger)), st.booleans(), st.booleans())
def test_only_a_change_of_side_crosses(kind: GeofenceTrigger, was_in: bool, is_in: bool) -> None:
    inside, outside = (48.8570, 2.3525), (48.9, 2.4)
    found = crossings([fence(kind)], inside if was_in else outside, inside if is_in else outside, AT)
    if was_in == is_in:
        assert found == []
    elif kind is GeofenceTrigger.ENTRY:
        assert [(c.transition, c.due) for c in found] == (
            [("ENTRY", AT + timedelta(minutes=10))] if is_in else []
        )
    elif kind is GeofenceTrigger.EXIT:
        assert [(c.transition, c.due) for c in found] == (
            [] if is_in else [("EXIT", AT + timedelta(minutes=10))]
        )
    else:  # dwell: entering schedules it after dwell + response, leaving cancels it (due None)
        assert [(c.transition, c.due) for c in found] == [
            ("DWELL", AT + timedelta(minutes=40) if is_in else None)
        ]


def test_no_previous_position_counts_as_outside() -> None:
    assert [c.transition for c in crossings([fence(GeofenceTrigger.ENTRY)], None, (48.8570, 2.3525), AT)] == [
        "ENTRY"
    ]


def test_position_needs_both_coordinates_in_range() -> None:
    assert position({"latitude": "48.5", "longitude": 2}) == (48.5, 2.0)
    assert position({"latitude": 91, "longitude": 0}) is None
    assert position({"latitude": 1}) is None
    assert position({"latitude": "x", "longitude": 0}) is None
    assert position({"latitude": True, "longitude": True}) is None  # not (1.0, 1.0)
    assert position({"latitude": 1, "longitude": False}) is None
    assert position(None) is None


def test_a_bound_mixing_a_time_of_day_and_a_date_time_is_no_window_not_an_error() -> None:
    # Stored before create and publish refused it: raised here, it failed every batch of the
    # campaign's position updates, which were lost with it.
    details = SchedulingDetails.model_validate(
        {
            "timezone": "Europe/Paris",
            "geo_fence_timelimit": {
                "notification_schedule": "LIMITED_TIME",
                "timebounds": [
                    {"start_time": "10:00", "end_time": "2026-03-05T10:00:00Z"},
                    {"start_time": "12:00", "end_time": "13:00"},
                ],
            },
        }
    )
    within = time_limit_of(details)
    assert within is not None
    assert within(datetime(2026, 3, 2, 11, 30, tzinfo=UTC))  # 12:30 in Paris: the readable bound
    assert not within(datetime(2026, 3, 2, 9, 30, tzinfo=UTC))  # 10:30 in Paris: only the mixed one
