"""`herald connectors ...` and `herald outbox ...`: the workspace's ways out, and what went out.

Secrets are given once (options or environment variables, so they stay out of shell history when
set in the environment) and never printed again: listings show only whether a secret is sealed.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import typer
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.cli.runtime import clock, run_in_session
from herald.config import Settings
from herald.delivery import connectors as service
from herald.delivery import outbox
from herald.delivery.config import ConnectorInput
from herald.delivery.crypto import new_key
from herald.ids import is_object_id
from herald.workspaces.service import AdminError, get_workspace

connectors = typer.Typer(help="Delivery connectors: SMTP servers and signed webhooks.", no_args_is_help=True)
outbox_app = typer.Typer(help="The outbox: every message sent, test or real.", no_args_is_help=True)

WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object per line.")]


def register(app: typer.Typer) -> None:
    app.add_typer(connectors, name="connectors")
    app.add_typer(outbox_app, name="outbox")


@connectors.command("add")
def connectors_add(
    workspace: WorkspaceOpt,
    name: Annotated[str, typer.Option(help="Name campaigns use in connector.connector_name.")],
    connector_type: Annotated[
        str,
        typer.Option(
            "--type",
            help="CUSTOM_SMTP, CUSTOM_API, or SENDGRID|AMAZON_SES|SPARKPOST|MANDRILL|NETCORE (webhooks).",
        ),
    ],
    channel: Annotated[
        str | None, typer.Option(help="email (default) or push; push needs CUSTOM_API.")
    ] = None,
    host: Annotated[str | None, typer.Option(help="SMTP server host.")] = None,
    port: Annotated[int | None, typer.Option(help="SMTP port (default 25 / 587 / 465 by security).")] = None,
    security: Annotated[str | None, typer.Option(help="none, starttls (default) or tls.")] = None,
    username: Annotated[str | None, typer.Option(help="SMTP user.")] = None,
    password: Annotated[
        str | None, typer.Option(envvar="HERALD_CONNECTOR_PASSWORD", help="SMTP password (sealed).")
    ] = None,
    sender: Annotated[
        list[str] | None, typer.Option(help="Verified sender address or @domain; repeat. None: any.")
    ] = None,
    ca_file: Annotated[str | None, typer.Option(help="PEM CA bundle to verify the SMTP server.")] = None,
    url: Annotated[str | None, typer.Option(help="Webhook URL (https; http only for loopback).")] = None,
    secret: Annotated[
        str | None,
        typer.Option(
            envvar="HERALD_CONNECTOR_SECRET", help="Webhook HMAC secret (default: generated, shown once)."
        ),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds per delivery attempt.")] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            help="Webhook: campaign messages per POST (1-1000, default 1). Above 1 the body is a JSON array"
            " of the usual message objects, each with its own delivery id; test sends stay one per POST."
        ),
    ] = None,
    session_messages: Annotated[
        int | None,
        typer.Option(help="SMTP: messages one connection carries before a new one is opened (default 100)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Add a second push connector even though live push campaigns send through the only one"
            " (they then have none).",
        ),
    ] = False,
) -> None:
    """Add a connector to a workspace."""
    given = ConnectorInput(
        name=name,
        type=connector_type,
        channel=channel,
        host=host,
        port=port,
        security=security,
        username=username,
        password=password,
        senders=tuple(sender or ()),
        ca_file=ca_file,
        url=url,
        secret=secret,
        timeout=timeout,
        batch_size=batch_size,
        session_messages=session_messages,
    )
    settings = Settings()

    async def work(session: AsyncSession) -> service.AddedConnector:
        return await service.add_connector(
            session, clock.now(), workspace, given, settings.secret_key, force=force
        )

    added = run_in_session(work, settings)
    connector_id, generated = added.connector.id, added.generated_secret
    typer.echo(f"connector {name} added: {connector_id}")
    if added.stranded:
        typer.secho(
            f"warning: {len(added.stranded)} live push campaign(s) now have no push connector to send"
            f" through: {service.describe_campaigns(added.stranded)}",
            fg=typer.colors.YELLOW,
            err=True,
        )
    if generated is not None:
        typer.echo(f"webhook signing secret (shown once, give it to the receiver now): {generated}")


@connectors.command("list")
def connectors_list(workspace: WorkspaceOpt, as_json: JsonOpt = False) -> None:
    """List a workspace's connectors (never their secrets)."""

    async def work(session: AsyncSession) -> list[dict[str, Any]]:
        await get_workspace(session, workspace)
        return [
            service.connector_view(row)
            for row in await service.list_connectors(await session.connection(), workspace)
        ]

    for view in run_in_session(work):
        if as_json:
            typer.echo(orjson.dumps(view).decode())
            continue
        senders = ",".join(view["senders"] or ()) or "-"
        timeout = f"{view['timeout']:g}s" if view["timeout"] else "default"
        typer.echo(
            f"{view['name']}\t{view['type']}\t{view['channel']}\t{view['target']}\t"
            f"senders={senders}\tsecret={view['secret']}\ttimeout={timeout}"
        )


