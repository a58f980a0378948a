"""Push reachability after ingestion: a user is in a Push audience with a token for one of the
campaign's platforms, or with a bare `push_id` and no per-platform token at all. The audience reads
it from the user's row (`push_platforms`), which ingestion keeps with the tokens; these tests check
it against the tokens themselves, as ingestion leaves them after adds, replacements and removals."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select

from herald.audience import store
from herald.audience.ingest import parse_customer
from herald.audience.models import User
from herald.audience.segmentation import audience_query, load_segments
from herald.audience.segmentation.audience import Reach, audience_count_query, audience_counts_query

from .audience_fixtures import attr
from .seed import seed, services

# Customer writes in order (id, attributes), each applied as ingestion applies it.
WRITES: list[tuple[str, dict[str, Any]]] = [
    ("and", {"push_id": "t-and", "platform": "ANDROID"}),
    ("ios", {"push_id": "t-ios", "platform": "ios"}),
    ("both", {"push_id": "t-b1", "platform": "ANDROID"}),
    ("both", {"push_id": "t-b2", "platform": "IOS"}),
    ("web", {"push_id": "t-web", "platform": "WEB"}),
    ("bare", {"push_id": "t-bare"}),  # no platform: reached on any platform of a campaign
    ("mail", {"email": "m@example.com"}),
    ("blank", {"push_id": ""}),
    ("gone", {"push_id": "t-g", "platform": "ANDROID"}),
    ("gone", {"push_id": None}),  # removes every token of the user
    ("dropped", {"push_id": "t-d1", "platform": "ANDROID"}),
    ("dropped", {"push_id": "t-d2", "platform": "IOS"}),
    ("dropped", {"push_id": None, "platform": "IOS"}),  # removes the IOS token only
    ("later", {"push_id": "t-l"}),
    ("later", {"platform": "WEB"}),  # names the platform of the push_id stored before
    # A new platform alone: the push_id stored is the IOS device's token, not the new one's.
    ("switched", {"push_id": "t-s", "platform": "IOS"}),
    ("switched", {"platform": "ANDROID"}),
    ("renewed", {"push_id": "t-r1", "platform": "IOS"}),
    ("renewed", {"platform": "ANDROID"}),
    ("renewed", {"push_id": "t-r2"}),  # the new device's token, on the platform stored
    ("opted", {"push_id": "t-o", "platform": "ANDROID", "push_opt_out": True}),
    ("vip", {"push_id": "t-v", "platform": "IOS", "vip": True}),
]

PLATFORMS = [(), ("ANDROID",), ("IOS",), ("WEB",), ("ANDROID", "IOS"), ("TV",)]
NOT_VIP = {"filter_operator": "and", "filters": [attr("bool", "vip", "is", True)]}
SEGMENTATIONS = [
    {"is_all_user_campaign": True},
    {"is_all_user_campaign": True, "excluded_filters": NOT_VIP},
    {"is_all_user_campaign": True, "send_campaign_to_opt_out_users": True},
]


async def ingest(app: FastAPI, *, together: bool = False) -> str:
    """`WRITES` applied one by one, or `together` in one batch (as an import batch or a transition
    of several objects writes them: a user with a write per device)."""
    workspace_id = await seed(app, [])
    herald = services(app)
    writes = []
    for customer_id, attributes in WRITES:
        write, problems = parse_customer(
            {"type": "customer", "customer_id": customer_id, "attributes": attributes}
        )
        assert write is not None, problems
        writes.append(write)
    for batch in [writes] if together else [[write] for write in writes]:
        async with herald.database.writer() as session:
            await store.write_customers(session, workspace_id, batch, herald.clock.now())
            await session.commit()
    return workspace_id


async def expected(
    app: FastAPI, workspace_id: str, platforms: tuple[str, ...], segmentation: dict[str, Any]
) -> set[str]:
    """The audience by its definition, from the stored tokens and users (not from `push_platforms`)."""
    async with services(app).database.reader() as session:
        users = (await session.scalars(select(User).where(User.workspace_id == workspace_id))).all()
        tokens = await store.push_tokens(
            await session.connection(), workspace_id, [user.customer_id for user in users]
        )
    wanted = set(platforms) if platforms else set(store.PLATFORMS)
    found: set[str] = set()
    for user in users:
        held = set(tokens.get(user.customer_id, {}))
        if not (held & wanted or (not held and user.push_id)):
            continue
        if user.push_opt_out and not segmentation.get("send_campaign_to_opt_out_users"):
            continue
        if "excluded_filters" in segmentation and user.attributes.get("vip") is True:
            continue
        found.add(user.customer_id)
    return found


@pytest.mark.parametrize("together", [False, True], ids=["one-by-one", "one-batch"])
async def test_the_stored_tokens_are_the_ones_ingestion_leaves(app: FastAPI, together: bool) -> None:
    workspace_id = await ingest(app, together=together)
    async with services(app).database.reader() as session:
        tokens = await store.push_tokens(
            await session.connection(), workspace_id, [customer_id for customer_id, _ in WRITES]
        )
    assert {customer_id: set(held) for customer_id, held in tokens.items()} == {
        "and": {"ANDROID"},
        "ios": {"IOS"},
        "both": {"ANDROID", "IOS"},
        "web": {"WEB"},
        "dropped": {"ANDROID"},
        "later": {"WEB"},
        "switched": {"IOS"},
        "renewed": {"ANDROID", "IOS"},
        "opted": {"ANDROID"},
        "vip": {"IOS"},
    }


@pytest.mark.parametrize("segmentation", SEGMENTATIONS, ids=["all", "excluded", "opted-out-too"])
async def test_the_push_audience_is_the_users_with_a_token_for_a_platform_or_a_bare_push_id(
    app: FastAPI, segmentation: dict[str, Any]
) -> None:
    workspace_id = await ingest(app)
    now = services(app).clock.now()
    async with services(app).database.reader() as session:
        dialect = session.get_bind().dialect.name
        catalog = await load_segments(session, workspace_id, [])
        for platforms in PLATFORMS:
            reach = Reach(platforms=platforms)
            want = await expected(app, workspace_id, platforms, segmentation)
            rules: dict[str, Any] = {"dialect": dialect, "segments": catalog, "reach": reach}
            query = audience_query(segmentation, "PUSH", workspace_id, now, reachable_only=True, **rules)
            assert set((await session.scalars(query)).all()) == want, platforms
            counted = audience_count_query(
                segmentation, "PUSH", workspace_id, now, reachable_only=True, **rules
            )
            assert (await session.execute(counted)).scalar_one() == len(want), platforms
            counts = audience_counts_query(segmentation, "PUSH", workspace_id, now, **rules)
            assert (await session.execute(counts)).one()[3] == len(want), platforms
    if segmentation == SEGMENTATIONS[0]:
        # The cases are told apart: a campaign's platforms change who is reached.
        assert await expected(app, workspace_id, ("ANDROID",), segmentation) == {
            "and",
            "both",
            "bare",
            "dropped",
            "renewed",
        }
        assert await expected(app, workspace_id, ("IOS",), segmentation) == {
            "ios",
            "both",
            "bare",
            "vip",
            "switched",
            "renewed",
        }
