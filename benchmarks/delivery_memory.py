"""A worker's memory while it runs a one-time execution of a large audience: peak RSS of one
`herald worker --once` process, against the 300 MB target (issue 13: "an execution of 1,000,000
users streams in batches: a worker's memory stays flat").

    python -m benchmarks.delivery_memory --users 1000000 [--send 10000] [--database-url URL]

The audience is every user of a fresh workspace (each with an Android push token). The campaign's
audience limit lets `--send` of them through to a local HTTP sink; the engine still resolves the
whole audience, materialises it, and claims and decides every user in batches (the rest are
suppressed by the limit), so the run walks every path an execution takes without waiting for a
million webhook calls.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from cryptography.fernet import Fernet

from benchmarks.common import Figure, argument_parser, prepare_workspace, summary
from benchmarks.delivery import add_users
from herald.config import Settings
from herald.db import create_database
from herald.delivery.config import ConnectorInput
from herald.delivery.connectors import add_connector
from herald.main import create_app

TARGET_MB = 300.0


def _sink() -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host!s}:{port}/hook"


async def _setup(settings: Settings, users: int, send: int, url: str) -> str:
    """A workspace with `users` push users, a connector to the sink and a published campaign."""
    workspace_id = f"MEM{uuid.uuid4().hex[:8].upper()}"
    credentials = await prepare_workspace(settings, workspace_id, {"campaign_audience_limit": True})
    await add_users(settings, workspace_id, users)
    database = create_database(settings)
    now = datetime.now(UTC)
    try:
        async with database.writer() as session:
            given = ConnectorInput("sink", "CUSTOM_API", channel="push", url=url, secret="s" * 32, timeout=10)
            await add_connector(session, now, workspace_id, given, settings.secret_key)
            await session.commit()
    finally:
        await database.dispose()
    app = create_app(settings)
    body = {
        "channel": "PUSH",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "bench@example.com",
        "basic_details": {"name": "Memory", "platforms": ["ANDROID"]},
        "campaign_content": {
            "content": {
                "push": {
                    "android": {"template_type": "BASIC", "basic_details": {"title": "Hi", "message": "M"}}
                }
            }
        },
        "segmentation_details": {"is_all_user_campaign": True},
        "scheduling_details": {"delivery_type": "ASAP"},
        "campaign_audience_limit": {
            "is_campaign_audience_limit_enabled": True,
            "metric": "SENT",
            "frequency": "TOTAL",
            "limit": send,
        },
    }
    headers = credentials.headers(settings, campaigns=True)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            write = {**headers, "Idempotency-Key": str(uuid.uuid4())}
            created = await client.post("/v5/campaigns", json=body, headers=write)
            assert created.status_code == 201, created.text
            campaign_id = str(created.json()["data"]["id"])
            publish = {
                "request_id": str(uuid.uuid4()),
                "updated_by": "bench@example.com",
                "status": "PUBLISH",
            }
            published = await client.patch(
                f"/core-services/v1/campaigns/{campaign_id}", json=publish, headers=headers
            )
            assert published.status_code == 204, published.text
    finally:
        await app.state.herald.database.dispose()
    return campaign_id


def main() -> None:
    parser = argument_parser(__doc__, "herald-bench-delivery-memory.db")
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--send", type=int, default=10_000, help="messages let through to the sink")
    args = parser.parse_args()
    key = Fernet.generate_key().decode()
    settings = Settings(database_url=args.database_url, redis_url=None, secret_key=key)
    sink, url = _sink()
    started = time.perf_counter()
    asyncio.run(_setup(settings, args.users, args.send, url))
    print(f"set up {args.users:,} users in {time.perf_counter() - started:.0f}s")
    env = {**os.environ, "HERALD_DATABASE_URL": args.database_url, "HERALD_SECRET_KEY": key}
    env["HERALD_LOG_LEVEL"] = "warning"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "herald", "worker", "--once"], env=env, check=True)
    elapsed = time.perf_counter() - started
    sink.shutdown()
    # ru_maxrss of the children waited for: the worker's peak (kilobytes on Linux).
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    engine = args.database_url.split("+", 1)[0].split(":", 1)[0]
    print(f"worker: {args.users:,} users, {args.send:,} sent, {elapsed:.0f}s, peak RSS {peak_mb:.0f} MB")
    summary(
        "delivery_memory",
        engine,
        [Figure(f"worker peak RSS, {args.users:,} users", peak_mb, "MB", at_most=TARGET_MB)],
    )


if __name__ == "__main__":
    main()
