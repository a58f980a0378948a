"""Campaign create (C1): Herald's `POST /v5/campaigns` vs a bare Starlette route, same service call.

    python -m benchmarks.campaign_create [--database-url URL] [--requests 1000] [--concurrency 4]

Both sides create the same representative Push draft (Android + iOS content, an audience, a schedule,
delivery controls, a goal, UTM parameters; about 2 KB of JSON) with a new `request_id` each call.

- Herald: the whole app — request id, body guards, unit of work, authentication, rate limits (opened
  wide for the benchmark workspace, so no 429), the Idempotency-Key (a new one each call) and the
  success quota.
- bare: a Starlette route that reads the JSON body, calls the same `campaigns.service.create_campaign`
  (which parses it with the same Pydantic models and validates it) on a session of the same engine,
  and commits. Nothing else.

Both are driven in-process through httpx's ASGI transport by `--concurrency` callers, in alternating
turns, and the ratio of the p50 latencies is printed (target <= 1.2).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
from sqlalchemy import delete
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmarks.common import (
    Credentials,
    Figure,
    argument_parser,
    prepare_workspace,
    summary,
    table,
    timed_turns,
)
from herald.campaigns import service
from herald.campaigns.models import Campaign, CampaignRequestId, CampaignTag
from herald.config import Settings
from herald.db import Database
from herald.http.idempotency import IdempotencyRecord
from herald.main import create_app
from herald.services import Services
from herald.workspaces.features import enabled_features
from herald.workspaces.models import Workspace

WORKSPACE = "BENCHCREATE"


def _platform(title: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "template_type": "BASIC",
        "basic_details": {
            "title": title,
            "message": message,
            "summary": "Limited offer",
            "image_url": "https://cdn.example.com/sale.png",
            "default_click_action": "DEEPLINK",
            "default_click_action_value": "shop://sale",
            "key_value_pairs": [{"key": "source", "value": "campaign"}],
        },
        "buttons": [{"title": "Shop now", "click_action": "DEEPLINK", "click_action_value": "shop://sale"}],
        **extra,
    }


def create_body(request_id: str) -> dict[str, Any]:
    """A Push one-time draft as a marketer would save it: every common component, valid at publish."""
    return {
        "channel": "PUSH",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "marketer@example.com",
        "request_id": request_id,
        "basic_details": {
            "name": "Diwali Sale Blast",
            "platforms": ["ANDROID", "IOS"],
            "tags": ["festive", "sale"],
            "team": "Growth",
        },
        "campaign_content": {
            "content": {
                "push": {
                    "android": _platform(
                        "Hi {{UserAttribute['first_name']}}!",
                        "The Diwali sale is live.",
                        notification_channel="promotions",
                    ),
                    "ios": _platform("Hi {{UserAttribute['first_name']}}!", "The Diwali sale is live."),
                }
            }
        },
        "segmentation_details": {
            "included_filters": {
                "filter_operator": "and",
                "filters": [
                    {
                        "filter_type": "user_attributes",
                        "data_type": "string",
                        "name": "city",
                        "operator": "in",
                        "value": ["Pune", "Bengaluru"],
                        "case_sensitive": False,
                    },
                    {
                        "filter_type": "actions",
                        "action_name": "Added To Cart",
                        "execution": {"type": "atleast", "count": 1},
                        "executed": True,
                    },
                ],
            },
            "is_all_user_campaign": False,
            "send_campaign_to_opt_out_users": False,
        },
        "scheduling_details": {
            "delivery_type": "AT_FIXED_TIME",
            "start_time": "2030-10-20T09:30:00",
            "expiry_time": "2030-10-22T23:59:00",
            "timezone": "Asia/Kolkata",
        },
        "delivery_controls": {
            "bypass_dnd": False,
            "campaign_throttle_rpm": 50000,
            "count_for_frequency_capping": True,
            "ignore_frequency_capping": False,
        },
        "conversion_goal_details": {
            "attribution_window_in_hours": 36,
            "goals": [
                {
                    "goal_name": "Purchase",
                    "goal_event_name": "Order Completed",
                    "is_primary_goal": True,
                    "revenue_attribute": "order_value",
                    "revenue_currency": "INR",
                }
            ],
        },
        "utm_params": {"utm_source": "herald", "utm_medium": "push", "utm_campaign": "diwali_2030"},
    }


async def clear_workspace(database: Database) -> None:
    """Forget the drafts, request ids and idempotency records of earlier runs (each run starts alike)."""
    async with database.writer() as session:
        for table_ in (CampaignTag, CampaignRequestId, Campaign, IdempotencyRecord):
            await session.execute(delete(table_).where(table_.workspace_id == WORKSPACE))
        await session.commit()


def bare_app(database: Database, features: frozenset[str]) -> Starlette:
    """The same service call as Herald's C1, on a session of the same engine, with nothing around it."""
    workspace = service.Workspace(id=WORKSPACE, features=features)

    async def no_quota() -> None:
        return None

    async def create(request: Request) -> Response:
        raw = orjson.loads(await request.body())
        async with database.writer() as session:
            campaign_id, status = await service.create_campaign(
                session, workspace, raw, datetime.now(UTC), no_quota
            )
            await session.commit()
        return Response(
            orjson.dumps({"id": campaign_id, "status": status}), 201, media_type="application/json"
        )

    return Starlette(routes=[Route("/campaigns", create, methods=["POST"])])


