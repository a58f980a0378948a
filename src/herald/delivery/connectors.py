"""Connector administration (CLI, demo, tests) and the lookups sends and validation need.

Listings go through `connector_view`, which has no access to secrets: they are sealed in the row
and opened only by `open_secrets`, at send time.
"""

from __future__ import annotations

import secrets as random_secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.schemas.common import Channel
from herald.delivery.config import ConnectorInput, check_connector, is_smtp, shown_url
from herald.delivery.crypto import SecretKeyError, secret_box
from herald.delivery.models import Connector
from herald.direct_reads import RowSource, rows_in
from herald.ids import object_id
from herald.timefmt import rfc3339
from herald.workspaces.service import AdminError, get_workspace


@dataclass(frozen=True)
class AddedConnector:
    connector: Connector
    # A webhook secret Herald generated: shown once (the receiver needs it), never again.
    generated_secret: str | None
    # Forced: the live push campaigns a second push connector leaves without one to send through.
    stranded: list[CampaignUsing] = field(default_factory=list)


class SecondPushConnector(AdminError):
    """A push connector added beside the only one while live push campaigns send through it
    (`add_connector` without `force`): a Push campaign goes through the workspace's only push
    connector, and with two the engine has none to choose."""

    def __init__(self, existing: str, campaigns: list[CampaignUsing]) -> None:
        self.campaigns = campaigns
        super().__init__(
            f"{len(campaigns)} live push campaign(s) send through '{existing}', the workspace's only "
            f"push connector: {describe_campaigns(campaigns)}; with a second one they would have none "
            "(push goes through the only push connector). Stop them, or add it with --force"
        )


async def add_connector(
    session: AsyncSession,
    now: datetime,
    workspace_id: str,
    given: ConnectorInput,
    secret_key: str | None,
    *,
    force: bool = False,
) -> AddedConnector:
    await get_workspace(session, workspace_id)
    generated = random_secrets.token_urlsafe(32)
    checked, errors = check_connector(given, generated)
    if checked is None:
        raise AdminError("; ".join(errors))
    if await get_connector(session, workspace_id, checked.name) is not None:
        raise AdminError(f"a connector named '{checked.name}' already exists in {workspace_id}")
    stranded: list[CampaignUsing] = []
    if checked.channel is Channel.PUSH:
        pushes = await list_connectors(await session.connection(), workspace_id, Channel.PUSH)
        if len(pushes) == 1:
            stranded = await campaigns_using(session, pushes[0])
            if stranded and not force:
                raise SecondPushConnector(pushes[0].name, stranded)
    sealed = None
    if checked.secrets:
        try:
            sealed = secret_box(secret_key).seal(checked.secrets, now)
        except SecretKeyError as exc:
            raise AdminError(str(exc)) from None
    row = Connector(
        workspace_id=workspace_id,
        id=object_id(now),
        name=checked.name,
        type=checked.type.value,
        channel=checked.channel.value,
        settings={key: value for key, value in checked.settings.items() if value not in (None, [])},
        sealed_secrets=sealed,
        created_at=now,
    )
    session.add(row)
    await session.flush()
    shown = generated if not is_smtp(checked.type) and given.secret is None else None
    return AddedConnector(row, shown, stranded)


# Built once (every test send lists the workspace's connectors): building a statement and its cache
# key cost more than running it. Read as plain rows (`rows_in`): the ORM's loading of entities cost
# more than the statement too.
_LISTED = (
    select(*(column for column in Connector.__table__.c))
    .where(Connector.workspace_id == bindparam("workspace_id"))
    .order_by(Connector.name)
)
_LISTED_ON = _LISTED.where(Connector.channel == bindparam("channel"))


async def list_connectors(
    source: RowSource, workspace_id: str, channel: Channel | None = None
) -> list[Connector]:
    """The workspace's connectors, by name: entities of no session (nothing written through them)."""
    if channel is None:
        rows = await rows_in(source, _LISTED, {"workspace_id": workspace_id})
    else:
        rows = await rows_in(source, _LISTED_ON, {"workspace_id": workspace_id, "channel": channel.value})
    return [Connector(**row._asdict()) for row in rows]


async def get_connector(session: AsyncSession, workspace_id: str, name: str) -> Connector | None:
    query = select(Connector).where(Connector.workspace_id == workspace_id, Connector.name == name)
    return (await session.scalars(query)).first()


# Campaigns that still send (a PAUSED one may be resumed): removing the connector one of them sends
# through fails every message it has left, permanently.
LIVE_STATUSES = ("SCHEDULED", "ACTIVE", "SENDING", "PAUSED")


@dataclass(frozen=True)
class CampaignUsing:
    campaign_id: str
    status: str


class ConnectorInUse(AdminError):
    """The connector is what live campaigns send through (`remove_connector` without `force`)."""

    def __init__(self, name: str, campaigns: list[CampaignUsing]) -> None:
        self.campaigns = campaigns
        super().__init__(
            f"connector '{name}' is used by {len(campaigns)} live campaign(s): {describe_campaigns(campaigns)}"
        )


def describe_campaigns(campaigns: list[CampaignUsing], at_most: int = 10) -> str:
    shown = ", ".join(f"{c.campaign_id} ({c.status})" for c in campaigns[:at_most])
    return shown + (f" and {len(campaigns) - at_most} more" if len(campaigns) > at_most else "")


