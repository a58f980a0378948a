"""Workspace administration commands: workspaces, keys, features, limits, tags, templates."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.cli.runtime import clock, run_in_session
from herald.workspaces import delivery_settings, service
from herald.workspaces.models import FEATURES
from herald.workspaces.scopes import Scope, parse_scopes

workspaces = typer.Typer(
    help="Create and list workspaces (tenants); their delivery settings.", no_args_is_help=True
)
keys = typer.Typer(help="Issue, list and revoke API keys.", no_args_is_help=True)
features = typer.Typer(help="Per-workspace feature flags.", no_args_is_help=True)
limits = typer.Typer(help="Per-workspace rate-limit overrides.", no_args_is_help=True)
tags = typer.Typer(help="Offer tags.", no_args_is_help=True)
templates = typer.Typer(help="Offer templates.", no_args_is_help=True)

WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")]
ALL_SCOPES = ",".join(scope.value for scope in Scope)


@workspaces.command("create")
def workspaces_create(
    name: Annotated[str, typer.Argument(help="Display name.")],
    workspace_id: Annotated[str | None, typer.Option("--id", help="Id to use (default: generated).")] = None,
) -> None:
    async def work(session: AsyncSession) -> str:
        workspace = await service.create_workspace(session, clock.now(), name, workspace_id)
        return workspace.id

    typer.echo(run_in_session(work))


@workspaces.command("list")
def workspaces_list() -> None:
    async def work(session: AsyncSession) -> list[str]:
        found = await service.list_workspaces(session)
        return [
            f"{w.id}\t{w.name}\tfeatures={','.join(sorted(k for k, v in w.features.items() if v))}"
            for w in found
        ]

    for line in run_in_session(work):
        typer.echo(line)


@workspaces.command("set")
def workspaces_set(
    workspace: WorkspaceOpt,
    key: Annotated[str, typer.Argument(help=f"One of: {', '.join(delivery_settings.SETTINGS)}")],
    value: Annotated[str, typer.Argument(help="The new value, or 'off' to remove the setting.")],
) -> None:
    """Set a delivery setting: global-control, frequency-cap-day, frequency-cap-week, dnd, timezone."""

    async def work(session: AsyncSession) -> None:
        await delivery_settings.set_delivery_setting(session, workspace, key, value)

    run_in_session(work)
    typer.echo(f"{key} = {value} for {workspace}")


@workspaces.command("settings")
def workspaces_settings(workspace: WorkspaceOpt) -> None:
    """Show the workspace's delivery settings."""

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
    try:
        parsed = parse_scopes(scopes.split(","))
    except ValueError as exc:
        raise typer.BadParameter(f"unknown scope in {scopes!r}; known: {ALL_SCOPES}") from exc

    async def work(session: AsyncSession) -> tuple[str, str]:
        issued = await service.create_api_key(session, clock.now(), workspace, parsed, name)
        return issued.key.id, issued.secret

    key_id, secret = run_in_session(work)
    typer.echo(f"key id: {key_id}")
    typer.echo(f"secret (shown once, store it now): {secret}")


@keys.command("list")
def keys_list(workspace: WorkspaceOpt) -> None:
    async def work(session: AsyncSession) -> list[str]:
        found = await service.list_api_keys(session, workspace)
        return [
            f"{k.id}\t{k.name}\t{','.join(k.scopes)}\t{'revoked' if k.revoked_at else 'active'}"
            for k in found
        ]

    for line in run_in_session(work):
        typer.echo(line)


@keys.command("revoke")
def keys_revoke(workspace: WorkspaceOpt, key_id: Annotated[str, typer.Argument(help="Key id.")]) -> None:
    async def work(session: AsyncSession) -> None:
        await service.revoke_api_key(session, clock.now(), workspace, key_id)

    run_in_session(work)
    typer.echo(f"revoked {key_id}")


@features.command("set")
def features_set(
    workspace: WorkspaceOpt,
    flag: Annotated[str, typer.Argument(help=f"One of: {', '.join(FEATURES)}")],
    state: Annotated[str, typer.Argument(help="on or off")],
) -> None:
    if state not in ("on", "off"):
        raise typer.BadParameter("state must be 'on' or 'off'")

    async def work(session: AsyncSession) -> None:
        await service.set_feature(session, workspace, flag, state == "on")

    run_in_session(work)
    typer.echo(f"{flag} {state} for {workspace}")


@limits.command("set")
def limits_set(
    workspace: WorkspaceOpt,
    bucket: Annotated[str, typer.Argument(help="Bucket, e.g. offers_read, campaign_create.")],
    spec: Annotated[str, typer.Argument(help="Windows, e.g. '1000/minute;5000/hour', or 'default'.")],
) -> None:
    async def work(session: AsyncSession) -> None:
        await service.set_rate_limit(session, workspace, bucket, None if spec == "default" else spec)

    run_in_session(work)
    typer.echo(f"{bucket} = {spec} for {workspace}")


@tags.command("create")
def tags_create(
    workspace: WorkspaceOpt,
    name: Annotated[str, typer.Argument(help="Tag name.")],
    tag_id: Annotated[str | None, typer.Option("--id", help="Raw tag id (default: generated).")] = None,
) -> None:
    async def work(session: AsyncSession) -> str:
        return (await service.create_tag(session, clock.now(), workspace, name, tag_id)).id

    typer.echo(f"tag_{run_in_session(work)}")


@tags.command("list")
def tags_list(workspace: WorkspaceOpt) -> None:
    async def work(session: AsyncSession) -> list[str]:
        return [f"tag_{t.id}\t{t.name}" for t in await service.list_tags(session, workspace)]

    for line in run_in_session(work):
        typer.echo(line)


@templates.command("create")
def templates_create(
    workspace: WorkspaceOpt,
    template_id: Annotated[str, typer.Argument(help="Template id.")],
    label: Annotated[str, typer.Option(help="Display label.")],
    template_type: Annotated[str, typer.Option("--type", help="Comma-separated template types.")] = "json",
    fields: Annotated[str, typer.Option(help="Comma-separated required field names.")] = "",
) -> None:
    async def work(session: AsyncSession) -> str:
        created = await service.create_template(
            session,
            clock.now(),
            workspace,
            template_id,
            label,
            [t for t in template_type.split(",") if t],
            [f for f in fields.split(",") if f],
        )
        return created.id

    typer.echo(run_in_session(work))


@templates.command("list")
def templates_list(workspace: WorkspaceOpt) -> None:
    async def work(session: AsyncSession) -> list[str]:
        found = await service.list_templates(session, workspace)
        return [f"{t.id}\t{t.label}\t{','.join(t.template_type)}\tfields={','.join(t.fields)}" for t in found]

    for line in run_in_session(work):
        typer.echo(line)
