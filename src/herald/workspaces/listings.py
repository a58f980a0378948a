"""The workspace listings of the command line (`herald workspaces list`, `herald keys list`).

Each is one plain statement (`herald.plain_sql`), so listing costs no SQLAlchemy import and no
mapping of the models (`herald.workspaces.models` defines the tables; the statements name its
columns). Rows come in the order the models' listings gave them.
"""

from __future__ import annotations

from dataclasses import dataclass

from herald.plain_sql import fetch_all, json_value
from herald.workspaces.errors import unknown_workspace


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
# From the workspace: no row when it does not exist, one row of NULLs when it has no key (one
# statement answers both, as `get_workspace` and the listing would in two).
_KEYS = (
    "SELECT k.id, k.name, k.scopes, k.revoked_at FROM workspaces w"
    " LEFT JOIN api_keys k ON k.workspace_id = w.id WHERE w.id = $1 ORDER BY k.created_at"
)


def workspaces(database_url: str) -> list[ListedWorkspace]:
    return [
        ListedWorkspace(id=id_, name=name, features=json_value(features) or {})
        for id_, name, features in fetch_all(database_url, _WORKSPACES)
    ]


def api_keys(database_url: str, workspace_id: str) -> list[ListedKey]:
    """The workspace's keys, revoked ones too; AdminError for an unknown workspace."""
    rows = fetch_all(database_url, _KEYS, workspace_id)
    if not rows:
        raise unknown_workspace(workspace_id)
    return [
        ListedKey(id=id_, name=name, scopes=json_value(scopes), revoked=revoked_at is not None)
        for id_, name, scopes, revoked_at in rows
        if id_ is not None
    ]