async def campaigns_using(session: AsyncSession, row: Connector) -> list[CampaignUsing]:
    """The live campaigns (latest versions) the engine would send through `row`, by campaign id: e-mail
    ones naming it in `connector.connector_name`; push ones when it is the workspace's only push
    connector (the engine sends push through that one, whatever the campaign saved)."""
    # Imported here: the campaign model is needed only by this check.
    from herald.campaigns.models import Campaign

    if row.channel == Channel.PUSH.value:
        pushes = await list_connectors(await session.connection(), row.workspace_id, Channel.PUSH)
        if len(pushes) != 1:
            return []
    elif row.channel != Channel.EMAIL.value:
        return []
    query = (
        select(Campaign.campaign_id, Campaign.status, Campaign.components)
        .where(
            Campaign.workspace_id == row.workspace_id,
            Campaign.is_latest.is_(True),
            Campaign.channel == row.channel,
            Campaign.status.in_(LIVE_STATUSES),
        )
        .order_by(Campaign.campaign_id)
    )
    found: list[CampaignUsing] = []
    for campaign_id, status, components in (await session.execute(query)).all():
        if row.channel == Channel.EMAIL.value:
            connector = (components or {}).get("connector")
            if not isinstance(connector, dict) or connector.get("connector_name") != row.name:
                continue
        found.append(CampaignUsing(campaign_id, status))
    return found


async def remove_connector(
    session: AsyncSession, workspace_id: str, name: str, *, force: bool = False
) -> list[CampaignUsing]:
    """Remove the connector; ConnectorInUse when live campaigns send through it, unless `force`.
    Returns the live campaigns that used it (empty unless forced)."""
    await get_workspace(session, workspace_id)
    row = await get_connector(session, workspace_id, name)
    if row is None:
        raise AdminError(f"no connector named '{name}' in {workspace_id}")
    using = await campaigns_using(session, row)
    if using and not force:
        raise ConnectorInUse(name, using)
    # The outbox keeps the connector's name and id: past sends stay readable after removal.
    await session.delete(row)
    await session.flush()
    return using


@dataclass(frozen=True)
class Configured:
    """The workspace's connectors as campaigns see them (publish checks, C4)."""

    # By channel (a `Channel` value; a channel without connectors is absent), each channel's as
    # name → type: what a campaign's `connector` may name.
    names: dict[str, dict[str, str]]
    # The verified senders of each SMTP connector that lists some, by name (others accept any).
    senders: dict[str, list[str]]


async def configured(session: AsyncSession, workspace_id: str) -> Configured:
    """The workspace's connectors, names and verified senders. One Core statement for every
    channel (a publish check asks about two)."""
    query = select(Connector.channel, Connector.name, Connector.type, Connector.settings).where(
        Connector.workspace_id == workspace_id
    )
    names: dict[str, dict[str, str]] = {}
    senders: dict[str, list[str]] = {}
    for channel, name, type_, settings in await (await session.connection()).execute(query):
        names.setdefault(channel, {})[name] = type_
        if is_smtp(type_) and (settings or {}).get("senders"):
            senders[name] = list(settings["senders"])
    return Configured(names, senders)


def connector_view(row: Connector) -> dict[str, Any]:
    """What may be shown about a connector: everything but its secrets (only whether it has one)."""
    settings = row.settings or {}
    if is_smtp(row.type):
        target = f"smtp://{settings.get('host')}:{settings.get('port')} ({settings.get('security')})"
    else:
        target = shown_url(str(settings.get("url", "")))
    view: dict[str, Any] = {
        "id": row.id,
        "name": row.name,
        "type": row.type,
        "channel": row.channel,
        "target": target,
        "secret": "sealed" if row.sealed_secrets else "none",
        "created_at": rfc3339(row.created_at),  # as the outbox and the offers write times
    }
    # Every view has the same keys (null where the connector has no such setting): `--json` lines
    # read as one table.
    view["username"] = settings.get("username") or None
    view["senders"] = list(settings["senders"]) if settings.get("senders") else None
    # `timeout`: the connector's own limit of one SMTP session or webhook call (null: the
    # process's `HERALD_DELIVERY_TIMEOUT_SECONDS`).
    for tuning in ("timeout", "batch_size", "session_messages"):
        view[tuning] = settings.get(tuning) or None
    return view


async def reseal_all(session: AsyncSession, secret_key: str | None) -> int:
    """Every connector's secrets, in every workspace, sealed again with the first key of
    `secret_key` (key rotation: a new key put first, then this, then the old ones dropped); how
    many were resealed. All or nothing: one that no key opens is an AdminError naming it (and
    every other one), and nothing is changed."""
    box = secret_box(secret_key)
    rows = (
        await session.scalars(
            select(Connector)
            .where(Connector.sealed_secrets.is_not(None))
            .order_by(Connector.workspace_id, Connector.name)
        )
    ).all()
    unopened: list[str] = []
    for row in rows:
        assert row.sealed_secrets is not None
        try:
            row.sealed_secrets = box.resealed(row.sealed_secrets)
        except SecretKeyError:
            unopened.append(f"{row.workspace_id}/{row.name}")
    if unopened:
        raise AdminError(
            f"No key in HERALD_SECRET_KEY opens the secrets of {len(unopened)} connector(s): "
            f"{', '.join(unopened)}; nothing was resealed (add the key that sealed them, or remove them)."
        )
    await session.flush()
    return len(rows)


def open_secrets(row: Connector, secret_key: str | None) -> dict[str, str]:
    """The connector's secrets in clear, for one send. Raises SecretKeyError."""
    if not row.sealed_secrets:
        return {}
    return dict(_opened(row.sealed_secrets, secret_key))


@lru_cache(maxsize=256)
def _opened(sealed: str, secret_key: str | None) -> Mapping[str, str]:
    """Opened once per process and sealed text (every test send and window of messages opens its
    connector's): a changed secret is sealed anew, so it is a new text, and a different key opens
    (or fails to open) apart. A failure is not kept: it is raised again on the next call."""
    return MappingProxyType(secret_box(secret_key).open(sealed))
