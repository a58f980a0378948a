"""Schemathesis against Herald's own /openapi.json, served by a real `herald serve` process.

Every operation, a fixed seed, HERALD_ST_EXAMPLES examples per operation (200 unless set lower for a
quick local run), every phase (HERALD_ST_PHASES narrows them), every default check, and the stateful
phase that chains the links Schemathesis infers (create → get → patch → validate → status, search). Zero failures: when it finds one, the fix
is in the schema or the code (`schemathesis.toml` says what it allows and why).
Runs on the test database of the session: SQLite, or PostgreSQL + Redis when HERALD_TEST_* are set.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from herald.config import Settings
from herald.http.limits import BUCKETS
from herald.main import create_app
from tests.conftest import REDIS_URL, TEST_SECRET_KEY
from tests.factories import Tenant, make_tenant
from tests.system.cluster import Server, serve

HERE = Path(__file__).parent
EXAMPLES = int(os.environ.get("HERALD_ST_EXAMPLES", "200"))
# Every phase unless narrowed (`examples,coverage,fuzzing,stateful`): CI's PostgreSQL run leaves out
# the coverage phase (schema-derived edge values, most of them refused by validation before any
# statement; the SQLite run sends them all) to keep CI under its time.
PHASES = os.environ.get("HERALD_ST_PHASES")
FEATURES = dict.fromkeys(
    ("campaign_audience_limit", "queuing", "portfolio", "versioning", "campaign_meta"), True
)
# Wide enough that no request of the run is refused for its rate (429 is still declared everywhere).
OPEN_LIMITS = dict.fromkeys(BUCKETS, "1000000/second")


def _server_env(database_url: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HERALD_DATABASE_URL": database_url,
        "HERALD_SECRET_KEY": TEST_SECRET_KEY,
        "HERALD_LOG_LEVEL": "warning",
    }
    if REDIS_URL:
        env["HERALD_REDIS_URL"] = REDIS_URL
    return env


async def _workspace(database_url: str) -> Tenant:
    settings = Settings(database_url=database_url, redis_url=None, secret_key=TEST_SECRET_KEY)
    app = create_app(settings)
    try:
        return await make_tenant(app, features=FEATURES, rate_limits=OPEN_LIMITS)
    finally:
        await app.state.herald.aclose()


@pytest.fixture(scope="module")
def served(database_url: str) -> Iterator[tuple[Server, Tenant, dict[str, str]]]:
    tenant = asyncio.run(_workspace(database_url))
    env = _server_env(database_url)
    server = serve(env, workers=1)
    try:
        yield server, tenant, env
    finally:
        server.kill()


def test_schemathesis_finds_no_failure(served: tuple[Server, Tenant, dict[str, str]]) -> None:
    server, tenant, env = served
    schemathesis = Path(sys.executable).with_name("schemathesis")
    command = [
        str(schemathesis),
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "--no-color",
        "run",
        f"{server.url}/openapi.json",
        "--max-examples",
        str(EXAMPLES),
        *(["--phases", PHASES] if PHASES else []),
    ]
    run_env = {
        **env,
        "HERALD_ST_WORKSPACE": tenant.workspace_id,
        "HERALD_ST_SECRET": tenant.secret,
        "SCHEMATHESIS_HOOKS": "tests.robustness.hooks",
        "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), env.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        command, env=run_env, cwd=HERE.parents[1], capture_output=True, text=True, timeout=3600, check=False
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-30_000:]
    assert "API Links:" in report  # the stateful phase ran
