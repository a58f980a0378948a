"""`GET /healthz`, `GET /readyz` and `GET /metrics`: for load balancers, orchestrators and Prometheus.

None of them needs an API key. `/healthz` says the process answers. `/readyz` says it can serve: the
database answers, its schema is at the migrations' head (the head is read once, at start-up, from the
migration scripts; each probe reads only the `alembic_version` table) and Redis answers when one is
configured. `/metrics` is left out entirely (404) with `HERALD_METRICS=off`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from fastapi import FastAPI
from prometheus_client.core import Metric
from pydantic import BaseModel
from redis.asyncio import Redis
from sqlalchemy import text
from starlette.responses import PlainTextResponse, Response

from herald.campaigns import worker as campaigns_worker
from herald.config import SettingsError
from herald.delivery import outbox
from herald.http.responses import HEALTH_PATH, HEALTHY, json_response
from herald.ops import metrics
from herald.services import Services

if TYPE_CHECKING:  # alembic is imported when first asked (start-up stays light)
    from alembic.script import ScriptDirectory

log = logging.getLogger("herald.ops")

CHECK_SECONDS = 2.0  # a dependency that takes longer to answer counts as not answering
OK = "ok"


@functools.cache
def _scripts() -> ScriptDirectory:
    """The migration scripts shipped with this code."""
    from alembic.script import ScriptDirectory

    from herald.migrate import alembic_config

    return ScriptDirectory.from_config(alembic_config(""))


@functools.cache
def migration_heads() -> frozenset[str]:
    """The head revision(s) of the migration scripts shipped with this code."""
    return frozenset(_scripts().get_heads())


@functools.cache
def migration_revisions() -> frozenset[str]:
    """Every revision of the migration scripts shipped with this code."""
    return frozenset(script.revision for script in _scripts().walk_revisions())


class ReadyBody(BaseModel):
    status: Literal["ready", "unavailable"]
    checks: dict[str, str]
    failed: list[str]


class HealthBody(BaseModel):
    status: Literal["ok"]


@dataclass
class Readiness:
    services: Services
    heads: frozenset[str]
    _redis: Redis | None = field(default=None, init=False)

    async def check(self) -> dict[str, str]:
        """Each check's outcome: "ok", or why not."""
        checks = dict(zip(("database", "migrations"), await self._database(), strict=True))
        url = self.services.settings.redis_url
        checks["redis"] = await self._redis_check(url) if url else "not configured"
        if self.services.settings.clock_file:  # a movable clock whose file may go away meanwhile
            checks["clock"] = self._clock_check()
        return checks

    def _clock_check(self) -> str:
        try:
            self.services.clock.now()
        except SettingsError as exc:
            return str(exc)
        return OK

    async def _database(self) -> tuple[str, str]:
        try:
            async with asyncio.timeout(CHECK_SECONDS), self.services.database.reader() as session:
                await session.execute(text("SELECT 1"))
                try:
                    found = frozenset(
                        (await session.scalars(text("SELECT version_num FROM alembic_version"))).all()
                    )
                except Exception:
                    return OK, "not migrated (no alembic_version table)"
        except Exception as exc:
            return f"unreachable: {type(exc).__name__}", "unknown"
        if found != self.heads:
            at = ", ".join(sorted(found)) or "nothing"
            head = ", ".join(sorted(self.heads))
            if found - migration_revisions():
                # Migrated by a newer release: `herald migrate` of this one cannot help.
                return OK, f"at {at}, newer than this release's head {head} (run the newer release)"
            return OK, f"at {at}; head is {head} (run herald migrate)"
        return OK, OK

    async def _redis_check(self, url: str) -> str:
        if self._redis is None:
            self._redis = Redis.from_url(
                url, socket_connect_timeout=CHECK_SECONDS, socket_timeout=CHECK_SECONDS
            )
        try:
            async with asyncio.timeout(CHECK_SECONDS):
                await self._redis.ping()  # type: ignore[misc]  # redis-py types ping as sync | async
        except Exception as exc:
            return f"unreachable: {type(exc).__name__}"
        return OK

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


async def database_facts(services: Services) -> list[Metric]:
    """The worker's queue, read from the database at scrape time (the same from every process)."""
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            due = await campaigns_worker.due_count(services.database, services.clock.now())
            async with services.database.reader() as session:
                pending = await outbox.pending_count(session)
    except Exception:
        log.warning("metrics: could not read the queue depth from the database", exc_info=True)
        return []
    return [
        metrics.gauge("herald_worker_due_transitions", "Scheduled campaign transitions due now.", due),
        metrics.gauge(
            "herald_outbox_pending", "Outbox rows still PENDING (sends under way or cut short).", pending
        ),
    ]


def install(app: FastAPI, services: Services) -> Readiness:
    readiness = Readiness(services, migration_heads())

    @app.get(
        HEALTH_PATH,
        tags=["operations"],
        summary="The process is up",
        response_model=HealthBody,
        operation_id="getHealth",
        description="200 while the process answers requests; checks nothing else.",
    )
    async def healthz() -> Response:
        # Answered by the request middleware before routing; this handler serves the same bytes
        # to an app mounted without it.
        return Response(HEALTHY, media_type="application/json")

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="Ready to serve: database answers, schema at head, Redis answers (when configured)",
        response_model=ReadyBody,
        responses={503: {"model": ReadyBody, "description": "A check failed; `failed` names it."}},
        operation_id="getReadiness",
        description="200 when the database answers, its schema is at the migrations' head and Redis "
        "answers (when configured); otherwise 503, with `failed` naming the checks that did not pass.",
    )
    async def readyz() -> Response:
        checks = await readiness.check()
        failed = [name for name, outcome in checks.items() if outcome not in (OK, "not configured")]
        body = {"status": "unavailable" if failed else "ready", "checks": checks, "failed": failed}
        return json_response(body, status=503 if failed else 200)

    if services.settings.metrics:

        @app.get(
            "/metrics",
            tags=["operations"],
            summary="Prometheus metrics (text exposition format)",
            response_class=PlainTextResponse,
            operation_id="getMetrics",
            description="Requests, latencies, rate-limit refusals, idempotent replays, pool use, the "
            "worker's queue depth and sends by status, summed over every process of the server. "
            "Absent (404) with `HERALD_METRICS=off`.",
        )
        async def metrics_text() -> Response:
            body = metrics.render(await database_facts(services))
            return Response(body, media_type=metrics.CONTENT_TYPE)

    return readiness