@connectors.command("remove")
def connectors_remove(
    workspace: WorkspaceOpt,
    name: Annotated[str, typer.Argument(help="Connector name.")],
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Remove it even if live campaigns send through it (their messages then fail)."
        ),
    ] = False,
) -> None:
    """Remove a connector (its past sends stay in the outbox). Refused while a SCHEDULED, ACTIVE,
    SENDING or PAUSED campaign sends through it, unless --force."""

    async def work(session: AsyncSession) -> list[service.CampaignUsing]:
        try:
            return await service.remove_connector(session, workspace, name, force=force)
        except service.ConnectorInUse as exc:
            raise AdminError(
                f"{exc}; their messages would fail. Stop them or give them another connector first, "
                "or pass --force to remove it anyway"
            ) from None

    using = run_in_session(work)
    typer.echo(f"removed {name}")
    if using:
        typer.secho(
            f"warning: live campaigns sent through {name}; their messages will fail: "
            f"{service.describe_campaigns(using)}",
            fg=typer.colors.YELLOW,
            err=True,
        )


@connectors.command("reseal")
def connectors_reseal() -> None:
    """Seal every connector's secrets (all workspaces) again with the first key of
    HERALD_SECRET_KEY: after a new key is put first and the processes restarted, run this, then drop
    the old keys. All or nothing."""
    settings = Settings()

    async def work(session: AsyncSession) -> int:
        return await service.reseal_all(session, settings.secret_key)

    count = run_in_session(work, settings)
    typer.echo(f"resealed the secrets of {count} connector(s) with the first key of HERALD_SECRET_KEY")


@connectors.command("keygen")
def connectors_keygen() -> None:
    """Print a new key for HERALD_SECRET_KEY (prepend it to the list to rotate)."""
    typer.echo(new_key())


async def _check_listed_campaign(session: AsyncSession, workspace_id: str, campaign_id: str) -> None:
    """Refuse a `--campaign` whose sends are never listed under it: an empty listing would read as
    "nothing sent yet". Not a campaign id, no such campaign, or a run of a periodic campaign (its
    messages are its parent's: the webhook bodies name the parent too)."""
    if not is_object_id(campaign_id):
        raise AdminError(
            f"--campaign {campaign_id!r} is not a campaign id (24 lowercase hexadecimal digits)."
        )
    found = (
        await session.execute(
            select(Campaign.parent_id).where(
                Campaign.workspace_id == workspace_id, Campaign.campaign_id == campaign_id, Campaign.is_latest
            )
        )
    ).first()
    if found is None:
        raise AdminError(f"The workspace has no campaign {campaign_id} (--campaign).")
    if found.parent_id is not None:
        raise AdminError(
            f"{campaign_id} is a run of the periodic campaign {found.parent_id}: its messages are "
            f"listed under that campaign (--campaign {found.parent_id})."
        )


@outbox_app.command("list")
def outbox_list(
    workspace: WorkspaceOpt,
    limit: Annotated[int, typer.Option(min=1, max=outbox.MAX_LIST_LIMIT, help="Rows, newest first.")] = 20,
    as_json: JsonOpt = False,
    campaign: Annotated[str | None, typer.Option(help="Only the sends of this campaign_id.")] = None,
    status: Annotated[outbox.OutboxStatus | None, typer.Option(help="Only the sends in this status.")] = None,
    before: Annotated[
        str | None, typer.Option(help="Only the sends listed after this outbox id: the next page after it.")
    ] = None,
) -> None:
    """The newest sends of a workspace, with status and failure reason; page through them with
    `--before` the last id shown."""

    async def work(session: AsyncSession) -> list[dict[str, Any]]:
        await get_workspace(session, workspace)
        if campaign is not None:
            await _check_listed_campaign(session, workspace, campaign)
        try:
            rows = await outbox.list_entries(session, workspace, limit, campaign, status, before)
        except LookupError:
            raise AdminError(f"The workspace has no outbox row '{before}' (--before).") from None
        return [outbox.entry_view(row) for row in rows]

    for view in run_in_session(work):
        if as_json:
            typer.echo(orjson.dumps(view).decode())
            continue
        where = "_".join(
            str(part) for part in (view["platform"] or view["channel"], view["locale"], view["variation"])
        )
        line = (
            f"{view['created_at']}\t{view['id']}\t{view['status']}\t{'test' if view['test'] else 'live'}\t"
            f"{where}\t{view['connector'] or '-'}\t{view['recipient']}"
        )
        shown = view["summary"].get("subject") or view["summary"].get("title")
        if shown:
            line += f"\t{shown!r}"
        if view["failure_reason"]:
            line += f"\t{view['failure_reason']}"
        typer.echo(line)
