"""Herald against its peers over real sockets: the speed targets of the request path.

    python -m benchmarks.peers [--seconds 8] [--connections 32] [--only O1,C1] [--no-postgres]
                               [--baseline DIR]

Starts, side by side in one run, each on a free loopback port:

- `herald-sqlite`: `herald serve` on a fresh SQLite file, one process (the embedded default);
- `herald-pg`: `herald serve --workers 2` on PostgreSQL + Redis (the recommended deployment for a
  2-core machine; HERALD_BENCH_POSTGRES_URL, default the local server over its Unix socket, and
  HERALD_BENCH_REDIS_URL);
- `bare`: `benchmarks/peers/bare_offers.py` on the SQLite file of `herald-sqlite` (the limit: stdlib
  sqlite3, orjson, one Starlette route, the same page + count + Basic check), plus a bare `/healthz`;
- `mock`: Prism 5.14.2 (`benchmarks/peers/package.json`; `npm ci` there once) mocking Herald's own
  `/openapi.json` with `-v silent`.

With `--baseline DIR` (another checkout of Herald, e.g. the main branch's worktree), its code is served
as well, the same two ways (`base-sqlite`, `base-pg`, on databases of their own), so a change is
measured before and after in the same run, each scenario's sides one after the other.

Then drives every scenario on every peer with wrk (`-t2 -c32`, one uncounted second of warm-up, then
`--seconds` each, the peers in turns), prints each side's req/s, latency and CPU per request (its
processes' user + system time, which moves far less with the machine's load than req/s), then each
ratio with its target and pass / MISS (the `BENCH` summary line as every benchmark).

C8 test-sends through each served Herald's push connector, a webhook to `benchmarks.delivery_sink`
(started here too). C5 (STOP) and O5 (archive) consume what they act on: just before each runs, every
side gets a fresh pool of scheduled campaigns or published offers written into its database, and
each request takes an id of it once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import orjson
from cryptography.fernet import Fernet
from sqlalchemy import make_url

from benchmarks import wrk
from benchmarks.campaign_create import create_body
from benchmarks.common import (
    Credentials,
    Figure,
    prepare_workspace,
    recreate_postgres,
    summary,
    vacuum_analyze,
)
from benchmarks.delivery import add_users, add_workspace_connector
from benchmarks.offers_list import load_offers
from herald.campaigns import importer
from herald.config import Settings
from herald.db import create_database
from herald.delivery.config import ConnectorInput

WORKSPACE = "BENCHPEERS"
PEERS_DIR = Path(__file__).parent / "peers"
PRISM = PEERS_DIR / "node_modules" / ".bin" / "prism"
OFFERS = 1000
POSTGRES_SOCKET_DIR = "/var/run/postgresql"  # where Debian's server keeps its socket
ONE_ROW_LIMIT = "pg-one-row"  # the bare limit of a one-row scenario (`Scenario.one_row_update`)
POOL = 64  # offers and campaigns O3 and C3 patch in turn (a client writing to its own objects)
# Objects a consuming scenario may take per second of its run (warm-up included): well above what any
# side answers (a pool that runs out shows as non-2xx answers).
CONSUMED_PER_SECOND = 2_500


@dataclass(frozen=True)
class Scenario:
    name: str
    method: str
    path: str  # `{offer}`, `{campaign}`, `{workspace}` are filled once the data exists
    body: Any = None
    campaigns: bool = False  # the app-key header
    idempotency: bool = False  # a fresh Idempotency-Key per request
    targets: dict[str, float] = field(default_factory=dict)  # figure -> at least
    pool: str | None = None  # `@POOL@` in the path: the ids of this pool of the fixtures, in turn
    # A write of one row from every connection: beside it, the bare limit of one row on PostgreSQL
    # (`one_row_limit`), this UPDATE (values: a text, the workspace, the row's id) in a transaction.
    one_row_update: str | None = None
    # A write an object takes once (an archive, a STOP): `@POOL@` takes each id of a fresh pool of
    # `CONSUMED` objects of this kind once, made on each side just before the scenario runs.
    consumes: str | None = None


_OFFER_BODY = {
    "name": "Bench_@N@",
    "description": "Twenty percent off.",
    "priority": 10,
    "delivery": "scheduled",
    "created_by": "owner@example.com",
    "scheduling": {"start_datetime": "2031-01-01T00:00:00Z", "expiry_datetime": "2031-02-01T00:00:00Z"},
    "segment_info": {
        "filters": {
            "included_filters": {
                "filter_operator": "and",
                "filters": [
                    {
                        "filter_type": "user_attributes",
                        "data_type": "string",
                        "name": "city",
                        "operator": "is",
                        "value": "Berlin",
                    }
                ],
            }
        }
    },
    "offer_content": {
        "locales": {"en": {"variations": {"A": {"content_1": {"type": "json", "value": '{"discount": 20}'}}}}}
    },
    "variation_meta": {"type": "SMV", "variantsPerLocale": ["A"], "smv_distribution": {"split": {"A": 100}}},
}
_TEST_USER = "u00000000"  # `benchmarks.delivery.add_users`' first user: an Android push token
_TEST_SEND_BODY = {
    "test_campaign_meta": {"identifier": "USER_ATTRIBUTE_UNIQUE_ID", "identifier_values": [_TEST_USER]},
    "channel": "PUSH",
    "campaign_content": {
        "content": {
            "push": {
                "android": {
                    "template_type": "BASIC",
                    "basic_details": {"title": "Hi {{UserAttribute['first_name']}}", "message": "Sale"},
                }
            }
        }
    },
}
_PREVIEW_BODY = {
    "request_id": "@UUID@",
    "channel": "PUSH",
    "user_identification": {"type": "USER_ATTRIBUTE_UNIQUE_ID", "value": "u1"},
    "campaign_content": {
        "content": {
            "push": {
                "android": {"template_type": "BASIC", "basic_details": {"title": "Hi", "message": "Sale"}}
            }
        }
    },
}
_RENAME = {
    "updated_by": "e@example.com",
    "basic_details": {"name": "Renamed @N@", "platforms": ["ANDROID", "IOS"]},
}
OTHER = {"mock_recommended": 0.25, "mock_embedded": 0.25}
SCENARIOS = [
    Scenario("O1", "GET", "/v5/offers?limit=50", targets={"bare": 0.5, "mock_recommended": 1.0}),
    Scenario(
        "C1",
        "POST",
        "/v5/campaigns",
        create_body("@UUID@"),
        campaigns=True,
        idempotency=True,
        targets={"mock_recommended": 0.5, "mock_embedded": 0.25},
    ),
    Scenario("healthz", "GET", "/healthz", targets={"bare_route": 0.7}),
    Scenario("404", "GET", "/nowhere", targets={"bare_route": 0.7}),
    Scenario("O2", "POST", "/v5/offers", _OFFER_BODY, idempotency=True, targets=OTHER),
    Scenario(
        "O3",
        "PATCH",
        "/v5/offers/@POOL@",
        {"updated_by": "e@example.com", "description": "@N@"},
        idempotency=True,
        targets=OTHER,
        pool="offers",
    ),
    Scenario(
        "O3-hot",
        "PATCH",
        "/v5/offers/{offer}",
        {"updated_by": "e@example.com", "description": "@N@"},
        idempotency=True,
        one_row_update="UPDATE offers SET updated_by = $1, updated_at = now() WHERE workspace_id = $2 AND id = $3",
    ),
    Scenario("O4", "GET", "/v5/offers/templates", targets=OTHER),
    Scenario("C2", "GET", "/v5/campaigns/{campaign}", campaigns=True, targets=OTHER),
    Scenario(
        "C3",
        "PATCH",
        "/v5/campaigns/@POOL@",
        _RENAME,
        campaigns=True,
        idempotency=True,
        targets=OTHER,
        pool="campaigns",
    ),
    Scenario(
        "C3-hot",
        "PATCH",
        "/v5/campaigns/{campaign}",
        _RENAME,
        campaigns=True,
        idempotency=True,
        one_row_update=(
            "UPDATE campaigns SET name = $1, revision = revision + 1, updated_at = now()"
            " WHERE workspace_id = $2 AND campaign_id = $3 AND is_latest"
        ),
    ),
    Scenario("C4", "POST", "/v5/campaigns/{campaign}/validate", campaigns=True, targets=OTHER),
    # STOP of a scheduled one-time campaign: each campaign answers 200 once.
    Scenario(
        "C5",
        "PATCH",
        "/v5/campaigns/@POOL@/status",
        {"action": "STOP"},
        campaigns=True,
        idempotency=True,
        targets=OTHER,
        consumes="scheduled campaigns",
    ),
    # The earlier API's update (its body's request_id de-duplicates): a rename of a pooled draft.
    Scenario(
        "L1",
        "PATCH",
        "/core-services/v1/campaigns/@POOL@",
        {"request_id": "@UUID@", "updated_by": "e@example.com", "basic_details": {"name": "V1 @N@"}},
        campaigns=True,
        targets=OTHER,
        pool="campaigns",
    ),
    Scenario(
        "C6",
        "POST",
        "/v5/campaigns/search",
        {"limit": 10, "page": 1},
        campaigns=True,
        idempotency=True,
        targets=OTHER,
    ),
    Scenario(
        "C7",
        "POST",
        "/v5/campaigns/meta",
        {"limit": 10, "page": 1},
        campaigns=True,
        idempotency=True,
        targets=OTHER,
    ),
    # A test send of inline content to one user, through the workspace's push connector (a webhook
    # to `benchmarks.delivery_sink`): a real POST per request, its outbox row written.
    Scenario(
        "C8", "POST", "/v5/campaigns/test", _TEST_SEND_BODY, campaigns=True, idempotency=True, targets=OTHER
    ),
    Scenario("C9", "POST", "/v5/personalization/preview", _PREVIEW_BODY, campaigns=True, targets=OTHER),
    Scenario(
        "O5",
        "POST",
        "/v5/offers/@POOL@/archive",
        {"updated_by": "e@example.com"},
        idempotency=True,
        targets=OTHER,
        consumes="published offers",
    ),
    Scenario(
        "ingest",
        "POST",
        "/v1/customer/{workspace}",
        {"type": "customer", "customer_id": "c@N@", "attributes": {"city": "Pune", "ltv": 12}},
        targets=OTHER,
    ),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Peer:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    database_url: str | None = None  # a served Herald's


@contextmanager
def started(
    name: str,
    command: list[str],
    env: dict[str, str],
    port: int,
    probe: str,
    database_url: str | None = None,
) -> Iterator[Peer]:
    process = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    peer = Peer(name, f"http://127.0.0.1:{port}", process, database_url)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {' '.join(command)}")
            try:
                httpx.get(peer.url + probe, timeout=2.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not start") from None
                time.sleep(0.3)
        yield peer
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)


def herald_env(database_url: str, redis_url: str | None = None, source: Path | None = None) -> dict[str, str]:
    """The environment of a served Herald; `source`: a checkout whose `src` is served instead."""
    env = {**os.environ, "HERALD_DATABASE_URL": database_url, "HERALD_LOG_LEVEL": "warning"}
    env.pop("HERALD_REDIS_URL", None)
    if redis_url:
        env["HERALD_REDIS_URL"] = redis_url
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source / "src"), env.get("PYTHONPATH")]))
    return env


def herald_command(port: int, workers: int = 1) -> list[str]:
    return [sys.executable, "-m", "herald", "serve", "--port", str(port), "--workers", str(workers)]


async def prepare(database_url: str) -> Credentials:
    settings = Settings(database_url=database_url, redis_url=None)
    credentials = await prepare_workspace(settings, WORKSPACE, features={"campaign_meta": True})
    await load_offers(settings, OFFERS, WORKSPACE)
    return credentials


async def analyze_postgres(urls: list[str]) -> None:
    """Statistics for the planner of each PostgreSQL database, as autovacuum keeps them (this machine's
    server runs without it): the scenarios before have written thousands of rows (C1's drafts), and
    a planner that still believes the tables empty picks other plans than a running server's."""
    import asyncpg

    for url in urls:
        connection = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await connection.execute("ANALYZE")
        finally:
            await connection.close()


def _local_postgres(database: str) -> str:
    """The local server as the recommended deployment reaches it: over its Unix socket where it has
    one (README, "Operating a server"), else over loopback TCP."""
    if Path(POSTGRES_SOCKET_DIR, ".s.PGSQL.5432").exists():
        return f"postgresql+asyncpg://postgres@/{database}?host={POSTGRES_SOCKET_DIR}"
    return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}"


