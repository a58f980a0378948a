"""Event commands: raise a business event (the CLI twin of POST /v1/business-event/{workspace_id})."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.cli import runtime
from herald.config import Settings
from herald.delivery.engine import business
from herald.errors import ValidationFailed
from herald.http.guards import BeyondADouble, read_json_text
from herald.workspaces.service import get_workspace

events = typer.Typer(help="Business events: start the campaigns waiting for one.", no_args_is_help=True)


def _value(key: str, text: str) -> Any:
    """`k=v`: v read as JSON when it is (numbers, booleans, quoted strings), else as text, as the
    API reads a body: `NaN` and `Infinity` are not JSON (the text), a whole number beyond 64 bits
    is the double nearest it, and a number no double holds (`1e999`) is refused."""
    try:
        return read_json_text(text)
    except BeyondADouble:
        raise typer.BadParameter(
            f"{key}={text}: numbers must fit a double (at most about 1.8e308 in size)", param_hint="--attr"
        ) from None
    except ValueError:  # not JSON (NaN too, or a number beyond the digit limit): the text as it is
        return text


@events.command("business")
def raise_business(
    name: Annotated[str, typer.Argument(help="The business event's name (basic_details.business_event).")],
    workspace: Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")],
    attr: Annotated[
        list[str] | None,
        typer.Option("--attr", "-a", help="An attribute k=v (repeatable); event.k in content."),
    ] = None,
) -> None:
    """Raise a business event: every ACTIVE campaign waiting for it starts a run to its audience."""
    raw: dict[str, Any] = {"name": name, "attributes": {}}
    for item in attr or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: expected k=v", param_hint="--attr")
        raw["attributes"][key] = _value(key, value)
    try:
        parsed_name, attributes = business.parse(raw)
    except ValidationFailed as exc:
        for detail in exc.details:
            typer.secho(f"error: {detail.target}: {detail.message}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    settings = Settings()
    now = runtime.clock.now()

    async def work(session: AsyncSession) -> dict[str, Any]:
        await get_workspace(session, workspace)  # AdminError for an unknown workspace
        return await business.raise_event(session, workspace, parsed_name, attributes, now)

    result = runtime.run_in_session(work, settings)
    typer.echo(f"{result['campaigns_started']} campaign(s) started")
    for run in result["runs"]:
        typer.echo(f"{run['campaign_id']}\trun {run['run']}\t{run['execution_id']}")
