"""The demo workspace: created on first run, its credentials kept in `.herald/demo.json`."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.samples import seed_demo_audience
from herald.cli.runtime import clock, run_in_session
from herald.config import Settings
from herald.ids import object_id
from herald.offers.models import STORED_DRAFT, STORED_PUBLISHED, Offer, OfferTag
from herald.workspaces import service
from herald.workspaces.models import FEATURES, Workspace
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
    await seed_demo_audience(session, DEMO_ID, now)
    samples = [
        ("Winter_Sale_20", STORED_PUBLISHED, -1, 30, [seasonal.id]),
        ("Spring_Preview", STORED_PUBLISHED, 10, 40, [seasonal.id]),
        ("Loyalty_Bonus_Points", STORED_DRAFT, None, None, []),
    ]
    for name, stored, start_days, expiry_days, tag_ids in samples:
        offer_id = object_id(now)
        session.add(
            Offer(
                workspace_id=DEMO_ID,
                id=offer_id,
                name=name,
                stored_status=stored,
                priority=10,
                start_datetime=now + timedelta(days=start_days) if start_days is not None else None,
                expiry_datetime=now + timedelta(days=expiry_days) if expiry_days is not None else None,
                tags=tag_ids,
                document={"delivery": "scheduled"},
                created_at=now,
                created_by="demo@example.com",
                updated_at=now,
            )
        )
        await session.flush()
        for tag_id in tag_ids:
            session.add(OfferTag(workspace_id=DEMO_ID, tag_id=tag_id, offer_id=offer_id))
    return {"workspace_id": DEMO_ID, "api_key": issued.secret}


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
    credentials = json.loads(CREDENTIALS.read_text())
    basic = base64.b64encode(f"{credentials['workspace_id']}:{credentials['api_key']}".encode()).decode()
    typer.echo(f"  workspace id : {credentials['workspace_id']}")
    typer.echo(f"  API key      : {credentials['api_key']}")
    typer.echo("  try:")
    typer.echo(f"    curl -s -H 'Authorization: Basic {basic}' '{settings.base_url}/v5/offers?limit=5'")
    typer.echo(f"  docs: {settings.base_url}/docs")
