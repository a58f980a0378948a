"""A small fixed audience for segmentation tests: five users, their events, custom segments, and
builders for filters. The tests' frozen clock reads 2026-01-15T12:00:00Z."""

from __future__ import annotations

from typing import Any

from herald.audience.segmentation.catalog import SegmentDefinition
from herald.audience.segmentation.reference import RefEvent, RefSegment, RefUser
from herald.campaigns.schemas.filters import FilterGroup

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
            "hometown": "İstanbul",  # "İ" (U+0130) lower-cases to "i", as on PostgreSQL
            'say "hi".now': "Hello",  # a name no JSON path can spell without quoting
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
            "hometown": "istanbul",
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
            "hometown": "ISTANBUL",
        },
    ),
    RefUser("di", {"email": "di@example.com", "email_opt_out": True, "first_name": "İdil"}, {}),
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


def filter_group(filter_operator: str, filters: list[dict[str, Any]]) -> FilterGroup:
    return FilterGroup.model_validate({"filter_operator": filter_operator, "filters": filters})


SEGMENTS = [
    RefSegment(SegmentDefinition("static1", "Testers", "static"), frozenset({"ana", "di", "ghost"})),
    RefSegment(
        SegmentDefinition(
            "vips",
            "VIPs",
            "filter",
            filter_group(
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
            filter_group(
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
            filter_group("and", [{"filter_type": "custom_segments", "name": "Loop B", "id": "loop_b"}]),
        )
    ),
    RefSegment(
        SegmentDefinition(
            "loop_b",
            "Loop B",
            "filter",
            filter_group("and", [{"filter_type": "custom_segments", "name": "Loop A", "id": "loop_a"}]),
        )
    ),
    RefSegment(
        SegmentDefinition(
            "broken",
            "Broken",
            "filter",
            filter_group(
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
