"""`herald content ...`: a workspace's personalization resources (blocks, product sets, APIs, templates)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.cli.runtime import clock, run_in_session
from herald.personalization import resources
from herald.workspaces.service import get_workspace

content = typer.Typer(
    help="Personalization resources: content blocks, product sets, content APIs, templates."
)
blocks = typer.Typer(help="Content blocks: {{ ContentBlock['name'] }}.", no_args_is_help=True)
product_sets = typer.Typer(help="Product sets: {{ ProductSet['name'][0].title }}.", no_args_is_help=True)
apis = typer.Typer(help="Content APIs: {{ ContentApi['name'].field }}.", no_args_is_help=True)
templates = typer.Typer(help="Custom templates, named by custom_template_id.", no_args_is_help=True)
content.add_typer(blocks, name="blocks")
content.add_typer(product_sets, name="product-sets")
content.add_typer(apis, name="apis")
content.add_typer(templates, name="templates")

WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")]
ReplaceOpt = Annotated[bool, typer.Option("--replace", help="Replace an existing one of this name.")]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from None


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} is not valid JSON: {exc}") from None


@blocks.command("create")
def blocks_create(
    workspace: WorkspaceOpt,
    name: Annotated[str, typer.Argument(help="Block name.")],
    text: Annotated[str | None, typer.Option(help="The block's content.")] = None,
    file: Annotated[Path | None, typer.Option(help="Read the content from a file.")] = None,
    html: Annotated[
        bool, typer.Option("--html", help="The block is HTML (not escaped in e-mail bodies).")
    ] = False,
    replace: ReplaceOpt = False,
) -> None:
    """Create a content block ({{ ContentBlock['name'] }} in templates)."""
    if (text is None) == (file is None):
        raise typer.BadParameter("give exactly one of --text or --file")
    body = text if text is not None else _read(file)  # type: ignore[arg-type]

    async def work(session: AsyncSession) -> str:
        row = await resources.create_content_block(
            session, clock.now(), workspace, name, body, "html" if html else "text", replace=replace
        )
        return row.name

    typer.echo(run_in_session(work))


@blocks.command("list")
def blocks_list(workspace: WorkspaceOpt) -> None:
    """List a workspace's content blocks."""

    async def work(session: AsyncSession) -> list[str]:
        await get_workspace(session, workspace)  # an unknown one is an error, not an empty list
        found = await resources.list_content_blocks(session, workspace)
        return [f"{row.name}\t{row.kind}\t{len(row.body)} chars" for row in found]

    for line in run_in_session(work):
        typer.echo(line)


@product_sets.command("create")
def product_sets_create(
    workspace: WorkspaceOpt,
    name: Annotated[str, typer.Argument(help="Product set name.")],
    file: Annotated[Path, typer.Option(help="A JSON file holding an array of item objects.")],
    replace: ReplaceOpt = False,
) -> None:
    """Create a product set ({{ ProductSet['name'] }} in templates)."""
    items = _json(_read(file), str(file))

    async def work(session: AsyncSession) -> str:
        row = await resources.create_product_set(
            session, clock.now(), workspace, name, items, replace=replace
        )
        return f"{row.name}\t{len(row.items)} items"

    typer.echo(run_in_session(work))


@product_sets.command("list")
def product_sets_list(workspace: WorkspaceOpt) -> None:
    """List a workspace's product sets."""

    async def work(session: AsyncSession) -> list[str]:
        await get_workspace(session, workspace)  # an unknown one is an error, not an empty list
        return [
            f"{row.name}\t{len(row.items)} items"
            for row in await resources.list_product_sets(session, workspace)
        ]

    for line in run_in_session(work):
        typer.echo(line)


def _headers(values: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values:
        name, separator, content_value = value.partition(":")
        if not separator or not name.strip():
            raise typer.BadParameter(f"header {value!r} must look like 'Name: value'")
        headers[name.strip()] = content_value.strip()
    return headers


@apis.command("create")
def apis_create(
    workspace: WorkspaceOpt,
    name: Annotated[str, typer.Argument(help="API name.")],
    url: Annotated[str, typer.Option(help="http(s) URL; its path and query may hold expressions.")],
    header: Annotated[list[str] | None, typer.Option(help="'Name: value' header (repeat).")] = None,
    timeout: Annotated[float, typer.Option(help="Total timeout in seconds (at most 5).")] = 2.0,
    allow_private: Annotated[
        bool, typer.Option("--allow-private", help="Allow private, loopback and link-local targets.")
    ] = False,
    replace: ReplaceOpt = False,
) -> None:
    """Create a content API ({{ ContentApi['name'] }} in templates)."""
    headers = _headers(header or [])

    async def work(session: AsyncSession) -> str:
        row = await resources.create_content_api(
            session,
            clock.now(),
            workspace,
            name,
            url,
            headers=headers,
            timeout_seconds=timeout,
            allow_private=allow_private,
            replace=replace,
        )
        return row.name

    typer.echo(run_in_session(work))


@apis.command("list")
def apis_list(workspace: WorkspaceOpt) -> None:
    """List a workspace's content APIs."""

    async def work(session: AsyncSession) -> list[str]:
        await get_workspace(session, workspace)  # an unknown one is an error, not an empty list
        found = await resources.list_content_apis(session, workspace)
        # Header values may be credentials: only their names are shown.
        return [
            f"{row.name}\tGET {row.url}\ttimeout={row.timeout_seconds:g}s"
            f"\theaders={','.join(sorted(row.headers)) or '-'}\tallow_private={'yes' if row.allow_private else 'no'}"
            for row in found
        ]

    for line in run_in_session(work):
        typer.echo(line)


@templates.command("create")
def templates_create(
    workspace: WorkspaceOpt,
    template_id: Annotated[str, typer.Argument(help="Template id (custom_template_id).")],
    channel: Annotated[str, typer.Option(help="PUSH or EMAIL.")],
    body_file: Annotated[
        Path | None, typer.Option(help="JSON object shaped like the content it completes.")
    ] = None,
    html_file: Annotated[Path | None, typer.Option(help="EMAIL: the html_content.")] = None,
    subject: Annotated[str | None, typer.Option(help="EMAIL: a default subject.")] = None,
    title: Annotated[str | None, typer.Option(help="PUSH: the title.")] = None,
    message: Annotated[str | None, typer.Option(help="PUSH: the message.")] = None,
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
) -> None:
    """Create a custom template (custom_template_id in campaign content)."""
    body: dict[str, Any] = {}
    if body_file is not None:
        loaded = _json(_read(body_file), str(body_file))
        if not isinstance(loaded, dict):
            raise typer.BadParameter("the body file must hold a JSON object")
        body = loaded
    if html_file is not None:
        body["html_content"] = _read(html_file)
    if subject is not None:
        body["subject"] = subject
    details = {key: value for key, value in (("title", title), ("message", message)) if value is not None}
    if details:
        body.setdefault("basic_details", {}).update(details)

    async def work(session: AsyncSession) -> str:
        row = await resources.create_custom_template(
            session, clock.now(), workspace, template_id, channel, body, name
        )
        return f"{row.id}\tversion {row.version}"

    typer.echo(run_in_session(work))


@templates.command("list")
def templates_list(workspace: WorkspaceOpt) -> None:
    """List a workspace's custom templates."""

    async def work(session: AsyncSession) -> list[str]:
        await get_workspace(session, workspace)  # an unknown one is an error, not an empty list
        found = await resources.list_custom_templates(session, workspace)
        return [f"{row.id}\tversion {row.version}\t{row.channel}\t{row.name}" for row in found]

    for line in run_in_session(work):
        typer.echo(line)
