"""Event-triggered delivery under sustained ingestion, over real sockets, as deployed:

- SQLite (the default `--database-url`): one `herald serve` process, its worker in-process (woken
  by an in-process signal at each ingestion's commit);
- PostgreSQL: `herald serve --workers N` and a separate `herald worker` (woken by LISTEN/NOTIFY).

Each run starts from a fresh database (on PostgreSQL `<name>_triggers` beside the database named,
dropped and created again; its users and events analysed once loaded, as autovacuum would). The worker's poll interval is an hour: only the wake-ups on commit find the work. This process
drives the ingestion (a raw keep-alive HTTP/1.1 client, so the driver costs little of the shared
CPU) and is the sink: a raw asyncio HTTP server on 127.0.0.1 recording when each message arrives.

    python -m benchmarks.triggers [--rate 1000] [--seconds 10] [--batch 100] [--users 2000]
                                  [--campaigns 10] [--connections 16] [--serve-workers 2]
                                  [--bare-rate R] [--sink-batch 1] [--pool-size 10]
                                  [--database-url URL] [--redis-url URL] [--source CHECKOUT]
                                  [--trace FILE] [--alongside N]

`--campaigns` ACTIVE EVENT_TRIGGERED Push campaigns (ASAP), each waiting for an action of its own;
events go round-robin over the actions at `--rate` events per second for `--seconds`, so each event
fires exactly one campaign. Events go as a client sending many users' events sends them: `--batch N`
(default 100) events of N users per request (`POST /v1/transition`, which takes up to 1,000
elements); `--batch 1` sends each event alone (`POST /v1/event`), as a device reporting its own does.
`--sink-batch N` gives the sink's connector `batch_size` N (N messages per webhook call).
`--alongside N` adds N users and, once the triggered campaigns are ACTIVE, publishes a one-time
campaign to every user, whose messages go out while the events are ingested: the latency of the
triggered messages is then measured beside a large send (the worker gives way to them at the end of
each campaign's turn, `HERALD_DELIVERY_TURN_SECONDS`).
Figures:
- event → sink latency p50 / p95 (from the ingestion's 200, i.e. after its commit, to the message's
  arrival at the sink; target p95 <= 1 s);
- ingestion rate achieved with the campaigns active, beside the same ingestion with no campaign
  waiting (the bare reference, run first, side by side, at `--bare-rate`, default `--rate`);
- backlog: firings acknowledged but not yet at the sink, sampled every second; its growth over the
  second half of the ingestion (firings per second, by least squares: 0 when the worker keeps up),
  its value when ingestion stops (target <= 1 s of ingestion) and the time to drain it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from cryptography.fernet import Fernet

from benchmarks.common import (
    Figure,
    argument_parser,
    prepare_workspace,
    start_afresh,
    summary,
    table,
    vacuum_analyze,
)
from benchmarks.delivery import _push_body, add_users
from benchmarks.peers import free_port, herald_env, started
from herald.clock import SystemClock
from herald.config import Settings
from herald.db import create_database
from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import add_connector

WORKSPACE = "bench-triggers"


class Progress:
    """Which events were acknowledged and which arrived, and how many did both (the backlog is the
    acknowledged ones that have not arrived yet)."""

    def __init__(self) -> None:
        self.acknowledged: dict[int, float] = {}
        self.arrived: dict[int, float] = {}
        self.both = 0
        self.alongside = 0  # messages of the one-time campaign (`--alongside`)

    def ack(self, seq: int, at: float) -> None:
        self.acknowledged[seq] = at
        if seq in self.arrived:
            self.both += 1

    def arrive(self, seq: int, at: float) -> None:
        if seq in self.arrived:
            return
        self.arrived[seq] = at
        if seq in self.acknowledged:
            self.both += 1

    @property
    def backlog(self) -> int:
        return len(self.acknowledged) - self.both


class Sink:
    """Answers every POST 204 and records each message's arrival (a triggered message's title is its
    event's number; the one-time campaign's are counted)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = _content_length(head)
                body = await reader.readexactly(length) if length else b""
                now = time.perf_counter()
                with contextlib.suppress(Exception):
                    for message in _messages(orjson.loads(body)):
                        title = message["message"]["basic_details"]["title"]
                        if title.isdigit():
                            self.progress.arrive(int(title), now)
                        else:
                            self.progress.alongside += 1
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the worker closed the connection, or the benchmark is over
        finally:
            writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def _messages(payload: Any) -> list[dict[str, Any]]:
    return payload if isinstance(payload, list) else [payload]