async def main(database_url: str, requests: int, concurrency: int) -> None:
    settings = Settings(database_url=database_url, redis_url=None, db_pool_size=20, log_level="warning")
    print(f"campaign create benchmark on {database_url.split('://')[0]}: {requests} creates per side")
    credentials: Credentials = await prepare_workspace(settings, WORKSPACE)
    herald = create_app(settings)
    services: Services = herald.state.herald
    database = services.database
    await clear_workspace(database)
    async with database.reader() as session:
        workspace = await session.get(Workspace, WORKSPACE)
        assert workspace is not None
        features = enabled_features(workspace)
    bare = bare_app(database, features)

    headers = credentials.headers(settings, campaigns=True)
    try:
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=herald), base_url="http://h"
            ) as herald_client,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=bare), base_url="http://b") as bare_client,
        ):

            async def herald_call() -> None:
                response = await herald_client.post(
                    "/v5/campaigns",
                    json=create_body(f"bench-{uuid.uuid4()}"),
                    headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
                )
                assert response.status_code == 201, response.text

            async def bare_call() -> None:
                response = await bare_client.post("/campaigns", json=create_body(f"bench-{uuid.uuid4()}"))
                assert response.status_code == 201, response.text

            herald_timing, bare_timing = await timed_turns([herald_call, bare_call], requests, concurrency)
    finally:
        await database.dispose()

    ratio = herald_timing.p50_ms / bare_timing.p50_ms
    print(
        table(
            f"C1 POST /v5/campaigns ({concurrency} concurrent callers)",
            [
                ("Herald p50 / p99", f"{herald_timing.p50_ms:.2f} ms / {herald_timing.p99_ms:.2f} ms"),
                ("bare handler p50 / p99", f"{bare_timing.p50_ms:.2f} ms / {bare_timing.p99_ms:.2f} ms"),
                ("Herald / bare (p50)", f"{ratio:.2f}  (target <= 1.2)"),
            ],
        )
    )
    summary(
        "campaign_create",
        database.engine.dialect.name,
        [
            Figure("Herald p50", herald_timing.p50_ms, "ms"),
            Figure("Herald p99", herald_timing.p99_ms, "ms"),
            Figure("bare p50", bare_timing.p50_ms, "ms"),
            Figure("Herald / bare p50", ratio, at_most=1.2),
        ],
    )


def cli() -> None:
    parser = argument_parser(__doc__, "herald-bench-create.db")
    parser.add_argument("--requests", type=int, default=1000, help="creates per side")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.database_url, args.requests, args.concurrency))


if __name__ == "__main__":
    cli()
