"""The demo workspace: created on first run, its credentials kept in `.herald/demo.json`."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.samples import seed_demo_audience
from herald.cli.runtime import clock, run_in_session
from herald.config import Settings
from herald.delivery.demo import seed_demo_delivery
from herald.offers import importer
from herald.offers.rules.scheduling import zulu
from herald.personalization.seed import seed_examples
from herald.workspaces import credentials, service
from herald.workspaces.features import FEATURES
from herald.workspaces.models import Workspace
from herald.workspaces.scopes import Scope

DEMO_ID = "DEMO"
CREDENTIALS = Path(".herald/demo.json")


async def _create(session: AsyncSession) -> dict[str, str] | None:
    if await session.get(Workspace, DEMO_ID) is not None:
        return None
    now = clock.now()
    await service.create_workspace(session, now, "Demo workspace", DEMO_ID, dict.fromkeys(FEATURES, True))
    issued = await service.create_api_key(session, now, DEMO_ID, list(Scope), "demo")
    seasonal = await service.create_tag(session, now, DEMO_ID, "seasonal", "seasonal01")
    await service.create_tag(session, now, DEMO_ID, "loyalty", "loyalty01")
    await service.create_template(
        session, now, DEMO_ID, "banner", "Banner", ["json"], ["headline", "image_url"]
    )
    await seed_demo_delivery(session, now, DEMO_ID)
    await seed_demo_audience(session, DEMO_ID, now)
    # Through the importer, so the samples are complete offerings that O3 can update.
    lines = [orjson.dumps(sample) for sample in sample_offers(now, seasonal.id)]
    result = await importer.import_lines(session, DEMO_ID, lines, now)
    if not result.ok:  # the samples are ours: a failure here is a bug, not bad input
        raise RuntimeError(f"demo offers failed validation: {[e.describe() for e in result.errors]}")
    await seed_examples(session, now, DEMO_ID)
    return {"workspace_id": DEMO_ID, "api_key": issued.secret}


def sample_offers(now: datetime, tag_id: str) -> list[dict[str, Any]]:
    """Import lines: an active and a scheduled offering (tag `tag_id`, template `banner`) and a draft."""

    def offer(name: str, start_days: int, expiry_days: int) -> dict[str, Any]:
        return {
            "name": name,
            "priority": 10,
            "delivery": "scheduled",
            "created_by": "demo@example.com",
            "tags": [f"tag_{tag_id}"],
            "scheduling": {
                "start_datetime": zulu(now + timedelta(days=start_days)),
                "expiry_datetime": zulu(now + timedelta(days=expiry_days)),
                "timezone": "Europe/Berlin",
            },
            "segment_info": {"filters": {}},
            "offer_content": {
                "content_1": {
                    "type": "template",
                    "value": {"headline": name.replace("_", " "), "image_url": "https://example.com/a.png"},
                    "meta": {"templateId": "banner"},
                }
            },
            "variation_meta": {"type": "DMV", "control_group": {"is_enabled": True, "percentage": 5}},
        }

    return [
        offer("Winter_Sale_20", -1, 30),
        offer("Spring_Preview", 10, 40),
        {"name": "Loyalty_Bonus_Points", "created_by": "demo@example.com", "status": "draft"},
    ]


def _accepts(api_key: str) -> Callable[[AsyncSession], Awaitable[bool]]:
    """Whether this database's demo workspace accepts `api_key`: a key of it, not revoked."""

    async def check(session: AsyncSession) -> bool:
        parts = credentials.split_secret(api_key)
        if parts is None:
            return False
        key_id, secret = parts
        return credentials.proves(await credentials.load(session, DEMO_ID, key_id), secret)

    return check


def ensure_demo(settings: Settings | None = None) -> None:
    settings = settings or Settings()
    created = run_in_session(_create, settings)
    if created is not None:
        CREDENTIALS.parent.mkdir(exist_ok=True)
        CREDENTIALS.write_text(json.dumps(created, indent=2))
        CREDENTIALS.chmod(0o600)
        typer.echo("Created the demo workspace.")
    if not CREDENTIALS.exists():
        typer.echo(f"The demo workspace exists; its key was shown when it was made ({CREDENTIALS} is gone).")
        return
    saved = json.loads(CREDENTIALS.read_text())
    # The file is the working directory's, the workspace the database's: another database's demo
    # key, or a revoked one, would only get 401s.
    if not run_in_session(_accepts(str(saved.get("api_key", ""))), settings):
        typer.echo(
            f"The demo workspace exists, but the key in {CREDENTIALS} is not one of its keys (another "
            f"database's, or revoked): make one with `herald keys create -w {DEMO_ID}`."
        )
        return
    basic = base64.b64encode(f"{saved['workspace_id']}:{saved['api_key']}".encode()).decode()
    typer.echo(f"  workspace id : {saved['workspace_id']}")
    typer.echo(f"  API key      : {saved['api_key']}")
    typer.echo("  try:")
    base = settings.base_url or "http://127.0.0.1:8000"  # where `make run` serves
    typer.echo(f"    curl -s -H 'Authorization: Basic {basic}' '{base}/v5/offers?limit=5'")
    typer.echo(f"  docs: {base}/docs")
