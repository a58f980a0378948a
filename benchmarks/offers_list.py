"""Offers list (O1): first vs deepest page, and Herald vs a bare Starlette endpoint on the same SQL.

    python -m benchmarks.offers_list [--database-url URL] [--rows 1000000]

Loads `--rows` offers into one workspace (once; reused on later runs), then measures side by side in
one run: latency of the first and of the deepest page (`limit=50`), and requests/s of Herald's
`GET /v5/offers?limit=50` against a bare Starlette route that runs the same two queries (page + count).
Both are driven in-process through httpx's ASGI transport, so the ratio isolates Herald's own cost.
"""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import func, insert, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from benchmarks.common import (
    Credentials,
    Figure,
    argument_parser,
    prepare_workspace,
    summary,
    table,
    throughput,
    time_calls,
    vacuum_analyze,
)
from herald.config import Settings
from herald.db import create_database
from herald.ids import object_id, offer_public_id
from herald.main import create_app
from herald.offers import repository
from herald.offers.list_query import OffersListQuery
from herald.offers.models import STORED_PUBLISHED, Offer

WORKSPACE = "BENCHOFFERS"
BATCH = 10_000


async def load_offers(
    settings: Settings, rows: int, workspace: str = WORKSPACE, *, added_to_present: bool = False
) -> list[str]:
    """Published offers of `workspace` up to `rows` in all (those present are kept), or `rows` more
    than are present with `added_to_present`; the public ids of the ones added, newest last."""
    added: list[str] = []
    database = create_database(settings)
    try:
        async with database.writer() as session:
            present = await session.scalar(
                select(func.count()).select_from(Offer).where(Offer.workspace_id == workspace)
            )
        first = int(present or 0)
        if added_to_present:
            rows += first
        start = datetime(2024, 1, 1, tzinfo=UTC)
        for offset in range(first, rows, BATCH):
            batch = []
            for index in range(offset, min(rows, offset + BATCH)):
                created = start + timedelta(seconds=index)
                offer_id = object_id(created)
                added.append(offer_public_id(offer_id))
                batch.append(
                    {
                        "workspace_id": workspace,
                        "id": offer_id,
                        "name": f"Offer_{index:08d}",
                        "stored_status": STORED_PUBLISHED,
                        "priority": 1 + index % 100,
                        "start_datetime": created,
                        "expiry_datetime": created + timedelta(days=3650),
                        "tags": [],
                        "document": {"delivery": "scheduled"},
                        "created_at": created,
                        "created_by": f"owner{index % 50}@example.com",
                        "updated_at": created,
                    }
                )
            async with database.writer() as session:
                await session.execute(insert(Offer), batch)
                await session.commit()
            print(f"\r  loaded {offset + len(batch):,} / {rows:,}", end="", flush=True)
        if first < rows:
            print()
        # Steady state: statistics and an all-visible map for index-only scans of the count.
        await vacuum_analyze(database.engine, "offers")
    finally:
        await database.dispose()
    return added


def bare_app(settings: Settings) -> Starlette:
    """The same two queries as Herald's O1, with nothing around them."""
    database = create_database(settings)
    query = OffersListQuery(limit=50)

    async def offers(_request: Request) -> JSONResponse:
        page, total = await repository.list_page(database.direct, WORKSPACE, query, datetime.now(UTC))
        items = [{"id": f"offer_{row[0]}", "name": row[1]} for row in page[:50]]
        return JSONResponse({"data": items, "total_count": total})

    return Starlette(routes=[Route("/offers", offers)])


async def deepest_cursor(settings: Settings) -> str:
    database = create_database(settings)
    try:
        async with database.reader() as session:
            ids = (
                await session.scalars(
                    select(Offer.id).where(Offer.workspace_id == WORKSPACE).order_by(Offer.id.asc()).limit(51)
                )
            ).all()
    finally:
        await database.dispose()
    return base64.urlsafe_b64encode(f"offers:{ids[-1]}".encode()).decode()


async def main(database_url: str, rows: int, requests: int, seconds: float) -> None:
    settings = Settings(database_url=database_url, redis_url=None, db_pool_size=20)
    print(f"offers list benchmark on {database_url.split('://')[0]} with {rows:,} offers")
    credentials: Credentials = await prepare_workspace(settings, WORKSPACE)
    await load_offers(settings, rows)
    headers = credentials.headers(settings)
    cursor = await deepest_cursor(settings)

    herald = create_app(settings)
    bare = bare_app(settings)
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=herald), base_url="http://h") as herald_client,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=bare), base_url="http://b") as bare_client,
    ):

        async def first() -> None:
            response = await herald_client.get("/v5/offers?limit=50", headers=headers)
            assert response.status_code == 200, response.text

        async def deepest() -> None:
            response = await herald_client.get(f"/v5/offers?limit=50&cursor={cursor}", headers=headers)
            assert response.status_code == 200, response.text

        async def bare_call() -> None:
            response = await bare_client.get("/offers")
            assert response.status_code == 200

        first_page = await time_calls(first, requests)
        deepest_page = await time_calls(deepest, requests)
        herald_rps = await throughput(first, seconds, concurrency=4)
        bare_rps = await throughput(bare_call, seconds, concurrency=4)

    print(
        table(
            "O1 GET /v5/offers?limit=50",
            [
                ("first page p50 / p99", f"{first_page.p50_ms:.2f} ms / {first_page.p99_ms:.2f} ms"),
                ("deepest page p50 / p99", f"{deepest_page.p50_ms:.2f} ms / {deepest_page.p99_ms:.2f} ms"),
                ("deepest / first (p50)", f"{deepest_page.p50_ms / first_page.p50_ms:.2f}  (target <= 1.2)"),
                ("Herald requests/s", f"{herald_rps:.1f}"),
                ("bare Starlette requests/s", f"{bare_rps:.1f}"),
                ("Herald / bare", f"{herald_rps / bare_rps:.2f}  (target >= 0.5)"),
            ],
        )
    )
    summary(
        "offers_list",
        "sqlite" if database_url.startswith("sqlite") else "postgresql",
        [
            Figure("deepest / first page p50", deepest_page.p50_ms / first_page.p50_ms, at_most=1.2),
            Figure("Herald / bare req/s", herald_rps / bare_rps, at_least=0.5),
        ],
    )


def cli() -> None:
    parser = argument_parser(__doc__, "herald-bench-offers.db")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(main(args.database_url, args.rows, args.requests, args.seconds))


if __name__ == "__main__":
    cli()
