"""The Typer application: top-level commands and the admin groups.

Every command group lives in a module that imports what its commands need (SQLAlchemy, the domain
services, sometimes the whole web app). The groups are therefore registered by name and loaded on
first use (`LazyGroup`): `herald --help` imports only Typer, and `herald keys list` only the settings
and its one statement on the database driver (no SQLAlchemy). The one-line help shown in listings is kept
here, so that listing a command never imports it (tests/test_cli_startup.py checks that it matches
the command's own help).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A command loaded on first use: `module:attribute` is a Typer (a group) or a function."""

    target: str
    help: str

    def load(self, name: str) -> Any:
        module, _, attribute = self.target.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        command: Any
        if isinstance(found, typer.Typer):
            command = typer.main.get_group(found)
        else:
            single = typer.Typer()
            single.command(name)(found)
            command = typer.main.get_group(single).commands[name]
        command.name = name
        return command


# In the order `herald --help` lists them, after the top-level commands below.
LAZY: dict[str, Lazy] = {
    "workspaces": Lazy(
        "herald.cli.workspaces:workspaces", "Create and list workspaces (tenants); their delivery settings."
    ),
    "keys": Lazy("herald.cli.workspaces:keys", "Issue, list and revoke API keys."),
    "features": Lazy("herald.cli.admin:features", "Per-workspace feature flags."),
    "limits": Lazy("herald.cli.admin:limits", "Per-workspace rate-limit overrides."),
    "tags": Lazy("herald.cli.admin:tags", "Offer tags."),
    "templates": Lazy("herald.cli.admin:templates", "Offer templates."),
    "offers": Lazy("herald.cli.offers:offers", "Offerings."),
    "campaigns": Lazy("herald.cli.campaigns:campaigns", "Import and review campaigns."),
    "worker": Lazy(
        "herald.cli.campaigns:worker",
        "Run the background worker: scheduled campaign transitions (SCHEDULED → ACTIVE, expiry, ...).",
    ),
    "connectors": Lazy(
        "herald.cli.delivery:connectors", "Delivery connectors: SMTP servers and signed webhooks."
    ),
    "outbox": Lazy("herald.cli.delivery:outbox_app", "The outbox: every message sent, test or real."),
    "content": Lazy(
        "herald.cli.content:content",
        "Personalization resources: content blocks, product sets, content APIs, templates.",
    ),
    "audience": Lazy("herald.cli.audience:audience", "Users and events: bulk import."),
    "segments": Lazy("herald.cli.audience:segments", "Custom segments (filter-based or static lists)."),
    "events": Lazy("herald.cli.events:events", "Business events: start the campaigns waiting for one."),
}


class LazyGroup(TyperGroup):
    """A group whose `LAZY` commands are imported when resolved, and only described when listed."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.commands, *(name for name in LAZY if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in LAZY:
            return self.commands.get(cmd_name)
        if self._listing:
            # Listing needs a name and a help line, not the command's imports.
            return typer.core.TyperCommand(cmd_name, help=LAZY[cmd_name].help)
        command = LAZY[cmd_name].load(cmd_name)
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=LazyGroup,
    help="Herald: the Offer Listing and Campaign Draft API (v5).",
    no_args_is_help=True,
    # Plain help for the top-level listing: rich's help renderer costs more to import than the rest.
    rich_markup_mode=None,
)


@app.command()
def migrate() -> None:
    """Upgrade the database to the latest schema."""
    from herald import migrate as migrations
    from herald.config import Settings

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
    from herald.cli.serve import serve as run

    run(host, port, workers)


@app.command()
def demo() -> None:
    """Create the demo workspace (first run) and print its credentials and a curl line."""
    from herald.cli.demo import ensure_demo

    ensure_demo()