@dataclass(frozen=True)
class Fixtures:
    """What the scenarios address: `ids` fill `{offer}`, `{campaign}`, `{workspace}`; `pools` are
    the ids `@POOL@` takes in turn."""

    ids: dict[str, str]
    pools: dict[str, list[str]]


def fixtures(peer: Peer, settings: Settings, credentials: Credentials, hook: str) -> Fixtures:
    """Scheduled offers (O3), draft campaigns (C2-C4) and a user (C9) made through the API of `peer`:
    `POOL` of each kind, the first also the one row of the one-row scenarios; in its database, the
    push connector posting to `hook` and the user C8 sends to."""
    import uuid

    headers = credentials.headers(settings)
    assert peer.database_url is not None, peer.name
    own = Settings(database_url=peer.database_url, redis_url=None, secret_key=os.environ["HERALD_SECRET_KEY"])
    asyncio.run(add_users(own, credentials.workspace_id, 1))
    connector = ConnectorInput("sink", "CUSTOM_API", channel="push", url=hook, secret="s" * 32, timeout=10)
    asyncio.run(add_workspace_connector(own, credentials.workspace_id, connector))

    def created(path: str, body: Any, campaigns: bool = False) -> str:
        response = httpx.post(
            peer.url + path,
            content=orjson.dumps(body),
            headers={
                **credentials.headers(settings, campaigns=campaigns),
                "Idempotency-Key": str(uuid.uuid4()),
                "Content-Type": "application/json",
            },
        )
        assert response.status_code == 201, response.text
        return str(response.json()["data"]["id"])

    offers = [created("/v5/offers", {**_OFFER_BODY, "name": f"Bench_fixture_{n}"}) for n in range(POOL)]
    campaigns = [created("/v5/campaigns", create_body(str(uuid.uuid4())), True) for _ in range(POOL)]
    # The user C9 previews for (without it every preview would measure a 404).
    user = httpx.post(
        peer.url + f"/v1/customer/{credentials.workspace_id}",
        content=orjson.dumps({"type": "customer", "customer_id": "u1", "attributes": {"city": "Pune"}}),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert user.status_code == 200, user.text
    return Fixtures(
        ids={"offer": offers[0], "campaign": campaigns[0], "workspace": credentials.workspace_id},
        pools={"offers": offers, "campaigns": campaigns},
    )


def lua_headers(scenario: Scenario, settings: Settings, credentials: Credentials) -> dict[str, str]:
    headers = credentials.headers(settings, campaigns=scenario.campaigns)
    if scenario.idempotency:
        headers["Idempotency-Key"] = "@UUID@"
    if scenario.body is not None:
        headers["Content-Type"] = "application/json"
    return headers


def lua_body(scenario: Scenario) -> str | None:
    return None if scenario.body is None else orjson.dumps(scenario.body).decode()


def lua_for(scenario: Scenario, settings: Settings, credentials: Credentials, data: Fixtures) -> Path:
    headers = lua_headers(scenario, settings, credentials)
    pool = data.pools[scenario.pool] if scenario.pool else None
    return wrk.script(scenario.method, scenario.path.format(**data.ids), headers, lua_body(scenario), pool)


async def consumables(kind: str, peer: Peer, workspace_id: str, count: int) -> list[str]:
    """`count` fresh objects of `kind` (`Scenario.consumes`) in the served Herald's database,
    written there directly (as an import would): their public ids."""
    assert peer.database_url is not None, peer.name
    settings = Settings(database_url=peer.database_url, redis_url=None)
    if kind == "published offers":
        return await load_offers(settings, count, workspace_id, added_to_present=True)
    assert kind == "scheduled campaigns", kind
    line = {"channel": "SMS", "campaign_delivery_type": "ONE_TIME", "status": "SCHEDULED"}
    lines = (orjson.dumps({**line, "created_by": "e@example.com"}).decode() for _ in range(count))
    parsed = importer.parse_lines(lines, workspace_id, datetime.now(UTC))
    assert not parsed.problems, parsed.problems[:3]
    database = create_database(settings)
    try:
        async with database.writer() as session:
            await importer.insert_rows(session, parsed)
            await session.commit()
        await vacuum_analyze(database.engine, "campaigns")
    finally:
        await database.dispose()
    return [str(row["id"]) for row in parsed.rows]


def consuming_lua(scenario: Scenario, settings: Settings, credentials: Credentials, ids: list[str]) -> Path:
    headers = lua_headers(scenario, settings, credentials)
    return wrk.script(scenario.method, scenario.path, headers, lua_body(scenario), ids, consume=True)


def _consuming_runs(
    peer: Peer,
    scripts: Callable[[list[str]], Path],
    pool: list[str],
    seconds: float,
    connections: int,
) -> wrk.Result:
    """The warm-up (on the last second's worth of ids) and the measured run (on the rest): no id is
    taken twice."""
    warm_up, measured = scripts(pool[-CONSUMED_PER_SECOND:]), scripts(pool[:-CONSUMED_PER_SECOND])
    wrk.run(peer.url, warm_up, seconds=1, connections=connections)
    result = wrk.run(peer.url, measured, seconds=seconds, connections=connections)
    warm_up.unlink()
    measured.unlink()
    return result


async def _one_row_updates(
    dsn: str, update: str, key: tuple[str, str], seconds: float, connections: int
) -> wrk.Result:
    """`update` of one row from `connections` asyncpg connections, each in a transaction of its own
    with a durable commit, for `seconds` (after one uncounted second): the most a row takes."""
    import asyncpg

    # The server's connection limit is shared with the served peers' pools (and, on a shared
    # machine, others'): take as many as it gives, up to `connections`; a queue of a few writers
    # already keeps one row's lock always taken, so the rate hardly depends on their number.
    pool: list[Any] = []
    try:
        while len(pool) < connections:
            pool.append(await asyncpg.connect(dsn))
    except asyncpg.TooManyConnectionsError:
        if len(pool) < 4:
            raise
    print(f"  ({ONE_ROW_LIMIT}: {len(pool)} connections)", flush=True)

    async def writers(length: float) -> list[float]:
        stop = time.monotonic() + length
        done: list[float] = []

        async def writer(connection: Any) -> None:
            while time.monotonic() < stop:
                began = time.perf_counter()
                async with connection.transaction():
                    await connection.execute(update, f"bare {len(done)}", *key)
                done.append(time.perf_counter() - began)

        await asyncio.gather(*(writer(connection) for connection in pool))
        return sorted(done)

    try:
        await writers(1.0)  # uncounted, as every side's first second
        latencies = await writers(seconds)
    finally:
        for connection in pool:
            await connection.close()
    return wrk.Result(
        requests_per_second=len(latencies) / seconds,
        p50_ms=1000 * latencies[len(latencies) // 2] if latencies else 0.0,
        p99_ms=1000 * latencies[int(len(latencies) * 0.99)] if latencies else 0.0,
        requests=len(latencies),
        non_2xx=0,
        errors=0,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--no-postgres", action="store_true", help="skip the recommended deployment")
    parser.add_argument(
        "--keep", action="store_true", help="after the run, print the peers' URLs and wait (for profiling)"
    )
    parser.add_argument(
        "--baseline", type=Path, help="another Herald checkout to serve too (before/after in one run)"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install -y wrk); see benchmarks/README.md", file=sys.stderr)
        return 2
    if not PRISM.exists():
        print(f"Prism is not installed: (cd {PEERS_DIR} && npm ci)", file=sys.stderr)
        return 2
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    # Stopped from outside, still stop the peers (the `finally` of each `started`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    # Seals the connector secrets of every served Herald (C8's push connector).
    os.environ["HERALD_SECRET_KEY"] = Fernet.generate_key().decode()
    work = Path(tempfile.mkdtemp(prefix="herald-peers-"))
    sqlite_file = work / "herald.db"
    sqlite_url = f"sqlite+aiosqlite:///{sqlite_file}"
    postgres_url = os.environ.get("HERALD_BENCH_POSTGRES_URL", _local_postgres("herald_bench_peers"))
    redis_url = os.environ.get("HERALD_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    if args.baseline is not None and not args.no_postgres:
        # Two PostgreSQL deployments of two processes each: 4 x 20 pooled connections would pass
        # the server's default limit of 100 (a refused connection answers 503).
        os.environ.setdefault("HERALD_DB_POOL_SIZE", "16")
    settings = Settings(database_url=sqlite_url)
    sqlite_credentials = asyncio.run(prepare(sqlite_url))
    pg_credentials = None
    if not args.no_postgres:
        asyncio.run(recreate_postgres(postgres_url))
        pg_credentials = asyncio.run(prepare(postgres_url))
    base_sqlite_url = f"sqlite+aiosqlite:///{work / 'base.db'}"
    database = make_url(postgres_url)
    base_postgres_url = database.set(database=f"{database.database}_base").render_as_string(
        hide_password=False
    )
    base_credentials: dict[str, Credentials] = {}
    if args.baseline is not None:
        base_credentials["base-sqlite"] = asyncio.run(prepare(base_sqlite_url))
        if not args.no_postgres:
            asyncio.run(recreate_postgres(base_postgres_url))
            base_credentials["base-pg"] = asyncio.run(prepare(base_postgres_url))

    with ExitStack() as stack:
        port, smtp_port = free_port(), free_port()
        sink_command = [sys.executable, "-m", "benchmarks.delivery_sink", "--http-port", str(port)]
        stack.enter_context(
            started("sink", [*sink_command, "--smtp-port", str(smtp_port)], dict(os.environ), port, "/stats")
        )
        sink = f"http://127.0.0.1:{port}/hook"
        port = free_port()
        sqlite_peer = stack.enter_context(
            started(
                "herald-sqlite", herald_command(port), herald_env(sqlite_url), port, "/healthz", sqlite_url
            )
        )
        peers: dict[str, tuple[Peer, Credentials, Fixtures]] = {
            "herald-sqlite": (
                sqlite_peer,
                sqlite_credentials,
                fixtures(sqlite_peer, settings, sqlite_credentials, sink),
            )
        }
        if pg_credentials is not None:
            port = free_port()
            pg_peer = stack.enter_context(
                started(
                    "herald-pg",
                    herald_command(port, 2),
                    herald_env(postgres_url, redis_url),
                    port,
                    "/healthz",
                    postgres_url,
                )
            )
            peers["herald-pg"] = (pg_peer, pg_credentials, fixtures(pg_peer, settings, pg_credentials, sink))
        for name, credentials in base_credentials.items():
            port = free_port()
            on_pg = name == "base-pg"
            env = herald_env(
                base_postgres_url if on_pg else base_sqlite_url, redis_url if on_pg else None, args.baseline
            )
            command = herald_command(port, 2 if on_pg else 1)
            database_url = base_postgres_url if on_pg else base_sqlite_url
            peer = stack.enter_context(started(name, command, env, port, "/healthz", database_url))
            peers[name] = (peer, credentials, fixtures(peer, settings, credentials, sink))
        spec = work / "openapi.json"
        spec.write_bytes(httpx.get(sqlite_peer.url + "/openapi.json").content)
        port = free_port()
        bare_command = [sys.executable, "-m", "uvicorn", "bare_offers:app", "--app-dir", str(PEERS_DIR)]
        bare_command += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
        bare = stack.enter_context(
            started("bare", bare_command, {**os.environ, "HERALD_DB": str(sqlite_file)}, port, "/healthz")
        )
        peers["bare"] = (bare, sqlite_credentials, peers["herald-sqlite"][2])
        port = free_port()
        mock_command = [str(PRISM), "mock", "-h", "127.0.0.1", "-p", str(port), "-v", "silent", str(spec)]
        mock = stack.enter_context(started("mock", mock_command, dict(os.environ), port, "/v5/offers"))
        peers["mock"] = (mock, sqlite_credentials, peers["herald-sqlite"][2])
        if args.keep:
            for name, (peer, credentials, data) in peers.items():
                print(
                    name, peer.url, peer.process.pid, credentials.headers(settings, campaigns=True), data.ids
                )
            input("press enter to stop the peers")
        pg_dsn = postgres_url.replace("postgresql+asyncpg", "postgresql") if pg_credentials else None
        figures = measure(chosen, peers, settings, args.seconds, args.connections, pg_dsn)
    summary("peers", "sqlite + postgresql" if pg_credentials else "sqlite", figures)
    return 0


def _sides(scenario: Scenario, peers: dict[str, Any]) -> list[str]:
    if scenario.name == "O1":  # the baseline's sides too, when served: O1 before and after in one run
        order: tuple[str, ...] = ("herald-sqlite", "base-sqlite", "bare", "herald-pg", "base-pg", "mock")
    elif scenario.name in ("healthz", "404"):
        order = ("herald-sqlite", "bare", "herald-pg")
    else:
        order = ("herald-sqlite", "base-sqlite", "herald-pg", "base-pg", "mock")
    return [name for name in order if name in peers]


def measure(
    scenarios: list[Scenario],
    peers: dict[str, tuple[Peer, Credentials, Fixtures]],
    settings: Settings,
    seconds: float,
    connections: int,
    pg_dsn: str | None = None,
) -> list[Figure]:
    figures: list[Figure] = []
    print(
        f"{'scenario':<8} {'peer':<14} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} {'errors':>6}"
        f" {'CPU µs/req':>10}"
    )
    postgres = [
        peer.database_url
        for peer, _, _ in peers.values()
        if peer.database_url and "postgresql" in peer.database_url
    ]
    for scenario in scenarios:
        asyncio.run(analyze_postgres(list(dict.fromkeys(postgres))))
        results: dict[str, wrk.Result] = {}
        for name in _sides(scenario, peers):
            peer, credentials, data = peers[name]
            path = "/healthz" if name == "bare" and scenario.name == "404" else scenario.path
            if scenario.consumes is not None:
                # The mock keeps no state: any ids serve it (the SQLite side's).
                owner = peers["herald-sqlite"][0] if name == "mock" else peer
                count = round(CONSUMED_PER_SECOND * (seconds + 1))
                pool = asyncio.run(consumables(scenario.consumes, owner, credentials.workspace_id, count))
                scripts = partial(consuming_lua, scenario, settings, credentials)
                result = _consuming_runs(peer, scripts, pool, seconds, connections)
                cpu: float | None = None  # not measured: its warm-up runs inside `_consuming_runs`
            else:
                lua = lua_for(replace(scenario, path=path), settings, credentials, data)
                # One second of the same load first, not counted, on every side alike: what is measured
                # is the steady state, not the first requests' lazy work (statement compilation, caches).
                wrk.run(peer.url, lua, seconds=1, connections=connections)
                cpu = _session_cpu_seconds(peer.process.pid)
                result = wrk.run(peer.url, lua, seconds=seconds, connections=connections)
                cpu = _session_cpu_seconds(peer.process.pid) - cpu
                lua.unlink()
            results[name] = result
            _print_line(scenario.name, name, result, cpu)
        if scenario.one_row_update and pg_dsn and "herald-pg" in peers:
            ids = peers["herald-pg"][2].ids
            key = (ids["workspace"], ids["campaign" if scenario.campaigns else "offer"])
            limit = asyncio.run(_one_row_updates(pg_dsn, scenario.one_row_update, key, seconds, connections))
            results[ONE_ROW_LIMIT] = limit
            _print_line(scenario.name, ONE_ROW_LIMIT, limit)
        figures += ratios(scenario, results)
    return figures


def _session_cpu_seconds(session: int) -> float:
    """User + system CPU of the live processes of `session` (a peer and its workers, started with
    `start_new_session`). Per request it moves far less with the machine's load than req/s does;
    the database's and Redis's own CPU is not in it."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[3]) == session:  # after the name: state, ppid, pgrp, session, …
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _print_line(scenario: str, peer: str, result: wrk.Result, cpu: float | None = None) -> None:
    per_request = (
        f"{1e6 * cpu / result.requests:>8,.0f}" if cpu is not None and result.requests else f"{'':>8}"
    )
    print(
        f"{scenario:<8} {peer:<14} {result.requests_per_second:>9,.0f} {result.p50_ms:>8.1f}"
        f" {result.p99_ms:>8.1f} {result.non_2xx:>8} {result.errors:>6} {per_request}",
        flush=True,
    )


def ratios(scenario: Scenario, results: dict[str, wrk.Result]) -> list[Figure]:
    found: list[Figure] = []

    def rps(name: str) -> float | None:
        return results[name].requests_per_second if name in results else None

    sqlite, pg, bare, mock = rps("herald-sqlite"), rps("herald-pg"), rps("bare"), rps("mock")
    targets = scenario.targets
    if "bare" in targets and sqlite and bare:
        found.append(Figure(f"{scenario.name} sqlite / bare req/s", sqlite / bare, at_least=targets["bare"]))
        p99 = results["herald-sqlite"].p99_ms / results["bare"].p99_ms
        found.append(Figure(f"{scenario.name} sqlite / bare p99", p99, at_most=3.0))
    if "bare_route" in targets and bare:
        for name, value in (("sqlite", sqlite), ("pg", pg)):
            if value:
                found.append(
                    Figure(
                        f"{scenario.name} {name} / bare route req/s",
                        value / bare,
                        at_least=targets["bare_route"],
                    )
                )
    if mock:
        for name in ("base-pg", "base-sqlite"):  # the baseline's figures, for comparison (no target)
            if name in results:
                found.append(Figure(f"{scenario.name} {name} / mock req/s", (rps(name) or 0.0) / mock))
        if pg:
            goal = targets.get("mock_recommended")
            found.append(Figure(f"{scenario.name} pg x2 / mock req/s", pg / mock, at_least=goal))
        if sqlite:
            goal = targets.get("mock_embedded")
            found.append(Figure(f"{scenario.name} sqlite / mock req/s", sqlite / mock, at_least=goal))
    if pg and ONE_ROW_LIMIT in results:  # no target: what is left of a row's limit to the route
        limit = results[ONE_ROW_LIMIT].requests_per_second
        found.append(Figure(f"{scenario.name} pg x2 / bare one-row limit req/s", pg / limit))
    if scenario.name == "C1":
        for name in ("herald-sqlite", "herald-pg"):  # the baseline's p99 is in the table above
            if name in results:
                found.append(Figure(f"C1 {name} p99 ms", results[name].p99_ms, "ms", at_most=100.0))
    return found


if __name__ == "__main__":
    raise SystemExit(main())
