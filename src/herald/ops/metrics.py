"""Prometheus metrics: what each process counts, and the one text answer of `GET /metrics`.

Counters and histograms are kept per process. Under `herald serve --workers N` the server sets
`PROMETHEUS_MULTIPROC_DIR` (a fresh directory per run) before any worker imports this module, so each
worker writes its values to files there and `render` sums them over the processes. Values that are
facts of the database rather than of a process (the worker's queue depth) are read from the database
when scraped, so whichever process answers gives the same figures.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import event

from herald.db import Database

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "herald_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ["method", "route", "status"],
)
LATENCY = Histogram(
    "herald_http_request_duration_seconds",
    "Time from the request's arrival to its answer, by method and route template.",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
RATE_LIMITED = Counter(
    "herald_rate_limit_refusals", "Requests refused with 429, by rate-limit bucket.", ["bucket"]
)
REPLAYS = Counter(
    "herald_idempotent_replays",
    "Responses replayed for a repeated Idempotency-Key, by method and route template.",
    ["method", "route"],
)
POOL_IN_USE = Gauge(
    "herald_db_pool_checked_out",
    "Database connections checked out of the pool, by pool.",
    ["pool"],
    multiprocess_mode="livesum",
)
POOL_SIZE = Gauge(
    "herald_db_pool_size",
    "Connections the pool keeps (its overflow may add more), by pool.",
    ["pool"],
    multiprocess_mode="livesum",
)
SENDS = Counter("herald_sends", "Messages whose outcome the outbox recorded, by status.", ["status"])
TRANSITIONS = Counter("herald_worker_transitions", "Scheduled campaign transitions the worker applied.")
STEP_FAILURES = Counter(
    "herald_worker_step_failures",
    "A workspace's or a campaign's part of a worker tick that failed (logged) while the others went on.",
    ["scope"],
)
STEP_SCOPES = ("workspace", "campaign")


@contextlib.contextmanager
def contained_step(log: logging.Logger, scope: str, name: str) -> Iterator[None]:
    """The part of a worker tick for one `scope` (a `STEP_SCOPES` value) named `name`: if it fails,
    it is logged and counted (`STEP_FAILURES`) and the tick goes on with the others."""
    try:
        yield
    except Exception:
        log.exception("%s %s: this tick's step failed; the other %ss go on", scope, name, scope)
        STEP_FAILURES.labels(scope).inc()


def step_failures() -> float:
    """This process's failed tick steps so far (`herald worker --once` exits 1 when its tick adds any)."""
    samples = (
        REGISTRY.get_sample_value("herald_worker_step_failures_total", {"scope": scope})
        for scope in STEP_SCOPES
    )
    return sum(value or 0.0 for value in samples)


def is_multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_DIR))


def watch_pools(database: Database) -> Callable[[], None]:
    """Keep the pool gauges current from the engine pools' checkout/checkin events and from the
    driver's own pool (`DirectReads.watch`); the returned function takes this process's pools out
    of the figures at shutdown."""
    pools = {"write": database.engine.sync_engine.pool}
    if database.read_engine.sync_engine.pool is not pools["write"]:
        pools["read"] = database.read_engine.sync_engine.pool
    sizes: dict[str, int] = {}
    for name, pool in pools.items():
        size = getattr(pool, "size", None)
        if not callable(size):
            continue  # e.g. a static pool of one shared connection: nothing to watch
        sizes[name] = size()
        POOL_SIZE.labels(name).inc(sizes[name])
        in_use = POOL_IN_USE.labels(name)
        event.listen(pool, "checkout", lambda *_args, gauge=in_use: gauge.inc())
        event.listen(pool, "checkin", lambda *_args, gauge=in_use: gauge.dec())

    direct = _DirectPoolWatch()
    database.direct.watch(direct)

    def stop() -> None:
        for name, size in sizes.items():
            POOL_SIZE.labels(name).dec(size)
        database.direct.watch(None)
        direct.sized(-direct.opened)
        if is_multiprocess():
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    return stop


class _DirectPoolWatch:
    """The gauges of the driver's own pool (`herald.direct_reads`), `pool="direct"`: the reads and
    one-statement writes that bypass the engine's pool hold its connections."""

    def __init__(self) -> None:
        self._size = POOL_SIZE.labels("direct")
        self._in_use = POOL_IN_USE.labels("direct")
        self.opened = 0

    def sized(self, change: int) -> None:
        self.opened += change
        self._size.inc(change)

    def taken(self, change: int) -> None:
        self._in_use.inc(change)


class _Snapshot(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def render(database_facts: Iterable[Metric]) -> bytes:
    """The exposition text: every process's metrics (summed under multiprocess mode), then the
    facts read from the database for this scrape."""
    if is_multiprocess():
        registry: Any = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = REGISTRY
    facts = CollectorRegistry()
    facts.register(_Snapshot(database_facts))
    return generate_latest(registry) + generate_latest(facts)
