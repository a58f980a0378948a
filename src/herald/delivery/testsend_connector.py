"""Which connector a test goes through.

- Email: the body's `connector` (inline: required; draft: optional, overrides the saved one for
  this test only), else the draft's saved `connector`. It must name a connector of the workspace
  with that type, carrying e-mail.
- Push (the contract names no connector for Push): the body's `connector` when sent (a Herald
  extension, for workspaces with several push webhooks), else the workspace's only push connector.
A problem with what the body sent is a 400; with what the saved draft or the workspace holds, 422.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from herald.campaigns.schemas.common import Channel
from herald.campaigns.schemas.connector import Connector as ConnectorRef
from herald.delivery.connectors import list_connectors
from herald.delivery.models import Connector
from herald.direct_reads import RowSource
from herald.problems import Problem

ADD_PUSH_HINT = "add one with `herald connectors add --type CUSTOM_API --channel push`"


@dataclass
class ConnectorChoice:
    connector: Connector | None = None
    bad_request: list[Problem] = field(default_factory=list)
    unprocessable: list[Problem] = field(default_factory=list)


def _match(
    rows: list[Connector], ref: ConnectorRef, channel: Channel
) -> tuple[Connector | None, list[Problem]]:
    row = next((row for row in rows if row.name == ref.connector_name), None)
    if row is None:
        known = ", ".join(r.name for r in rows if r.channel == channel.value) or "none"
        message = f"No connector named '{ref.connector_name}' is configured in this workspace (configured: {known})."
        return None, [Problem("INVALID_ENUM_VALUE", "connector.connector_name", message)]
    problems: list[Problem] = []
    if row.channel != channel.value:
        message = f"Connector '{row.name}' carries {row.channel} messages, not {channel.value}."
        problems.append(Problem("INVALID_ENUM_VALUE", "connector.connector_name", message))
    if row.type != ref.connector_type.value:
        message = f"Connector '{row.name}' is of type {row.type}, not {ref.connector_type.value}."
        problems.append(Problem("INVALID_ENUM_VALUE", "connector.connector_type", message))
    return (row if not problems else None), problems


async def choose_connector(
    source: RowSource,
    workspace_id: str,
    channel: Channel,
    sent: ConnectorRef | None,
    saved: ConnectorRef | None,
) -> ConnectorChoice:
    rows = list(await list_connectors(source, workspace_id))
    choice = ConnectorChoice()
    if sent is not None:
        choice.connector, choice.bad_request = _match(rows, sent, channel)
        return choice
    if channel is Channel.EMAIL:
        if saved is None:
            # Inline Email without a connector is already reported by the body's rules.
            message = "The draft has no connector; save one, or name one in this request's connector."
            choice.unprocessable.append(Problem("REQUIRED_FIELD_MISSING", "connector", message))
            return choice
        choice.connector, choice.unprocessable = _match(rows, saved, channel)
        return choice
    push = [row for row in rows if row.channel == Channel.PUSH.value]
    if not push:
        message = f"No push connector is configured in this workspace; {ADD_PUSH_HINT}."
        choice.unprocessable.append(Problem("REQUIRED_FIELD_MISSING", "connector", message))
    elif len(push) > 1:
        names = ", ".join(row.name for row in push)
        message = f"This workspace has several push connectors ({names}); name one in connector."
        choice.bad_request.append(Problem("REQUIRED_FIELD_MISSING", "connector", message))
    else:
        choice.connector = push[0]
    return choice
