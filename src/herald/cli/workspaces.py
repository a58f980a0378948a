"""Workspaces and their API keys (`herald workspaces ...`, `herald keys ...`).

These are a provisioning script's commands, so each costs only what it uses: the listings are one
plain statement on the driver (`herald.workspaces.listings`), and the commands that write import
the services and SQLAlchemy inside their own bodies (tests/test_cli_startup.py checks which
modules `herald keys list` loads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from herald.workspaces.delivery_settings import SETTINGS
from herald.workspaces.scopes import Scope, parse_scopes

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.ext.asyncio import AsyncSession

workspaces = typer.Typer(
    help="Create and list workspaces (tenants); their delivery settings.", no_args_is_help=True
)
keys = typer.Typer(help="Issue, list and revoke API keys.", no_args_is_help=True)

WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")]
ALL_SCOPES = ",".join(scope.value for scope in Scope)


def _database_url() -> str:
    from herald.config import Settings

    return Settings().database_url


@workspaces.command("create")
def workspaces_create(
    name: Annotated[str, typer.Argument(help="Display name.")],
    workspace_id: Annotated[str | None, typer.Option("--id", help="Id to use (default: generated).")] = None,
) -> None:
    """Create a workspace (a tenant); prints its id."""
    from herald.cli.runtime import clock, run_in_session
    from herald.workspaces import service

    async def work(session: AsyncSession) -> str:
        workspace = await service.create_workspace(session, clock.now(), name, workspace_id)
        return workspace.id

    typer.echo(run_in_session(work))


@workspaces.command("list")
def workspaces_list() -> None:
    """List the workspaces and their feature flags."""
    from herald.workspaces import listings
    from herald.workspaces.features import enabled_features

    # The flags in effect, those on by default included (`campaign_meta`): the stored ones alone
    # listed a fresh workspace and one with campaign_meta off alike.
    for w in listings.workspaces(_database_url()):
        typer.echo(f"{w.id}\t{w.name}\tfeatures={','.join(sorted(enabled_features(w)))}")


@workspaces.command("set", help=f"Set a delivery setting: {', '.join(SETTINGS)}.")
def workspaces_set(
    workspace: WorkspaceOpt,
    key: Annotated[str, typer.Argument(help=f"One of: {', '.join(SETTINGS)}")],
    value: Annotated[str, typer.Argument(help="The new value, or 'off' to remove the setting.")],
) -> None:
    from herald.cli.runtime import run_in_session
    from herald.delivery.engine.controls import QUIET_HOURS_SETTINGS, release_quiet_hours_deferrals
    from herald.wake import wake_on_commit
    from herald.workspaces import delivery_settings

    async def work(session: AsyncSession) -> str:
        changed = await delivery_settings.set_delivery_setting(session, workspace, key, value)
        if key in QUIET_HOURS_SETTINGS and await release_quiet_hours_deferrals(session, workspace):
            await wake_on_commit(session, workspace)  # settings are read at each tick: this one now
        return delivery_settings.shown(key, changed.delivery)

    # What was stored, as `workspaces settings` shows it (not the text given: ' 5 ' is 5.0).
    typer.echo(f"{key} = {run_in_session(work)} for {workspace}")


@workspaces.command("settings")
def workspaces_settings(workspace: WorkspaceOpt) -> None:
    """Show the workspace's delivery settings."""
    from herald.cli.runtime import run_in_session
    from herald.workspaces import delivery_settings, service

    async def work(session: AsyncSession) -> list[str]:
        return delivery_settings.describe((await service.get_workspace(session, workspace)).delivery)

    for line in run_in_session(work):
        typer.echo(line)


@keys.command("create")
def keys_create(
    workspace: WorkspaceOpt,
    scopes: Annotated[str, typer.Option(help=f"Comma-separated scopes: {ALL_SCOPES}")] = ALL_SCOPES,
    name: Annotated[str, typer.Option(help="A label for the key.")] = "default",
) -> None:
    """Create an API key for a workspace; prints its secret once."""
    try:
        parsed = parse_scopes(scopes.split(","))
    except ValueError as exc:
        raise typer.BadParameter(f"unknown scope in {scopes!r}; known: {ALL_SCOPES}") from exc
    from herald.cli.runtime import clock, run_in_session
    from herald.workspaces import service

    async def work(session: AsyncSession) -> tuple[str, str]:
        issued = await service.create_api_key(session, clock.now(), workspace, parsed, name)
        return issued.key.id, issued.secret

    key_id, secret = run_in_session(work)
    typer.echo(f"key id: {key_id}")
    typer.echo(f"secret (shown once, store it now): {secret}")


@keys.command("list")
def keys_list(workspace: WorkspaceOpt) -> None:
    """List a workspace's API keys."""
    from herald.workspaces import listings

    # An unknown workspace is an AdminError, reported by the command line (`app.LazyGroup.invoke`).
    for k in listings.api_keys(_database_url(), workspace):
        typer.echo(f"{k.id}\t{k.name}\t{','.join(k.scopes)}\t{'revoked' if k.revoked else 'active'}")


@keys.command("revoke")
def keys_revoke(
    workspace: WorkspaceOpt, key_id: Annotated[str, typer.Argument(help="Key id (or the whole key).")]
) -> None:
    """Revoke an API key: refused within the credentials cache's time."""
    from herald.cli.runtime import clock, run_in_session
    from herald.timefmt import rfc3339
    from herald.workspaces import service
    from herald.workspaces.credentials import split_secret

    # The whole key names its id: revoked by it, and never printed back (a refusal said it in full).
    if (parts := split_secret(key_id)) is not None:
        key_id = parts[0]

    async def work(session: AsyncSession) -> tuple[datetime | None, bool]:
        key, revoked = await service.revoke_api_key(session, clock.now(), workspace, key_id)
        return key.revoked_at, revoked

    revoked_at, revoked = run_in_session(work)
    if revoked or revoked_at is None:
        typer.echo(f"revoked {key_id}")
    else:  # revoking is idempotent: said as it is, the first revocation's moment kept
        typer.echo(f"{key_id} was revoked already, at {rfc3339(revoked_at)}")
