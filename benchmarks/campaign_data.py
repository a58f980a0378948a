"""A synthetic campaign library for benchmarks: N campaigns of one workspace, loaded in bulk.

Deterministic (seeded), so every run and engine sees the same rows. The mix: Push and Email mostly,
some SMS and WhatsApp; about 30 % drafts and 10 % archived; a few periodic children and flow nodes;
names drawn from twenty themes (so "diwali" matches about one in twenty); 0-2 tags; components of a
few KB as Herald stores them. PostgreSQL is loaded with COPY (asyncpg `copy_records_to_table`),
SQLite with the driver's `executemany` in one transaction. A workspace that already holds exactly N
campaigns is reused.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.common import sqlite_value, vacuum_analyze
from herald.campaigns.models import Campaign, CampaignTag

START = datetime(2025, 1, 1, tzinfo=UTC)
SPACING = timedelta(minutes=5)
BATCH = 10_000
THEMES = [
    "Spring sale",
    "Diwali offers",
    "Weekly digest",
    "Cart reminder",
    "Welcome series",
    "Price drop",
    "Back in stock",
    "Flash deal",
    "Loyalty points",
    "New arrivals",
    "Winback",
    "Birthday treat",
    "Order update",
    "Payday picks",
    "Monsoon specials",
    "App update",
    "Referral bonus",
    "Clearance",
    "Festive gifting",
    "Survey invite",
]
CITIES = ["Pune", "Mumbai", "Delhi", "Bengaluru", "Chennai", "Kolkata", "Hyderabad", "Jaipur"]
TAGS = ["festive", "retention", "promo", "transactional", "vip", "beta", "onboarding", "regional"]
MARKETERS = [f"marketer{index}@example.com" for index in range(20)]
STATUSES = [
    ("DRAFT", 30),
    ("SCHEDULED", 8),
    ("ACTIVE", 15),
    ("SENDING", 1),
    ("PAUSED", 4),
    ("SENT", 27),
    ("STOPPED", 5),
    ("ARCHIVED", 10),
]
CHANNELS = [("PUSH", 55), ("EMAIL", 35), ("SMS", 6), ("WHATSAPP", 4)]
DELIVERY_TYPES = {
    "PUSH": [("ONE_TIME", 50), ("PERIODIC", 15), ("EVENT_TRIGGERED", 25), ("LOCATION_TRIGGERED", 10)],
    "EMAIL": [("ONE_TIME", 55), ("PERIODIC", 15), ("EVENT_TRIGGERED", 20), ("BUSINESS_EVENT_TRIGGERED", 10)],
    "SMS": [("ONE_TIME", 70), ("EVENT_TRIGGERED", 30)],
    "WHATSAPP": [("ONE_TIME", 100)],
}
HTML = (
    "<html><body><h1>Hello {{ user.first_name | default('there') }}!</h1>"
    + "<p>Fresh picks for you this week, hand-chosen from what you loved last time.</p>" * 12
    + "{{ ContentBlock['footer'] }}</body></html>"
)


def workspace_id_for(campaigns: int) -> str:
    return f"BENCHSEARCH{campaigns}"


def row_id(index: int, created: datetime) -> str:
    """A 24-hex id ordered like Herald's (creation second first), fixed for `index`."""
    return f"{int(created.timestamp()):08x}be0c5ea7c4{index:06x}"


def _pick(rng: random.Random, weighted: list[tuple[str, int]]) -> str:
    return rng.choices([value for value, _ in weighted], [weight for _, weight in weighted])[0]


def _content(channel: str, name: str) -> dict[str, Any]:
    if channel == "PUSH":
        platform = {
            "template_type": "BASIC",
            "basic_details": {
                "title": f"{name}: {{{{UserAttribute['first_name']}}}}, this is for you",
                "message": "Tap to see what is new. Offer ends soon.",
                "summary": "Limited offer",
                "default_click_action": "DEEPLINK",
                "default_click_action_value": "shop://offers",
            },
            "buttons": [
                {"title": "Shop now", "click_action": "DEEPLINK", "click_action_value": "shop://sale"}
            ],
        }
        return {"push": {"android": platform, "ios": platform}}
    if channel == "EMAIL":
        return {
            "email": {
                "subject": f"{name}: picked for you",
                "preview_text": "Fresh picks inside",
                "sender_name": "Shop",
                "from_address": "news@shop.example.com",
                "html_content": HTML,
            }
        }
    return {channel.lower(): {"message": f"{name}: reply STOP to opt out."}}


