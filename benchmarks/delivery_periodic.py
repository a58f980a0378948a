"""A PERIODIC run and a SEND_IN_BTS campaign, side by side with the bare push script of
`benchmarks.delivery` (the same reference as the one-time figures), against the same local sink.

    python -m benchmarks.delivery_periodic [--users 100000] [--concurrency 32] [--workers 1]
                                           [--database-url URL]

Herald runs as deployed (`herald serve`, plus `--workers` `herald worker` processes on PostgreSQL;
on SQLite, `--workers` above 1 counts the served engine, the rest `herald worker` processes beside
it) with a one-second worker interval, on the real clock. Each campaign is published to start a few
seconds ahead and is timed from that start to the last message at the sink:
1. a DAILY periodic Push campaign's first run to `--users` users (the run started by the worker
   tick, its child campaign written, its audience resolved at run time, then dispatched);
2. a one-time SEND_IN_BTS Push campaign to `--users` users, half of them with events: every user's
   best time is computed from the event history and stored, and since the window closes a minute
   after the start, every user falls back to the start time (the whole send-time path, without
   waiting for the hour).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import uvloop
from cryptography.fernet import Fernet
from sqlalchemy import insert

from benchmarks.common import Figure, argument_parser, start_afresh, summary, table
from benchmarks.delivery import (
    CHUNK,
    RATIO,
    SECRET,
    Processes,
    Run,
    Sink,
    _bare_push,
    _create,
    _engine,
    _free_port,
    _limit_s,
    _publish,
    _push_body,
    _wait_ready,
    _workspace,
)
from herald.audience.models import Event
from herald.config import Settings
from herald.db import create_database
from herald.delivery.config import ConnectorInput
from herald.ids import object_ids

LEAD_S = 4  # the campaigns start this far after their publish


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _periodic_body(start: datetime) -> dict[str, Any]:
    body = _push_body("Daily")
    body["campaign_delivery_type"] = "PERIODIC"
    body["scheduling_details"] = {
        "delivery_type": "AT_FIXED_TIME",
        "start_time": _iso(start),
        "timezone": "UTC",
        "periodic_details": {"sending_frequency": "DAILY", "repeat_frequency": 1, "no_of_occurences": 3},
    }
    return body


def _bts_body(start: datetime) -> dict[str, Any]:
    body = _push_body("Best time")
    body["scheduling_details"] = {
        "delivery_type": "SEND_IN_BTS",
        "start_time": _iso(start),
        "timezone": "UTC",
        "bts_details": {
            "send_in_bts": True,
            "if_user_bts_is_not_available": "SEND_AT_START_TIME",
            "if_user_bts_outside_time_window": "SEND_AT_START_TIME",
            "window_end_time": _iso(start + timedelta(minutes=1)),
        },
    }
    return body


async def add_events(settings: Settings, workspace_id: str, users: int) -> None:
    """Two events for every other user, at an hour that differs from user to user."""
    database = create_database(settings)
    now = datetime.now(UTC)
    try:
        with_events = list(range(0, users, 2))
        for start in range(0, len(with_events), CHUNK // 2):
            chunk = with_events[start : start + CHUNK // 2]
            ids = object_ids(now, 2 * len(chunk))
            rows = [
                {
                    "workspace_id": workspace_id,
                    "id": ids[2 * n + k],
                    "customer_id": f"u{i:08d}",
                    "action": "app_opened",
                    "attributes": {},
                    "occurred_at": now - timedelta(days=1 + k, hours=i % 24),
                    "received_at": now,
                }
                for n, i in enumerate(chunk)
                for k in range(2)
            ]
            async with database.writer() as session:
                await session.execute(insert(Event), rows)
                await session.commit()
    finally:
        await database.dispose()


async def _scheduled_run(
    api: httpx.AsyncClient, headers: dict[str, str], sink: Sink, body_at: Any, count: int
) -> Run:
    """Create and publish a campaign starting LEAD_S seconds ahead; timed from its start."""
    await sink.reset()
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD_S)
    campaign_id = await _create(api, headers, body_at(start))
    await _publish(api, headers, campaign_id)
    return Run.of(await sink.wait_for(count, _limit_s(count)), start.timestamp())


async def run(args: Any, settings: Settings, key: str) -> list[Figure]:
    processes = Processes()
    http_port, smtp_port, api_port = _free_port(), _free_port(), _free_port()
    sink_process = processes.start(
        [
            sys.executable,
            "-m",
            "benchmarks.delivery_sink",
            "--http-port",
            str(http_port),
            "--smtp-port",
            str(smtp_port),
        ]
    )
    assert sink_process.stdout is not None
    sink_process.stdout.readline()  # "ready"
    figures: list[Figure] = []
    try:
        async with httpx.AsyncClient(timeout=60) as plain:
            sink = Sink(plain, http_port, smtp_port)
            hook = ConnectorInput(
                "sink", "CUSTOM_API", channel="push", url=sink.hook, secret=SECRET, timeout=30
            )
            began = time.perf_counter()
            periodic = await _workspace(settings, "PER", args.users, hook)
            bts = await _workspace(settings, "BTS", args.users, hook)
            await add_events(settings, bts.workspace_id, args.users)
            print(f"set up {2 * args.users:,} users in {time.perf_counter() - began:.0f}s", flush=True)
            env = {
                **os.environ,
                "HERALD_DATABASE_URL": args.database_url,
                "HERALD_SECRET_KEY": key,
                "HERALD_LOG_LEVEL": "warning",
                "HERALD_WORKER_INTERVAL_SECONDS": "1",
                "HERALD_DELIVERY_CONCURRENCY": str(args.concurrency),
            }
            env.pop("HERALD_REDIS_URL", None)
            env.pop("HERALD_CLOCK_FILE", None)
            processes.start([sys.executable, "-m", "herald", "serve", "--port", str(api_port)], env)
            named = ""
            # On SQLite the served process runs the engine too: `--workers` counts it.
            beside = args.workers if _engine(args.database_url) == "postgresql" else args.workers - 1
            for _ in range(beside):
                processes.start([sys.executable, "-m", "herald", "worker"], env)
            named = f" ({args.workers} workers)" if args.workers > 1 else ""
            runs: list[tuple[str, Run, Run]] = []
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=60) as api:
                await _wait_ready(api, "/healthz")
                for name, credentials, body_at in (
                    ("periodic run", periodic, _periodic_body),
                    ("SEND_IN_BTS", bts, _bts_body),
                ):
                    headers = credentials.headers(settings, campaigns=True)
                    herald = await _scheduled_run(api, headers, sink, body_at, args.users)
                    bare = await _bare_push(settings, credentials.workspace_id, sink, args.concurrency, 1)
                    runs.append((name, herald, bare))
                    rows = [
                        (
                            "Herald msg/s",
                            f"{herald.rate:,.0f} ({herald.messages:,} in {herald.seconds:.1f} s)",
                        ),
                        ("bare msg/s", f"{bare.rate:,.0f} ({bare.messages:,} in {bare.seconds:.1f} s)"),
                        (
                            "Herald / bare",
                            f"{herald.rate / bare.rate:.2f} (target >= {RATIO:g})" if bare.rate else "-",
                        ),
                        ("Herald start -> first message", f"{herald.first_s * 1000:.0f} ms"),
                        ("Herald repeats at the sink", str(herald.repeats)),
                    ]
                    print(table(f"{name}: {args.users:,} users", rows), flush=True)
        for scenario, herald, bare in runs:
            name = f"{scenario}{named}"
            figures.append(Figure(f"{name}: Herald msg/s", herald.rate, "/s"))
            figures.append(Figure(f"{name}: bare msg/s", bare.rate, "/s"))
            figures.append(Figure(f"{name}: Herald / bare", herald.rate / bare.rate, at_least=RATIO))
        lost = sum(max(0, args.users - herald.messages) + herald.repeats for _, herald, _ in runs)
        figures.append(Figure("messages lost or repeated", float(lost), at_most=0))
    finally:
        processes.stop()
    return figures


def main() -> None:
    parser = argument_parser(__doc__, "herald-bench-periodic.db")
    parser.add_argument("--users", type=int, default=100_000, help="users of each campaign")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=Settings.delivery_concurrency,
        help="messages in flight, both sides",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="engine processes sharing the work: `herald worker` processes on PostgreSQL; on SQLite, "
        "`herald serve` and that many less one beside it",
    )
    args = parser.parse_args()
    key = Fernet.generate_key().decode()
    args.database_url = asyncio.run(start_afresh(args.database_url, "periodic"))
    settings = Settings(database_url=args.database_url, redis_url=None, secret_key=key)
    figures = uvloop.run(run(args, settings, key))  # the engine's loop, as `benchmarks.delivery`'s
    summary("delivery_periodic", _engine(args.database_url), figures)


if __name__ == "__main__":
    main()
