"""Clients generated from the served `/openapi.json` work as they are (issue: the document is a contract).

Against a real `herald serve` on a free port: Spectral's `oas` ruleset finds nothing (0 errors, 0
warnings); openapi-typescript's types compile under `tsc --strict`; openapi-python-client (default
config) generates a client, `flow.py` written against it passes `mypy --strict`, and runs a client's
first session (offers cursor walk, draft, patch, validate, search, meta, test send, preview).

The npm tools are pinned in `tests/clients/package-lock.json` and installed by `make clients` (`npm ci`):
without them these tests fail, they are never skipped. Generated code goes to `build/clients/<engine>/`:
one directory per database engine, so the SQLite and PostgreSQL runs can share a checkout side by side.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from herald.config import Settings
from herald.delivery.config import ConnectorInput
from herald.http.limits import BUCKETS
from herald.main import create_app
from tests.conftest import PG_URL, TEST_SECRET_KEY
from tests.delivery.conftest import add_users
from tests.delivery.servers import SmtpServer, start_smtp
from tests.factories import add_connector, make_tenant
from tests.ops.served import server_env
from tests.system.cluster import Server, serve

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
BUILD = ROOT / "build" / "clients" / ("postgresql" if PG_URL else "sqlite")
NODE_BIN = HERE / "node_modules" / ".bin"
PACKAGE = "herald_offer_listing_and_campaign_draft_api_client"
FEATURES = dict.fromkeys(
    ("campaign_audience_limit", "queuing", "portfolio", "versioning", "campaign_meta"), True
)
OPEN_LIMITS = dict.fromkeys(BUCKETS, "1000000/second")
RECIPIENT, FIRST_NAME = "ana@example.com", "Ana"


@dataclass
class Served:
    server: Server
    smtp: SmtpServer
    workspace_id: str
    secret: str


def _node_tool(name: str) -> Path:
    tool = NODE_BIN / name
    if not tool.exists():
        pytest.fail(f"{tool} is missing: run `make clients` (npm ci in tests/clients) first", pytrace=False)
    return tool


def _run(command: list[str | Path], *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command[0]} failed:\n{output[-20_000:]}"
    return output


async def _seed(database_url: str, smtp_port: int) -> tuple[str, str]:
    settings = Settings(database_url=database_url, redis_url=None, secret_key=TEST_SECRET_KEY)
    app = create_app(settings)
    try:
        tenant = await make_tenant(app, features=FEATURES, rate_limits=OPEN_LIMITS)
        connector = ConnectorInput(
            "mail", "CUSTOM_SMTP", host="127.0.0.1", port=smtp_port, security="none", timeout=5
        )
        await add_connector(app, tenant, connector)
        await add_users(
            app, tenant.workspace_id, {"customer_id": "flow-1", "email": RECIPIENT, "first_name": FIRST_NAME}
        )
        return tenant.workspace_id, tenant.secret
    finally:
        await app.state.herald.aclose()


@pytest.fixture(scope="module")
def served(database_url: str) -> Iterator[Served]:
    smtp = start_smtp()
    workspace_id, secret = asyncio.run(_seed(database_url, smtp.port))
    env = server_env(database_url, log_level="warning")
    env.pop("HERALD_BASE_URL", None)
    server = serve(env, workers=1)
    try:
        yield Served(server, smtp, workspace_id, secret)
    finally:
        server.kill()
        smtp.controller.stop()


@pytest.fixture(scope="module")
def document(served: Served) -> Path:
    response = httpx.get(f"{served.server.url}/openapi.json", timeout=30)
    assert response.status_code == 200
    assert response.json()["servers"] == [{"url": served.server.url}]
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / "openapi.json"
    path.write_bytes(response.content)
    return path


def test_spectral_oas_ruleset_reports_nothing(document: Path) -> None:
    output = _run(
        [
            _node_tool("spectral"),
            "lint",
            "--ruleset",
            HERE / ".spectral.yaml",
            "--fail-severity",
            "hint",
            document,
        ]
    )
    assert "No results with a severity of 'hint' or higher found!" in output, output


def test_typescript_types_compile_strict(document: Path) -> None:
    _run([_node_tool("openapi-typescript"), document, "--output", BUILD / "herald.d.ts"])
    # Compiled beside the types it imports ("./herald"), in this run's own build directory.
    for name in ("check.ts", "tsconfig.json"):
        shutil.copyfile(HERE / name, BUILD / name)
    _run([_node_tool("tsc"), "--project", BUILD / "tsconfig.json"])


def test_generated_python_client_runs_a_first_session(served: Served, document: Path) -> None:
    output = BUILD / "python"
    shutil.rmtree(output, ignore_errors=True)
    generator = Path(sys.executable).with_name("openapi-python-client")
    # The generator formats its output with ruff, found on PATH.
    path_env = {**os.environ, "PATH": os.pathsep.join([str(generator.parent), os.environ.get("PATH", "")])}
    report = _run([generator, "generate", "--path", document, "--output-path", output], env=path_env)
    assert "Warning" not in report, report
    typed_env = {**path_env, "MYPYPATH": str(output)}
    mypy = Path(sys.executable).with_name("mypy")
    # From the build directory: the flow and the client are checked on their own, not with Herald's config.
    _run([mypy, "--strict", "--no-incremental", HERE / "flow.py"], cwd=output, env=typed_env)
    flow_env = {
        **path_env,
        "PYTHONPATH": str(output),
        "HERALD_URL": served.server.url,
        "HERALD_WORKSPACE": served.workspace_id,
        "HERALD_SECRET": served.secret,
        "HERALD_CONNECTOR": "mail",
        "HERALD_RECIPIENT": RECIPIENT,
        "HERALD_FIRST_NAME": FIRST_NAME,
    }
    print(_run([sys.executable, HERE / "flow.py"], cwd=output, env=flow_env))
    [mail] = served.smtp.received
    assert mail.rcpt_tos == [RECIPIENT]
    assert "Hello Ana" in mail.html
    assert (output / PACKAGE).is_dir()


def test_doc_url_leads_to_the_catalog_of_the_serving_port(served: Served) -> None:
    auth = (served.workspace_id, served.secret)
    error = httpx.get(f"{served.server.url}/v5/offers?limit=500", auth=auth, timeout=30).json()["error"]
    assert error["doc_url"] == f"{served.server.url}/errors#VALIDATION_FAILED"
    page, anchor = error["doc_url"].split("#")
    catalog = httpx.get(page, timeout=30)
    assert catalog.status_code == 200
    assert f'id="{anchor}"' in catalog.text
    assert f'id="{error["details"][0]["code"]}"' in catalog.text