class Client:
    """One keep-alive HTTP/1.1 connection: a request, then its answer (Content-Length bodies)."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self._port = port
        self._head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any, **headers: str) -> tuple[int, bytes]:
        try:
            return await self._request(method, path, body, **headers)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                raise
            # The server closed the kept-alive connection (idle 5 s) as the request went out,
            # before reading it: nothing was answered, the request was not served.
            self.close()
            return await self._request(method, path, body, **headers)

    async def _request(self, method: str, path: str, body: Any, **headers: str) -> tuple[int, bytes]:
        if self._reader is not None and self._reader.at_eof():
            self.close()
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self._port)
        payload = orjson.dumps(body) if body is not None else b""
        extra = "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in headers.items())
        self._writer.write(
            (
                f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self._head}{extra}"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            ).encode()
            + payload
        )
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = _content_length(head)
        return status, await self._reader.readexactly(length) if length else b""

    def close(self) -> None:
        """Closed now; the next request opens a new connection."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def campaign(index: int) -> dict[str, Any]:
    return {
        "channel": "PUSH",
        "campaign_delivery_type": "EVENT_TRIGGERED",
        "created_by": "bench@example.com",
        "basic_details": {"name": f"Trigger {index}", "platforms": ["ANDROID"]},
        "campaign_content": {
            "content": {
                "push": {
                    "android": {
                        "template_type": "BASIC",
                        "basic_details": {"title": "{{ event.seq }}", "message": "Hi {{ user.first_name }}"},
                    }
                }
            }
        },
        "trigger_condition": {
            "included_filters": {
                "filter_operator": "and",
                "filters": [{"filter_type": "actions", "action_name": f"act{index}"}],
            },
            "trigger_delay_type": "ASAP",
        },
        "segmentation_details": {"is_all_user_campaign": True},
        "delivery_controls": {"bypass_dnd": True},
    }


async def _published(write: Client, body: dict[str, Any]) -> str:
    """A campaign created from `body` and published: its id."""
    status, answer = await write.request("POST", "/v5/campaigns", body, Idempotency_Key=str(uuid.uuid4()))
    assert status == 201, answer
    campaign_id = str(orjson.loads(answer)["data"]["id"])
    status, answer = await write.request(
        "PATCH",
        f"/core-services/v1/campaigns/{campaign_id}",
        {"request_id": uuid.uuid4().hex, "updated_by": "bench@example.com", "status": "PUBLISH"},
        Idempotency_Key=str(uuid.uuid4()),
    )
    assert status == 204, answer
    return campaign_id


def _event(seq: int, users: int, campaigns: int) -> dict[str, Any]:
    return {
        "type": "event",
        "customer_id": f"u{seq % users}",
        "actions": [{"action": f"act{seq % campaigns}", "attributes": {"seq": seq}}],
    }


