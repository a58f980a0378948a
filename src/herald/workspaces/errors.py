"""The refusal of an administrative action, in a module of its own: the command line's light
commands (`herald workspaces`, `herald keys`) report it without importing the services."""

from __future__ import annotations


class AdminError(ValueError):
    """A refused administrative action (shown to the CLI user as is)."""


def unknown_workspace(workspace_id: str) -> AdminError:
    """The one refusal of every command given a workspace id that names no workspace."""
    return AdminError(f"no workspace {workspace_id}")
