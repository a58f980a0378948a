"""Campaign search (C6): Herald's `POST /v5/campaigns/search` vs a bare Starlette route, same query.

    python -m benchmarks.search [--database-url URL] [--campaigns 100000] [--requests 200] [--concurrency 4]

Loads `--campaigns` campaigns into one workspace (once; reused by later runs, see
`benchmarks/campaign_data.py`), then, for a few representative searches (`limit` 15), measures the
latency (p50, p99) of:

- Herald: the whole app — request id, body guards, unit of work, authentication, rate limits (opened
  wide), the Idempotency-Key (a new one each call, so each response is stored as the contract says);
- bare: a Starlette route that runs the same `campaigns.search.search` (the same body model and the
  same SQL) on a read session of the same engine and returns the same campaign objects.

Both are driven in-process through httpx's ASGI transport by `--concurrency` callers, in alternating
turns. Search pages by number, so the deep page is the last one: its OFFSET walks every row before it.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from sqlalchemy import func, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmarks.campaign_data import ensure_campaigns, workspace_id_for
from benchmarks.common import Figure, Timing, argument_parser, prepare_workspace, summary, timed_turns
from herald.campaigns import pages, search
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.search import MAX_PAGE_SIZE
from herald.campaigns.views import campaign_view
from herald.config import Settings
from herald.db import Database, create_database
from herald.main import create_app
from herald.services import Services


@dataclass(frozen=True)
class Scenario:
    name: str
    body: dict[str, Any]


def scenarios(last_page: int) -> list[Scenario]:
    page = {"limit": MAX_PAGE_SIZE, "page": 1}
    return [
        Scenario("first page, no filter", page),
        Scenario("name contains 'diwali'", {**page, "campaign_fields": {"name": "diwali"}}),
        Scenario(
            "status ACTIVE + channel EMAIL",
            {**page, "campaign_fields": {"status": ["ACTIVE"], "channels": ["EMAIL"]}},
        ),
        Scenario("tag 'vip'", {**page, "campaign_fields": {"tags": ["vip"]}}),
        Scenario("last page, no filter", {**page, "page": last_page}),
    ]


async def last_page(database: Database, workspace_id: str) -> int:
    """The last page of the unfiltered search (the rows every state but DRAFT and ARCHIVED show)."""
    criteria = pages.Criteria()
    statuses = pages.visible_statuses(criteria)
    where = pages.conditions(pages.Shape.of(criteria, versioning=False, merged=0, bounded=False))
    values = pages.parameters(workspace_id, criteria, statuses, merged=0, limit=1, offset=0)
    count_all = select(func.count()).select_from(Campaign).where(*where, Campaign.status.in_(statuses))
    async with database.reader() as session:
        count = int(await session.scalar(count_all, values) or 0)
    return max(1, -(-count // MAX_PAGE_SIZE))


def bare_app(database: Database, workspace_id: str) -> Starlette:
    """The same search call as Herald's C6 on a read session, with nothing around it."""

    async def search_route(request: Request) -> Response:
        raw = orjson.loads(await request.body())
        async with database.reader() as session:
            rows = await search.search(session, workspace_id, raw, versioning=False)
            campaigns = [campaign_view(row, versioning=False) for row in rows]
        return Response(orjson.dumps({"data": {"campaigns": campaigns}}), media_type="application/json")

    return Starlette(routes=[Route("/search", search_route, methods=["POST"])])


async def main(database_url: str, campaigns: int, requests: int, concurrency: int) -> None:
    settings = Settings(database_url=database_url, redis_url=None, db_pool_size=20, log_level="warning")
    workspace_id = workspace_id_for(campaigns)
    print(f"campaign search benchmark on {database_url.split('://')[0]} with {campaigns:,} campaigns")
    credentials = await prepare_workspace(settings, workspace_id)
    loader = create_database(settings)
    try:
        await ensure_campaigns(loader.engine, workspace_id, campaigns)
    finally:
        await loader.dispose()
    herald = create_app(settings)
    services: Services = herald.state.herald
    database = services.database
    bare = bare_app(database, workspace_id)
    headers = credentials.headers(settings, campaigns=True)

    results: list[tuple[Scenario, int, Timing, Timing]] = []
    try:
        cases = scenarios(await last_page(database, workspace_id))
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=herald), base_url="http://h"
            ) as herald_client,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=bare), base_url="http://b") as bare_client,
        ):
            for scenario in cases:
                found: list[int] = []

                async def herald_call(body: dict[str, Any] = scenario.body, found: list[int] = found) -> None:
                    response = await herald_client.post(
                        "/v5/campaigns/search",
                        json=body,
                        headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
                    )
                    assert response.status_code == 200, response.text
                    found.append(len(response.json()["data"]["campaigns"]))

                async def bare_call(body: dict[str, Any] = scenario.body) -> None:
                    response = await bare_client.post("/search", json=body)
                    assert response.status_code == 200, response.text

                herald_timing, bare_timing = await timed_turns(
                    [herald_call, bare_call], requests, concurrency, warmup=3
                )
                results.append((scenario, found[-1], herald_timing, bare_timing))
    finally:
        await database.dispose()

    print(
        f"\nC6 POST /v5/campaigns/search, limit {MAX_PAGE_SIZE} (last page: {cases[-1].body['page']:,}),"
        f" {concurrency} concurrent callers"
    )
    header = f"{'search':<36} {'rows':>4} {'Herald p50 / p99 ms':>21} {'bare p50 / p99 ms':>19} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for scenario, rows, ours, bare_timing in results:
        print(
            f"{scenario.name:<36} {rows:>4} {ours.p50_ms:>10.1f} / {ours.p99_ms:>7.1f}"
            f" {bare_timing.p50_ms:>8.1f} / {bare_timing.p99_ms:>7.1f}"
            f" {ours.p50_ms / bare_timing.p50_ms:>6.2f}"
        )
    ratios = [ours.p50_ms / bare_timing.p50_ms for _, _, ours, bare_timing in results]
    print(f"Herald / bare p50: worst {max(ratios):.2f}, best {min(ratios):.2f}")
    summary(
        "search",
        database.engine.dialect.name,
        [
            *(Figure(f"Herald p50, {scenario.name}", ours.p50_ms, "ms") for scenario, _, ours, _ in results),
            Figure("worst Herald / bare p50", max(ratios)),
        ],
    )


def cli() -> None:
    parser = argument_parser(__doc__, "herald-bench-search.db")
    parser.add_argument("--campaigns", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200, help="searches per side and scenario")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.database_url, args.campaigns, args.requests, args.concurrency))


if __name__ == "__main__":
    cli()
