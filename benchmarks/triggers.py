"""Event-triggered delivery under sustained ingestion, in one process: the API app (through ASGI)
and the worker loop (`run_forever`, an hourly poll: only the wake-up on commit finds the work), a
raw asyncio HTTP sink on 127.0.0.1 recording when each message arrives.

    python -m benchmarks.triggers [--rate 1000] [--seconds 10] [--users 2000] [--campaigns 10]
                                  [--concurrency 16] [--database-url URL]

`--campaigns` ACTIVE EVENT_TRIGGERED Push campaigns (ASAP), each waiting for an action of its own;
events go round-robin over the actions at `--rate` per second for `--seconds`, so each event fires
exactly one campaign. Figures:
- event → sink latency p50 / p95 (from the ingestion's 200, i.e. after its commit, to the message's
  arrival at the sink; target p95 <= 1 s);
- ingestion rate achieved with the campaigns active, and its ratio to the same ingestion with no
  campaign waiting (the bare reference, run first, side by side);
- backlog: firings not yet at the sink when ingestion stops, in seconds of ingestion (it must not
  grow: target <= 1 s), and the time to drain it.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from typing import Any

import httpx
import orjson
from cryptography.fernet import Fernet

from benchmarks.common import Figure, argument_parser, prepare_workspace, summary, table
from herald.campaigns import worker
from herald.config import Settings
from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import add_connector
from herald.main import create_app
from herald.services import Services

WORKSPACE = "bench-triggers"


class Sink:
    """Answers every POST 204 and records (event sequence number, arrival time) from the title."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                now = time.perf_counter()
                with contextlib.suppress(Exception):
                    for message in _messages(orjson.loads(body)):
                        self.arrived.setdefault(int(message["message"]["basic_details"]["title"]), now)
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _messages(payload: Any) -> list[dict[str, Any]]:
    return payload if isinstance(payload, list) else [payload]


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


async def ingest(
    client: httpx.AsyncClient,
    path: str,
    headers: dict[str, str],
    rate: float,
    seconds: float,
    users: int,
    campaigns: int,
    concurrency: int,
    first: int,
) -> tuple[dict[int, float], float]:
    """Events paced at `rate`; when each was acknowledged, and the rate achieved."""
    acknowledged: dict[int, float] = {}
    total = int(rate * seconds)
    start = time.perf_counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for seq in range(first, first + total):
        queue.put_nowait(seq)

    async def one() -> None:
        while not queue.empty():
            seq = queue.get_nowait()
            due = start + (seq - first) / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = {
                "type": "event",
                "customer_id": f"u{seq % users}",
                "actions": [{"action": f"act{seq % campaigns}", "attributes": {"seq": seq}}],
            }
            response = await client.post(path, json=body, headers=headers)
            assert response.status_code == 200, response.text
            acknowledged[seq] = time.perf_counter()

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return acknowledged, total / (time.perf_counter() - start)


