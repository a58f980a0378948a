"""The Typer application: top-level commands and the admin groups."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from herald.cli import admin, audience, campaigns, delivery, offers
from herald.cli.content import content
from herald.config import Settings

app = typer.Typer(help="Herald: the Offer Listing and Campaign Draft API (v5).", no_args_is_help=True)
app.add_typer(admin.workspaces, name="workspaces")
app.add_typer(admin.keys, name="keys")
app.add_typer(admin.features, name="features")
app.add_typer(admin.limits, name="limits")
app.add_typer(admin.tags, name="tags")
app.add_typer(admin.templates, name="templates")
app.add_typer(offers.offers, name="offers")
app.add_typer(campaigns.campaigns, name="campaigns")
app.command()(campaigns.worker)
delivery.register(app)
app.add_typer(content, name="content")
app.add_typer(audience.audience, name="audience")
app.add_typer(audience.segments, name="segments")


@app.command()
def migrate() -> None:
    """Upgrade the database to the latest schema."""
    from herald import migrate as migrations

    settings = Settings()
    migrations.upgrade(settings.database_url)
    typer.echo(f"database at head: {settings.database_url}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
) -> None:
    """Serve the API with uvicorn."""
    import uvicorn

    from herald.http.server import HeraldHttpProtocol

    settings = Settings()
    if settings.is_sqlite and workers == 1:
        # One process owns the SQLite file: it also runs the scheduled transitions.
        os.environ.setdefault("HERALD_IN_PROCESS_WORKER", "true")
    if workers > 1 and not settings.redis_url:
        typer.secho(
            "note: without HERALD_REDIS_URL each worker keeps its own rate-limit counters",
            fg=typer.colors.YELLOW,
            err=True,
        )
    uvicorn.run(
        "herald.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
        proxy_headers=False,
        # The gateway's answers at the socket (503 for control characters, 431, 408, 400); a class,
        # not a name, is pickled by reference into every worker process.
        http=HeraldHttpProtocol,
    )


@app.command()
def demo() -> None:
    """Create the demo workspace (first run) and print its credentials and a curl line."""
    from herald.cli.demo import ensure_demo

    ensure_demo()
