"""The application factory: settings → services → middleware, handlers and routers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import Response

from herald import __version__
from herald.audience.router import router as audience_router
from herald.campaigns import links as campaign_links
from herald.campaigns import openapi as campaigns_openapi
from herald.campaigns import worker as campaigns_worker
from herald.campaigns.lifecycle_router import router as campaigns_lifecycle_router
from herald.campaigns.router import router as campaigns_router
from herald.campaigns.v1_router import router as campaigns_v1_router
from herald.clock import Clock, FileClock, SystemClock
from herald.config import Settings
from herald.db import create_database
from herald.delivery import router as delivery_routes
from herald.http import handlers
from herald.http import openapi as openapi_docs
from herald.http.middleware import HeraldMiddleware
from herald.http.ratelimit import RateLimitStore, make_store
from herald.http.responses import json_response
from herald.offers.router import router as offers_router
from herald.personalization.router import router as personalization_router
from herald.services import Services


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    limiter: RateLimitStore | None = None,
) -> FastAPI:
    settings = settings or Settings()
    services = Services(
        settings=settings,
        database=create_database(settings),
        clock=clock or (FileClock(settings.clock_file) if settings.clock_file else SystemClock()),
        limiter=limiter or make_store(settings.redis_url),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        worker = (
            asyncio.create_task(
                campaigns_worker.run_forever(
                    services.database, services.clock, settings.worker_interval_seconds, stop, settings
                )
            )
            if settings.in_process_worker
            else None
        )
        yield
        if worker is not None:
            stop.set()
            await worker
        await services.database.dispose()

    app = FastAPI(
        title="Herald — Offer Listing and Campaign Draft API",
        version="5.0.0",
        summary=f"Herald {__version__}",
        lifespan=lifespan,
    )
    app.state.herald = services
    app.add_middleware(HeraldMiddleware, services=services)
    handlers.install(app)
    app.include_router(offers_router)
    app.include_router(delivery_routes.router)  # before campaigns: /test beside /{campaign_id}
    app.include_router(campaigns_lifecycle_router)
    app.include_router(campaigns_router)
    app.include_router(campaigns_v1_router)
    app.include_router(personalization_router)
    app.include_router(audience_router)
    _extend_openapi(app, services)
    _add_probes(app, services)
    return app


def _add_probes(app: FastAPI, services: Services) -> None:
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request) -> Response:
        try:
            async with services.database.reader() as session:
                await session.execute(text("SELECT 1"))
        except Exception:
            return json_response({"status": "unavailable"}, status=503)
        return json_response({"status": "ready"})


def _extend_openapi(app: FastAPI, services: Services) -> None:
    """Add the schemas that route-level request bodies refer to (see campaigns.openapi)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            extra = {**campaigns_openapi.component_schemas(), **delivery_routes.body_schemas()}
            for name, definition in extra.items():
                components.setdefault(name, definition)
            campaign_links.add_links(schema)
            app.openapi_schema = openapi_docs.enrich(schema, services.settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