async def ingest(
    clients: list[Client],
    workspace: str,
    progress: Progress,
    rate: float,
    seconds: float,
    users: int,
    campaigns: int,
    batch: int,
    first: int,
    samples: list[tuple[float, int]] | None = None,
) -> float:
    """Events paced at `rate` (`batch` per request) over the clients' connections, each request's
    events acknowledged at its 200; the event rate achieved. With `samples`, the backlog is sampled
    every second meanwhile."""
    requests = max(1, int(rate * seconds) // batch)
    start = time.perf_counter()
    next_request = 0

    async def one(client: Client) -> None:
        nonlocal next_request
        while next_request < requests:
            index = next_request
            next_request += 1
            delay = start + index * batch / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            seqs = range(first + index * batch, first + (index + 1) * batch)
            if batch == 1:
                status, body = await client.request(
                    "POST", f"/v1/event/{workspace}", _event(seqs[0], users, campaigns)
                )
            else:
                elements = [_event(seq, users, campaigns) for seq in seqs]
                status, body = await client.request(
                    "POST", f"/v1/transition/{workspace}", {"type": "transition", "elements": elements}
                )
            assert status == 200, body
            now = time.perf_counter()
            for seq in seqs:
                progress.ack(seq, now)

    async def sample() -> None:
        assert samples is not None
        while True:
            await asyncio.sleep(1)
            samples.append((time.perf_counter() - start, progress.backlog))

    sampler = asyncio.create_task(sample()) if samples is not None else None
    try:
        await asyncio.gather(*(one(client) for client in clients))
    finally:
        if sampler is not None:
            sampler.cancel()
    return requests * batch / (time.perf_counter() - start)


def growth(samples: list[tuple[float, int]]) -> float:
    """The backlog's slope (firings per second) over the second half of the samples."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return 0.0
    return statistics.linear_regression([t for t, _ in half], [float(b) for _, b in half]).slope


async def _analyse(settings: Settings) -> None:
    database = create_database(settings)
    try:
        await vacuum_analyze(database.engine, "audience_users, audience_events, audience_push_tokens")
    finally:
        await database.dispose()


async def add_sink(settings: Settings, workspace: str, port: int, batch: int) -> None:
    database = create_database(settings)
    try:
        async with database.writer() as session:
            await add_connector(
                session,
                SystemClock().now(),
                workspace,
                ConnectorInput(
                    "sink",
                    "CUSTOM_API",
                    channel="push",
                    url=f"http://127.0.0.1:{port}/",
                    secret="s" * 32,
                    timeout=5,
                    batch_size=batch if batch > 1 else None,
                ),
                settings.secret_key,
            )
            await session.commit()
    finally:
        await database.dispose()


async def main() -> None:
    parser = argument_parser(__doc__, "herald-bench-triggers.db")
    parser.add_argument("--rate", type=float, default=1000, help="events per second")
    parser.add_argument("--bare-rate", type=float, default=None, help="the bare reference's (default --rate)")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--bare-seconds", type=float, default=None, help="default: half of --seconds, <= 20")
    parser.add_argument("--batch", type=int, default=100, help="events per request")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--serve-workers", type=int, default=2, help="API processes on PostgreSQL")
    parser.add_argument("--delivery-concurrency", type=int, default=32)
    parser.add_argument("--pool-size", type=int, default=10, help="database connections per process")
    parser.add_argument("--sink-batch", type=int, default=1, help="the connector's batch_size")
    parser.add_argument("--redis-url", default=os.environ.get("HERALD_BENCH_REDIS_URL"))
    parser.add_argument(
        "--source", type=Path, default=None, help="serve this checkout's src instead (an A/B reference)"
    )
    parser.add_argument(
        "--trace", type=Path, default=None, help="write the backlog's samples here (CSV: seconds, firings)"
    )
    parser.add_argument(
        "--alongside", type=int, default=0, help="users of a one-time campaign sent meanwhile"
    )
    args = parser.parse_args()
    key = Fernet.generate_key().decode()
    sqlite = args.database_url.startswith("sqlite")
    engine = "sqlite" if sqlite else "postgresql"
    # A fresh database each run (the campaigns of an earlier run would still be ACTIVE).
    args.database_url = await start_afresh(args.database_url, "triggers")
    settings = Settings(database_url=args.database_url, redis_url=None, secret_key=key)
    workspace = f"{WORKSPACE}-{uuid.uuid4().hex[:8]}"
    credentials = await prepare_workspace(settings, workspace)
    progress = Progress()
    sink = Sink(progress)
    server = await asyncio.start_server(sink.handle, "127.0.0.1", 0)
    await add_sink(settings, workspace, server.sockets[0].getsockname()[1], args.sink_batch)

    port = free_port()
    env = {
        **herald_env(args.database_url, args.redis_url, args.source),
        "HERALD_SECRET_KEY": key,
        "HERALD_WORKER_INTERVAL_SECONDS": "3600",
        "HERALD_DELIVERY_CONCURRENCY": str(args.delivery_concurrency),
        "HERALD_DB_POOL_SIZE": str(args.pool_size),
    }
    serve = [sys.executable, "-m", "herald", "serve", "--port", str(port)]
    with contextlib.ExitStack() as stack:
        if sqlite:
            stack.enter_context(started("herald-sqlite", serve, env, port, "/healthz"))
        else:
            worker_env = {**env, "HERALD_IN_PROCESS_WORKER": "false"}
            stack.enter_context(
                started(
                    "herald-pg",
                    [*serve, "--workers", str(args.serve_workers)],
                    worker_env,
                    port,
                    "/healthz",
                )
            )
            # `herald worker` serves nothing: it is probed through the API's port.
            stack.enter_context(
                started(
                    "herald-worker",
                    [sys.executable, "-m", "herald", "worker", "--interval", "3600"],
                    worker_env,
                    port,
                    "/healthz",
                )
            )
        figures = await drive(args, settings, credentials, workspace, port, progress)
    server.close()
    rows, summary_figures, lost = figures
    print(
        table(
            f"triggers :: {engine} ({args.campaigns} campaigns, {args.batch} events per request, "
            f"{args.sink_batch} messages per webhook call, lost {lost}"
            + (
                f", a one-time campaign to {args.alongside + args.users:,} users alongside)"
                if args.alongside
                else ")"
            ),
            rows,
        )
    )
    summary("triggers", engine, summary_figures)
    if lost:
        raise SystemExit(f"{lost} firings never reached the sink")


async def drive(
    args: Any, settings: Settings, credentials: Any, workspace: str, port: int, progress: Progress
) -> tuple[list[tuple[str, str]], list[Figure], int]:
    headers = credentials.headers(settings)
    clients = [Client(port, headers) for _ in range(args.connections)]
    write = Client(port, credentials.headers(settings, campaigns=True))
    try:
        for start in range(0, args.users, 1000):
            elements = [
                {
                    "type": "customer",
                    "customer_id": f"u{i}",
                    "attributes": {"push_id": f"t{i}", "platform": "ANDROID"},
                }
                for i in range(start, min(args.users, start + 1000))
            ]
            status, body = await clients[0].request(
                "POST", f"/v1/transition/{workspace}", {"type": "transition", "elements": elements}
            )
            assert status == 200, body
        # The bare reference: the same ingestion with no campaign waiting for the events.
        bare_seconds = args.bare_seconds or min(args.seconds / 2, 20)
        bare_rate = await ingest(
            clients,
            workspace,
            Progress(),
            args.bare_rate or args.rate,
            bare_seconds,
            args.users,
            args.campaigns,
            args.batch,
            0,
        )
        # This machine's PostgreSQL runs without autovacuum: the statistics it would keep.
        await _analyse(settings)
        for index in range(args.campaigns):
            await _published(write, campaign(index))
        await asyncio.sleep(1)  # the publish wakes the worker: it creates the campaigns' executions
        if args.alongside:
            await add_users(settings, workspace, args.alongside, tokens=True)
            await _analyse(settings)
            await _published(write, _push_body("Alongside"))
            for _ in range(600):  # its sends begun (at most a minute)
                if progress.alongside:
                    break
                await asyncio.sleep(0.1)
        alongside_before = progress.alongside
        samples: list[tuple[float, int]] = []
        rate = await ingest(
            clients,
            workspace,
            progress,
            args.rate,
            args.seconds,
            args.users,
            args.campaigns,
            args.batch,
            10_000_000,
            samples,
        )
        ended = time.perf_counter()
        alongside_during = progress.alongside - alongside_before
        backlog = progress.backlog
        for _ in range(2400):  # at most 2 minutes to drain
            if progress.backlog == 0:
                break
            await asyncio.sleep(0.05)
        drained = time.perf_counter() - ended
    finally:
        for client in (*clients, write):
            client.close()
    arrived = progress.arrived
    latencies = sorted(
        max(0.0, arrived[seq] - at) * 1000 for seq, at in progress.acknowledged.items() if seq in arrived
    )
    lost = len(progress.acknowledged) - len(latencies)
    p50 = statistics.median(latencies) if latencies else float("inf")
    p95 = latencies[int(len(latencies) * 0.95) - 1] if latencies else float("inf")
    backlog_seconds = backlog / max(rate, 1)
    slope = growth(samples)
    peak = max((b for _, b in samples), default=0)
    if args.trace is not None:  # where a stall was, to line up with the server's own logs
        args.trace.write_text("".join(f"{at:.1f},{firings}\n" for at, firings in samples))
    rows = [
        ("events", f"{len(progress.acknowledged):,} in {args.seconds:g} s, {args.batch} per request"),
        (
            "ingestion, bare (no campaign waiting)",
            f"{bare_rate:,.0f} events/s (offered {args.bare_rate or args.rate:,.0f})",
        ),
        ("ingestion, campaigns waiting", f"{rate:,.0f} events/s (offered {args.rate:,.0f})"),
        ("event -> sink p50", f"{p50:,.1f} ms"),
        ("event -> sink p95", f"{p95:,.1f} ms"),
        ("event -> sink max", f"{latencies[-1] if latencies else float('inf'):,.1f} ms"),
        ("backlog: peak / at the end of ingestion", f"{peak} / {backlog} firings ({backlog_seconds:.2f} s)"),
        ("backlog growth, second half", f"{slope:+.1f} firings/s"),
        ("drained after", f"{drained:.2f} s"),
    ]
    if args.alongside:
        total = args.alongside + args.users
        rows.append(
            (
                "one-time campaign alongside",
                f"{alongside_during:,} of its {total:,} messages arrived during the ingestion, "
                f"{total - alongside_before - alongside_during:,} were left when it ended",
            )
        )
    figures = [
        Figure("event->sink p50", p50, "ms"),
        Figure("event->sink p95", p95, "ms", at_most=1000),
        Figure("events/s ingested", rate, "/s", at_least=args.rate),
        Figure("ingestion vs bare", rate / bare_rate if bare_rate else 0.0, "", at_least=0.5),
        Figure("backlog (s of ingestion)", backlog_seconds, "", at_most=1.0),
        Figure("backlog growth", slope, "/s"),
    ]
    return rows, figures, lost


if __name__ == "__main__":
    asyncio.run(main())
