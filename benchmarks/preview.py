"""Personalized previews per second (C9), through the whole HTTP stack in-process.

Representative content: a Push for Android and iOS (title, message, summary, a button) and an Email
(subject, preview text, a ~6 KB HTML body with a product loop and a footer content block), for a user
with standard and custom attributes and an event. Each request authenticates, takes a rate-limit slot,
reads the user and the resources, and renders every text in the sandbox.

    python -m benchmarks.preview [--requests 2000] [--concurrency 8]
    python -m benchmarks.preview --database-url postgresql+asyncpg://...   # on PostgreSQL (a throwaway
    database is created on that server and dropped afterwards; HERALD_DATABASE_URL is the default)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import Figure, summary
from herald.audience.models import User
from herald.config import Settings
from herald.main import create_app
from herald.migrate import upgrade
from herald.personalization.seed import seed_examples
from herald.services import Services
from herald.workspaces import service as workspaces
from herald.workspaces.scopes import Scope

PARAGRAPH = (
    "<p style='margin:0 0 12px;font-family:Arial,sans-serif;font-size:14px;line-height:20px;color:#333'>"
    "We picked these for you because you like {{ user.favourite_category | default('new things') }}. "
    "As a {{ UserAttribute['tier'] | default('member') }} you have {{ user.points }} points to spend.</p>"
)
HTML = (
    "<html><body><table width='100%'><tr><td>"
    "<h1>Hello {{ user.first_name | default('there') }}!</h1>"
    + PARAGRAPH
    * 12
    + "<ul>{% for item in ProductSet['bestsellers'] %}"
    "<li><a href='{{ item.url }}?utm_source=email&uid={{ user.customer_id }}'>{{ item.title }}</a>"
    " — {{ '%.2f' | format(item.price) }} EUR</li>{% endfor %}</ul>"
    "<p>Your last purchase: {{ event.product_name }}</p>"
    "{{ ContentBlock['footer'] }}</td></tr></table></body></html>"
)
PUSH_PLATFORM = {
    "template_type": "BASIC",
    "basic_details": {
        "title": "{{ user.first_name | default('Hi') }}, {{ ProductSet['bestsellers'][0].title }} is back",
        "message": "Only {{ ProductSet['bestsellers'][0].price }} EUR, {{ UserAttribute['tier'] }} price. {{ ContentBlock['signature'] }}",
        "summary": "{{ user.points }} points",
        "image_url": "https://cdn.example.com/p/{{ event.product_id }}.png",
    },
    "buttons": [{"title": "Shop {{ event.product_name }}", "action": "deeplink"}],
}


def bodies() -> dict[str, dict[str, Any]]:
    common = {
        "user_identification": {"type": "USER_ATTRIBUTE_UNIQUE_ID", "value": "bench-user"},
        "event_attributes": {"product_name": "Trail Runner 2", "product_id": "tr2"},
    }
    return {
        "push": {
            "channel": "PUSH",
            "campaign_content": {"content": {"push": {"android": PUSH_PLATFORM, "ios": PUSH_PLATFORM}}},
            **common,
        },
        "email": {
            "channel": "EMAIL",
            "campaign_content": {
                "content": {
                    "email": {
                        "subject": "{{ user.first_name }}, your {{ UserAttribute['tier'] }} picks",
                        "preview_text": "{{ ProductSet['bestsellers'] | length }} products for you",
                        "from_address": "shop@example.com",
                        "html_content": HTML,
                    }
                }
            },
            **common,
        },
    }


async def setup(services: Services) -> dict[str, str]:
    now = services.clock.now()
    async with services.database.writer() as session:
        workspace = await workspaces.create_workspace(
            session, now, "bench", f"BENCH{uuid.uuid4().hex[:8].upper()}"
        )
        await workspaces.set_rate_limit(session, workspace.id, "preview", "10000000/minute")
        issued = await workspaces.create_api_key(session, now, workspace.id, [Scope.CAMPAIGNS_VIEW])
        await seed_examples(session, now, workspace.id)
        session.add(
            User(
                workspace_id=workspace.id,
                customer_id="bench-user",
                email="ana@example.com",
                first_name="Ana",
                last_name="Lima",
                attributes={"tier": "gold", "points": 1280, "favourite_category": "running"},
                created_at=now,
                updated_at=now,
            )
        )
        await session.commit()
    token = base64.b64encode(f"{workspace.id}:{issued.secret}".encode()).decode()
    return {"Authorization": f"Basic {token}", "SVC-APPKEY": workspace.id}


async def measure(
    client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any], requests: int, concurrency: int
) -> float:
    async def worker(count: int) -> None:
        for _ in range(count):
            response = await client.post(
                "/v5/personalization/preview", json={**body, "request_id": str(uuid.uuid4())}, headers=headers
            )
            assert response.status_code == 200, response.text

    per_worker = requests // concurrency
    started = time.perf_counter()
    await asyncio.gather(*(worker(per_worker) for _ in range(concurrency)))
    return per_worker * concurrency / (time.perf_counter() - started)


async def run(url: str, requests: int, concurrency: int) -> None:
    app = create_app(Settings(database_url=url, redis_url=None, log_level="warning"))
    services: Services = app.state.herald
    headers = await setup(services)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        engine = url.split("+", 1)[0].split(":", 1)[0]
        print(f"engine: {engine}; {requests} requests per content, {concurrency} concurrent clients")
        figures = []
        for name, body in bodies().items():
            await measure(client, headers, body, 50, 1)  # warm-up: compile caches, connections
            rate = await measure(client, headers, body, requests, concurrency)
            print(f"  {name:6s} {rate:8.0f} previews/s")
            figures.append(Figure(f"{name} previews/s", rate, "/s"))
    await services.database.dispose()
    summary("preview", engine, figures)


def _postgres(url: str, statement: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    parts = make_url(url)

    async def execute() -> None:
        connection = await asyncpg.connect(
            user=parts.username,
            password=parts.password,
            host=parts.host,
            port=parts.port,
            database=parts.database,
        )
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(execute())


def main(requests: int, concurrency: int, server: str | None) -> None:
    """Runs on a throwaway database: a temporary SQLite file, or a new database on the PostgreSQL
    server `server` names (created and dropped here; the named database is not touched)."""
    with tempfile.TemporaryDirectory() as directory:
        if server and server.startswith("postgresql"):
            from sqlalchemy.engine import make_url

            name = f"herald_bench_{uuid.uuid4().hex[:8]}"
            _postgres(server, f'CREATE DATABASE "{name}"')
            url = make_url(server).set(database=name).render_as_string(hide_password=False)
        else:
            name, url = "", f"sqlite+aiosqlite:///{Path(directory) / 'bench.db'}"
        try:
            upgrade(url)  # Alembic runs its own event loop
            asyncio.run(run(url, requests, concurrency))
        finally:
            if name:
                _postgres(server or "", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("HERALD_DATABASE_URL"),
        help="a PostgreSQL server to make the throwaway database on (else a temporary SQLite file)",
    )
    arguments = parser.parse_args()
    main(arguments.requests, arguments.concurrency, arguments.database_url)
