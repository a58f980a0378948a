"""Helpers for tests against a served `herald serve` process: environment, tenants, metrics, log lines."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from herald.config import Settings
from herald.main import create_app
from tests.conftest import REDIS_URL, TEST_SECRET_KEY
from tests.factories import Tenant, make_tenant

Labels = dict[str, str]


# Several worker processes on one SQLite file is not a supported deployment: their tests need PostgreSQL.
SEVERAL_WORKERS = pytest.mark.skipif(
    not os.environ.get("HERALD_TEST_DATABASE_URL"),
    reason="several worker processes need HERALD_TEST_DATABASE_URL (PostgreSQL)",
)


def server_env(database_url: str, **settings: str) -> dict[str, str]:
    """The environment of a served process on the test database (and Redis, when the run has one)."""
    env = {
        **os.environ,
        "HERALD_DATABASE_URL": database_url,
        "HERALD_SECRET_KEY": TEST_SECRET_KEY,
        "HERALD_LOG_LEVEL": "info",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if REDIS_URL:
        env["HERALD_REDIS_URL"] = REDIS_URL
    env.update({f"HERALD_{name.upper()}": value for name, value in settings.items()})
    return env


def tenant(database_url: str, *, setup: Callable[[Any, Tenant], Any] | None = None, **options: Any) -> Tenant:
    """A workspace with a key in the test database (made in this process, then used over HTTP);
    `setup(app, tenant)` may add to it (connectors, ...)."""

    async def make() -> Tenant:
        settings = Settings(database_url=database_url, redis_url=None, secret_key=TEST_SECRET_KEY)
        app = create_app(settings)
        try:
            made = await make_tenant(app, **options)
            if setup is not None:
                await setup(app, made)
            return made
        finally:
            await app.state.herald.aclose()

    return asyncio.run(make())


def samples(text: str, name: str) -> list[tuple[Labels, float]]:
    """The samples named `name` in a Prometheus text exposition."""
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when there is none)."""
    return sum(v for found, v in samples(text, name) if labels.items() <= found.items())


def log_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the log as JSON (fails the test on a line that is not)."""
    return [orjson.loads(line) for line in log_lines(path)]


def access_lines(lines: Iterable[dict[str, Any]], request_id: str) -> list[dict[str, Any]]:
    return [
        line
        for line in lines
        if line.get("logger") == "herald.access" and line.get("request_id") == request_id
    ]
