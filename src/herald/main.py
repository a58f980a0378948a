"""The application factory: settings → services → middleware, handlers and routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy.engine import make_url
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp

from herald import __version__, sqlite_checkpoints
from herald.audience.router import router as audience_router
from herald.campaigns import links as campaign_links
from herald.campaigns import openapi as campaigns_openapi
from herald.campaigns.embedded_worker import EmbeddedWorker
from herald.campaigns.lifecycle_router import router as campaigns_lifecycle_router
from herald.campaigns.router import router as campaigns_router
from herald.campaigns.v1_router import router as campaigns_v1_router
from herald.clock import Clock, SystemClock, clock_for
from herald.config import Settings
from herald.db import create_database
from herald.delivery import router as delivery_routes
from herald.delivery.dispatch import Lanes
from herald.http import documentation, endpoint, handlers
from herald.http import openapi as openapi_docs
from herald.http.middleware import HeraldMiddleware
from herald.http.ratelimit import RateLimitStore, make_store
from herald.offers.router import router as offers_router
from herald.ops import heap, metrics, probes
from herald.ops.observe import ObserveMiddleware
from herald.personalization.router import router as personalization_router
from herald.services import Services
from herald.workspaces.credentials import CredentialsCache


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    limiter: RateLimitStore | None = None,
) -> FastAPI:
    """The app. `clock`: a clock given in code (a test's) is its leases' too (`Services.lease_clock`);
    else the settings' (`HERALD_CLOCK_FILE`), with leases on the system's."""
    settings = settings or Settings()
    services = Services(
        settings=settings,
        database=create_database(settings),
        clock=clock or clock_for(settings.clock_file),
        lease_clock=clock or SystemClock(),
        limiter=limiter or make_store(settings.redis_url, held_clock=settings.clock_file is not None),
        credentials=CredentialsCache(ttl=settings.credentials_cache_seconds),
        test_lanes=Lanes.of(settings),
    )

    sqlite_path = make_url(settings.database_url).database or "" if settings.is_sqlite else None

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if sqlite_path is not None:
            sqlite_checkpoints.start(sqlite_path)  # before any connection (the worker's too) opens
        worker = EmbeddedWorker(settings, services.clock) if settings.in_process_worker else None
        if worker is not None:
            worker.start()
        heap.settle()
        yield
        # Uvicorn has drained the in-flight requests by now (SIGTERM, bounded by
        # HERALD_SHUTDOWN_TIMEOUT_SECONDS); the worker finishes the window in hand and stops.
        if worker is not None:
            await worker.stop()
        unwatch_pools()
        await readiness.aclose()
        await services.aclose()
        if sqlite_path is not None:
            sqlite_checkpoints.stop(sqlite_path)

    app = FastAPI(
        title="Herald — Offer Listing and Campaign Draft API",
        version="5.0.0",
        summary=f"Herald {__version__}",
        lifespan=lifespan,
        # Herald reports through its own Prometheus metrics and request logs (`herald.ops`); the
        # framework's OpenTelemetry bridge would look up its providers on every request (a sixth of
        # a `/healthz` answer) to find none configured.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        # Served by herald.http.documentation (the document names the address it was read from).
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.herald = services
    app.build_middleware_stack = lambda: _middleware_stack(app, services)  # type: ignore[method-assign]
    unwatch_pools = metrics.watch_pools(services.database) if settings.metrics else (lambda: None)
    handlers.install(app)
    # The routers' routes go straight into the app's one route list, in this order (delivery before
    # campaigns: /test beside /{campaign_id}). `include_router` would keep each router as a branch
    # that every request walks with its own scope bookkeeping: a third of a /healthz answer's time.
    for router in (
        offers_router,
        delivery_routes.router,
        campaigns_lifecycle_router,
        campaigns_router,
        campaigns_v1_router,
        personalization_router,
        audience_router,
    ):
        app.router.routes.extend(router.routes)
    _extend_openapi(app, services)
    documentation.install(app)
    readiness = probes.install(app, services)
    endpoint.install(app.router.routes)
    return app


def _middleware_stack(app: FastAPI, services: Services) -> ASGIApp:
    """Observe (outermost: sees every answer) → Herald (gateway rules, body, unit of work, and the
    enveloped answer to any exception) → the exception handlers → the router.

    The framework's own stack adds, around every request, a server-error layer (Herald's middleware
    already answers every crash with the error envelope), an exception-telemetry layer (telemetry is
    off), a body-limit layer (Herald's middleware reads the body within its own limit) and an exit
    stack for uploaded files (no route takes a form); each re-wraps the request's `send`."""
    handlers_by_key = {
        key: value for key, value in app.exception_handlers.items() if key not in (500, Exception)
    }
    inner: ASGIApp = ExceptionMiddleware(app.router, handlers=handlers_by_key)
    return ObserveMiddleware(HeraldMiddleware(inner, services=services), count=services.settings.metrics)


def _extend_openapi(app: FastAPI, services: Services) -> None:
    """Add the schemas that route-level request bodies refer to (see campaigns.openapi)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            extra = {**campaigns_openapi.component_schemas(), **delivery_routes.body_schemas()}
            for name, definition in extra.items():
                # One name, one shape: a model of another domain with the same class name would
                # otherwise silently stand in for this one wherever it is referenced.
                if _shape(components.setdefault(name, definition)) != _shape(definition):
                    raise RuntimeError(f"two different OpenAPI schemas are named {name}")
            campaign_links.add_links(schema)
            guarded = openapi_docs.guarded_operations(app.routes)
            app.openapi_schema = openapi_docs.enrich(schema, services.settings, guarded)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _shape(schema: Any) -> Any:
    """A schema without its `default`s (FastAPI leaves out `default: null` where Pydantic states it)."""
    if isinstance(schema, dict):
        return {key: _shape(value) for key, value in schema.items() if key != "default"}
    if isinstance(schema, list):
        return [_shape(item) for item in schema]
    return schema