def _campaign(workspace_id: str, index: int, rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    created = START + SPACING * index
    channel = _pick(rng, CHANNELS)
    delivery_type = _pick(rng, DELIVERY_TYPES[channel])
    status = _pick(rng, STATUSES)
    name = f"{rng.choice(THEMES)} {rng.choice(CITIES)} {index}"
    tags = rng.sample(TAGS, rng.randint(0, 2))
    start_at = created + timedelta(days=rng.randint(1, 30))
    expiry_at = start_at + timedelta(days=30)
    basic: dict[str, Any] = {"name": name, "tags": tags, "team": rng.choice(["Growth", "CRM", "Lifecycle"])}
    if channel == "PUSH":
        basic["platforms"] = ["ANDROID", "IOS"]
    components: dict[str, Any] = {
        "basic_details": basic,
        "campaign_content": {"content": _content(channel, name)},
        "scheduling_details": {
            "delivery_type": "AT_FIXED_TIME",
            "start_time": start_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "expiry_time": expiry_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "timezone": "Asia/Kolkata",
        },
        "segmentation_details": {"is_all_user_campaign": True},
    }
    if channel == "EMAIL":
        components["connector"] = {"connector_type": "CUSTOM_SMTP", "connector_name": "marketing-smtp"}
    # About 2 % periodic children (they point at an earlier campaign), about 3 % flow nodes.
    child = delivery_type == "PERIODIC" and index > 0 and rng.random() < 0.15
    flow = not child and rng.random() < 0.03
    identifier = row_id(index, created)
    row = {
        "workspace_id": workspace_id,
        "id": identifier,
        "campaign_id": identifier,
        "version_number": 1,
        "is_latest": True,
        "revision": 1,
        "channel": channel,
        "delivery_type": delivery_type,
        "status": status,
        "paused_from": "ACTIVE" if status == "PAUSED" else None,
        "name": name,
        "tags": tags,
        "created_by": rng.choice(MARKETERS),
        "updated_by": None,
        "created_at": created,
        "updated_at": created,
        "sent_time": start_at if status == "SENT" else None,
        "request_id": None,
        "flow_id": f"flow-{index % 500}" if flow else None,
        "flow_name": f"Journey {index % 500}" if flow else None,
        "parent_id": row_id(index - 1, created - SPACING) if child else None,
        "sender_name": "SHOPCO" if channel == "SMS" else None,
        "rejection_comment": None,
        "components": components,
        "start_at": start_at,
        "expiry_at": expiry_at,
    }
    return row, tags


def _rows(workspace_id: str, count: int) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Batches of (campaign rows, tag rows)."""
    rng = random.Random(20261122)
    campaigns: list[dict[str, Any]] = []
    tags: list[dict[str, Any]] = []
    for index in range(count):
        row, row_tags = _campaign(workspace_id, index, rng)
        campaigns.append(row)
        tags += [{"workspace_id": workspace_id, "tag": tag, "campaign_row_id": row["id"]} for tag in row_tags]
        if len(campaigns) == BATCH:
            yield campaigns, tags
            campaigns, tags = [], []
    if campaigns:
        yield campaigns, tags


async def _present(engine: AsyncEngine, workspace_id: str) -> int:
    async with engine.connect() as connection:
        found = await connection.scalar(
            select(func.count()).select_from(Campaign).where(Campaign.workspace_id == workspace_id)
        )
    return int(found or 0)


async def _load(engine: AsyncEngine, workspace_id: str, count: int) -> None:
    postgres = engine.dialect.name == "postgresql"
    loaded = 0
    async with engine.begin() as connection:
        for model in (CampaignTag, Campaign):
            await connection.execute(delete(model).where(model.workspace_id == workspace_id))
        raw = await connection.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        for campaigns, tags in _rows(workspace_id, count):
            for table, rows in (("campaigns", campaigns), ("campaign_tags", tags)):
                if not rows:
                    continue
                columns = list(rows[0])
                if postgres:
                    records = [
                        tuple(json.dumps(v) if isinstance(v, dict | list) else v for v in row.values())
                        for row in rows
                    ]
                    await driver.copy_records_to_table(table, records=records, columns=columns)
                else:
                    statement = (
                        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
                    )
                    driver.executemany(  # sqlite3 (herald.sqlite_inline)
                        statement, [tuple(sqlite_value(v) for v in row.values()) for row in rows]
                    )
            loaded += len(campaigns)
            print(f"\r  campaigns: {loaded:,} / {count:,}", end="", flush=True)
    print()


async def ensure_campaigns(engine: AsyncEngine, workspace_id: str, count: int) -> None:
    """`count` campaigns in the (existing) workspace, loaded unless exactly that many are there.

    Run it on an engine of its own, disposed before the measured app connects: on SQLite it removes
    the campaign tables' planner statistics, which a connection reads when it opens.
    """
    if await _present(engine, workspace_id) == count:
        print(f"reusing {count:,} campaigns of workspace {workspace_id}")
    else:
        started = time.perf_counter()
        await _load(engine, workspace_id, count)
        print(f"loaded {count:,} campaigns into {workspace_id} in {time.perf_counter() - started:.0f} s")
    if engine.dialect.name == "postgresql":
        await vacuum_analyze(engine, "campaigns, campaign_tags")
        return
    # Steady state of a Herald SQLite file: no statistics (Herald never runs ANALYZE). Another
    # benchmark's ANALYZE of the same file would otherwise change the plans measured here: with
    # statistics SQLite picks the (workspace_id, parent_id) index and sorts every row (README).
    async with engine.begin() as connection:
        has_stats = await connection.scalar(
            text("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'")
        )
        if has_stats:
            await connection.execute(
                text("DELETE FROM sqlite_stat1 WHERE tbl IN ('campaigns', 'campaign_tags')")
            )
