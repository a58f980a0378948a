"""The workspace listings of the command line (`herald workspaces list`, `herald keys list`).

Each is one plain statement (`herald.plain_sql`), so listing costs no SQLAlchemy import and no
mapping of the models (`herald.workspaces.models` defines the tables; the statements name its
columns). Rows come in the order the models' listings gave them.
"""

from __future__ import annotations

from dataclasses import dataclass

from herald.plain_sql import fetch_all, json_value


@dataclass(frozen=True)
class ListedWorkspace:
    id: str
    name: str
    features: dict[str, bool]


@dataclass(frozen=True)
class ListedKey:
    id: str
    name: str
    scopes: list[str]
    revoked: bool


_WORKSPACES = "SELECT id, name, features FROM workspaces ORDER BY created_at, id"
_KEYS = "SELECT id, name, scopes, revoked_at FROM api_keys WHERE workspace_id = $1 ORDER BY created_at"


def workspaces(database_url: str) -> list[ListedWorkspace]:
    return [
        ListedWorkspace(id=id_, name=name, features=json_value(features) or {})
        for id_, name, features in fetch_all(database_url, _WORKSPACES)
    ]


def api_keys(database_url: str, workspace_id: str) -> list[ListedKey]:
    """The workspace's keys, revoked ones too (no error for an unknown workspace: it has none)."""
    return [
        ListedKey(id=id_, name=name, scopes=json_value(scopes), revoked=revoked_at is not None)
        for id_, name, scopes, revoked_at in fetch_all(database_url, _KEYS, workspace_id)
    ]
