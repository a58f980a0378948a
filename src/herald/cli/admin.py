"""Workspace settings and catalogue commands: features, limits, tags, templates (the workspaces and
their keys: `herald.cli.workspaces`)."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.cli.runtime import clock, run_in_session
from herald.cli.workspaces import WorkspaceOpt
from herald.workspaces import service
from herald.workspaces.features import FEATURES

features = typer.Typer(help="Per-workspace feature flags.", no_args_is_help=True)
limits = typer.Typer(help="Per-workspace rate-limit overrides.", no_args_is_help=True)
tags = typer.Typer(help="Offer tags.", no_args_is_help=True)
templates = typer.Typer(help="Offer templates.", no_args_is_help=True)


@features.command("set")
def features_set(
    workspace: WorkspaceOpt,
    flag: Annotated[str, typer.Argument(help=f"One of: {', '.join(FEATURES)}")],
    state: Annotated[str, typer.Argument(help="on or off")],
) -> None:
    """Turn a feature flag on or off for a workspace."""
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
    """Set a rate-limit bucket's windows for a workspace ('default' restores them)."""

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
    """Create an offer tag; prints its id (tag_<id>, as offers name it)."""

    async def work(session: AsyncSession) -> str:
        return (await service.create_tag(session, clock.now(), workspace, name, tag_id)).id

    typer.echo(f"tag_{run_in_session(work)}")


@tags.command("list")
def tags_list(workspace: WorkspaceOpt) -> None:
    """List a workspace's tags."""

    async def work(session: AsyncSession) -> list[str]:
        await service.get_workspace(session, workspace)  # an unknown one is an error, not an empty list
        return [f"tag_{t.id}\t{t.name}" for t in await service.list_tags(session, workspace)]

    for line in run_in_session(work):
        typer.echo(line)


@templates.command("create")
def templates_create(
    workspace: WorkspaceOpt,
    template_id: Annotated[str, typer.Argument(help="Template id.")],
    label: Annotated[str, typer.Option(help="Display label.")],
    template_type: Annotated[
        str,
        typer.Option("--type", help="Comma-separated template types (identifiers, e.g. json)."),
    ] = "json",
    fields: Annotated[str, typer.Option(help="Comma-separated required field names.")] = "",
) -> None:
    """Create an offer template (its fields are an offer's template fields)."""

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
    """List a workspace's offer templates."""

    async def work(session: AsyncSession) -> list[str]:
        await service.get_workspace(session, workspace)  # an unknown one is an error, not an empty list
        found = await service.list_templates(session, workspace)
        return [f"{t.id}\t{t.label}\t{','.join(t.template_type)}\tfields={','.join(t.fields)}" for t in found]

    for line in run_in_session(work):
        typer.echo(line)
