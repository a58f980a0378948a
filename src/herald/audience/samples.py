"""Sample audience for the demo workspace: 50 users, their recent events, two custom segments.

Deterministic (seeded), with times relative to `now` so that "in the last 7 days" filters find
someone. Written through the same store and segment functions as real data.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import segments, store
from herald.audience.attributes import utc_text
from herald.audience.ingest import CustomerWrite, EventWrite

USERS = 50
_FIRST = ["Ana", "Luis", "Maya", "Omar", "Lena", "Ravi", "Sofia", "Jon", "Aiko", "Chen"]
_LAST = ["Garcia", "Smith", "Kumar", "Okafor", "Novak"]
_CITIES = ["Madrid", "Lisbon", "Berlin", "Mumbai", "Austin"]
_TIMEZONES = ["Europe/Madrid", "Europe/Lisbon", "Europe/Berlin", "Asia/Kolkata", "America/Chicago"]
_PLANS = ["free", "basic", "premium", "gold"]
_PRODUCTS = [
    ("SKU-1001", "Trail shoes", 89.0),
    ("SKU-2002", "Rain jacket", 129.0),
    ("SKU-3003", "Backpack", 59.5),
]


def _user(index: int, rng: random.Random, now: datetime) -> CustomerWrite:
    first, last = _FIRST[index % len(_FIRST)], _LAST[index % len(_LAST)]
    customer_id = f"demo-user-{index + 1:03d}"
    columns: dict[str, Any] = {
        "first_name": first,
        "last_name": last,
        "email": f"{first.lower()}.{last.lower()}{index + 1}@example.com",
        "mobile": f"+1555010{index + 1:04d}",
        "gaid": f"00000000-0000-4000-8000-{index + 1:012d}",
        "push_id": f"demo-push-token-{index + 1:03d}",
        "timezone": _TIMEZONES[index % len(_TIMEZONES)],
        "email_opt_out": index % 10 == 9,
        "push_opt_out": index % 12 == 11,
        "sms_opt_out": False,
    }
    patch: dict[str, Any] = {
        "city": _CITIES[index % len(_CITIES)],
        "plan": _PLANS[index % len(_PLANS)],
        "ltv": round(rng.uniform(0, 600), 2),
        "orders": rng.randint(0, 12),
        "newsletter": index % 3 != 0,
        "signed_up": utc_text(now - timedelta(days=rng.randint(1, 400))),
        "interests": rng.sample(["running", "hiking", "travel", "books", "music"], 2),
    }
    return CustomerWrite(customer_id=customer_id, columns=columns, patch=patch)


def _events(user: CustomerWrite, rng: random.Random, now: datetime) -> list[EventWrite]:
    events: list[EventWrite] = []
    for _ in range(rng.randint(2, 10)):
        at = now - timedelta(days=rng.randint(0, 29), minutes=rng.randint(1, 1439))
        action = rng.choice(["app_open", "app_open", "viewed_product", "added_to_cart", "purchased"])
        attributes: dict[str, Any] = {}
        if action != "app_open":
            sku, name, price = rng.choice(_PRODUCTS)
            attributes = {"sku": sku, "product_name": name, "price": price}
        platform = rng.choice(["ANDROID", "IOS", "WEB"])
        events.append(EventWrite(user.customer_id, action, attributes, at, platform, "5.2.0"))
    return events


async def seed_demo_audience(session: AsyncSession, workspace_id: str, now: datetime) -> None:
    rng = random.Random(2026)
    users = [_user(index, rng, now) for index in range(USERS)]
    await store.write_customers(session, workspace_id, users, now)
    events = [event for user in users for event in _events(user, rng, now)]
    await store.insert_events(session, workspace_id, events, now)
    vip = [user.customer_id for user in users if user.patch["plan"] == "gold"]
    await segments.create_static_segment(session, now, workspace_id, "vip_customers", vip)
    newsletter = {
        "filter_operator": "and",
        "filters": [
            {
                "filter_type": "user_attributes",
                "data_type": "bool",
                "name": "newsletter",
                "operator": "is",
                "value": True,
            }
        ],
    }
    await segments.create_filter_segment(session, now, workspace_id, "newsletter_readers", newsletter)
