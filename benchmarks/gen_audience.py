"""Write a deterministic audience as JSON Lines: users.jsonl and events.jsonl, for `herald audience import`.

    python benchmarks/gen_audience.py OUT_DIR --users 100000 --events 1000000 [--seed 7]

The same arguments always write the same bytes (seeded; times come from a fixed base, not the clock).
Users carry every standard attribute and a mix of custom ones (text, numbers, booleans, date-times,
arrays); events are spread over 2025 across users, with attributes that depend on the action, half
of them timed in epoch seconds and half in ISO 8601. Then, for example:

    herald workspaces create Bench --id BENCH
    time herald audience import OUT_DIR/users.jsonl OUT_DIR/events.jsonl --workspace BENCH
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

BASE = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp())
YEAR = 365 * 86400
FIRST_NAMES = ["Ana", "Luis", "Maya", "Omar", "Lena", "Ravi", "Sofia", "Jon", "Aiko", "Chen", "Nia", "Paul"]
LAST_NAMES = ["Garcia", "Smith", "Kumar", "Okafor", "Novak", "Rossi", "Tanaka", "Silva", "Berg", "Haddad"]
CITIES = ["Madrid", "Lisbon", "Berlin", "Mumbai", "Lagos", "Austin", "Osaka", "Lima", "Oslo", "Cairo"]
TIMEZONES = [
    "Europe/Madrid",
    "Europe/Lisbon",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Africa/Lagos",
    "America/Chicago",
]
PLANS = ["free", "basic", "premium", "gold"]
INTERESTS = ["shoes", "bags", "travel", "books", "music", "sports", "tech", "garden", "food", "kids"]
PLATFORMS = ["ANDROID", "IOS", "WEB"]
ACTIONS = ["app_open", "viewed_product", "added_to_cart", "purchased", "searched", "shared"]
WEIGHTS = [30, 30, 15, 8, 12, 5]
SKUS = [f"SKU-{n:04d}" for n in range(500)]


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def customer_id(index: int) -> str:
    return f"u{index:07d}"


def user(index: int, rng: random.Random) -> dict[str, Any]:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    attributes: dict[str, Any] = {
        "first_name": first,
        "last_name": last,
        "email": f"{first.lower()}.{last.lower()}.{index}@example.com",
        "mobile": f"+1555{index:07d}",
        "timezone": rng.choice(TIMEZONES),
        "email_opt_out": rng.random() < 0.08,
        "push_opt_out": rng.random() < 0.05,
        "city": rng.choice(CITIES),
        "plan": rng.choice(PLANS),
        "ltv": round(rng.uniform(0, 900), 2),
        "orders": rng.randint(0, 40),
        "vip": rng.random() < 0.1,
        "signed_up": iso(BASE - rng.randrange(3 * YEAR)),
        "interests": rng.sample(INTERESTS, rng.randint(0, 3)),
    }
    if rng.random() < 0.5:
        attributes["push_id"] = f"fcm:{rng.getrandbits(64):016x}"
    return {"type": "customer", "customer_id": customer_id(index), "attributes": attributes}


def _attributes(action: str, rng: random.Random) -> dict[str, Any]:
    if action in ("viewed_product", "added_to_cart"):
        return {"sku": rng.choice(SKUS), "price": round(rng.uniform(2, 300), 2)}
    if action == "purchased":
        return {
            "sku": rng.choice(SKUS),
            "price": round(rng.uniform(2, 300), 2),
            "quantity": rng.randint(1, 4),
            "coupon": rng.random() < 0.2,
        }
    if action == "searched":
        return {"query": rng.choice(INTERESTS)}
    if action == "shared":
        return {"channel": rng.choice(["whatsapp", "email", "link"])}
    return {}


def event(users: int, rng: random.Random) -> dict[str, Any]:
    action = rng.choices(ACTIONS, WEIGHTS)[0]
    at = BASE + rng.randrange(YEAR)
    return {
        "customer_id": customer_id(rng.randrange(users)),
        "action": action,
        "attributes": _attributes(action, rng),
        "occurred_at": at if rng.random() < 0.5 else iso(at),
        "platform": rng.choice(PLATFORMS),
        "app_version": f"5.{rng.randint(0, 9)}.0",
    }


def write(path: Path, count: int, make: Callable[[int], dict[str, Any]]) -> None:
    with path.open("wb") as handle:
        chunk: list[bytes] = []
        for index in range(count):
            chunk.append(orjson.dumps(make(index)))
            if len(chunk) == 10_000:
                handle.write(b"\n".join(chunk) + b"\n")
                chunk = []
        if chunk:
            handle.write(b"\n".join(chunk) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="directory to write users.jsonl and events.jsonl into")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    users_rng, events_rng = random.Random(args.seed), random.Random(args.seed + 1)
    write(args.out / "users.jsonl", args.users, lambda index: user(index, users_rng))
    write(args.out / "events.jsonl", args.events, lambda _index: event(args.users, events_rng))
    print(f"wrote {args.users} users and {args.events} events to {args.out}")


if __name__ == "__main__":
    main()