async def main() -> None:
    parser = argument_parser(__doc__, "herald-bench-triggers.db")
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    key = Fernet.generate_key().decode()
    settings = Settings(
        database_url=args.database_url, redis_url=None, secret_key=key, delivery_concurrency=32
    )
    engine = "sqlite" if args.database_url.startswith("sqlite") else "postgresql"
    workspace = f"{WORKSPACE}-{uuid.uuid4().hex[:8]}"
    credentials = await prepare_workspace(settings, workspace)
    sink = Sink()
    server = await asyncio.start_server(sink.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    app = create_app(settings)
    services: Services = app.state.herald
    database = services.database
    async with database.writer() as session:
        await add_connector(
            session,
            services.clock.now(),
            workspace,
            ConnectorInput(
                "sink",
                "CUSTOM_API",
                channel="push",
                url=f"http://127.0.0.1:{port}/",
                secret="s" * 32,
                timeout=5,
            ),
            settings.secret_key,
        )
        await session.commit()
    transport = httpx.ASGITransport(app=app)
    headers = credentials.headers(settings)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as client:
        elements = [
            {
                "type": "customer",
                "customer_id": f"u{i}",
                "attributes": {"push_id": f"t{i}", "platform": "ANDROID"},
            }
            for i in range(args.users)
        ]
        for start in range(0, len(elements), 1000):
            response = await client.post(
                f"/v1/transition/{workspace}",
                json={"type": "transition", "elements": elements[start : start + 1000]},
                headers=headers,
            )
            assert response.status_code == 200, response.text
        path = f"/v1/event/{workspace}"
        # The bare reference: the same ingestion with no campaign waiting for the events.
        _, bare_rate = await ingest(
            client,
            path,
            headers,
            args.rate,
            args.seconds / 2,
            args.users,
            args.campaigns,
            args.concurrency,
            0,
        )
        write = {**credentials.headers(settings, campaigns=True)}
        for index in range(args.campaigns):
            response = await client.post(
                "/v5/campaigns", json=campaign(index), headers={**write, "Idempotency-Key": uuid.uuid4().hex}
            )
            assert response.status_code == 201, response.text
            campaign_id = response.json()["data"]["id"]
            response = await client.patch(
                f"/core-services/v1/campaigns/{campaign_id}",
                json={"request_id": uuid.uuid4().hex, "updated_by": "bench@example.com", "status": "PUBLISH"},
                headers={**write, "Idempotency-Key": uuid.uuid4().hex},
            )
            assert response.status_code == 204, response.text
        stop = asyncio.Event()
        loop = asyncio.create_task(worker.run_forever(database, services.clock, 3600, stop, settings))
        await asyncio.sleep(0.5)  # the first tick creates the campaigns' executions
        first = 10_000_000
        acknowledged, rate = await ingest(
            client,
            path,
            headers,
            args.rate,
            args.seconds,
            args.users,
            args.campaigns,
            args.concurrency,
            first,
        )
        ended = time.perf_counter()
        backlog = sum(1 for seq in acknowledged if seq not in sink.arrived)
        for _ in range(2400):  # at most 2 minutes to drain
            if all(seq in sink.arrived for seq in acknowledged):
                break
            await asyncio.sleep(0.05)
        drained = time.perf_counter() - ended
        stop.set()
        await loop
    server.close()
    await database.dispose()
    latencies = sorted((sink.arrived[s] - at) * 1000 for s, at in acknowledged.items() if s in sink.arrived)
    lost = len(acknowledged) - len(latencies)
    p50 = statistics.median(latencies) if latencies else float("inf")
    p95 = latencies[int(len(latencies) * 0.95) - 1] if latencies else float("inf")
    backlog_seconds = backlog / max(rate, 1)
    print(
        table(
            f"triggers :: {engine} ({args.campaigns} campaigns, {len(acknowledged)} events, lost {lost})",
            [
                ("ingestion, bare (no campaign waiting)", f"{bare_rate:,.0f} events/s"),
                ("ingestion, campaigns waiting", f"{rate:,.0f} events/s"),
                ("event -> sink p50", f"{p50:,.1f} ms"),
                ("event -> sink p95", f"{p95:,.1f} ms"),
                ("backlog at the end of ingestion", f"{backlog} firings ({backlog_seconds:.2f} s)"),
                ("drained after", f"{drained:.2f} s"),
            ],
        )
    )
    summary(
        "triggers",
        engine,
        [
            Figure("event->sink p50", p50, "ms"),
            Figure("event->sink p95", p95, "ms", at_most=1000),
            Figure("events/s ingested", rate, "/s", at_least=args.rate),
            Figure("ingestion vs bare", rate / bare_rate if bare_rate else 0.0, "", at_least=0.5),
            Figure("backlog (s of ingestion)", backlog_seconds, "", at_most=1.0),
        ],
    )
    if lost:
        raise SystemExit(f"{lost} firings never reached the sink")


if __name__ == "__main__":
    asyncio.run(main())
