"""The refusal of an administrative action, in a module of its own: the command line's light
commands (`herald workspaces`, `herald keys`) report it without importing the services."""

from __future__ import annotations


class AdminError(ValueError):
    """A refused administrative action (shown to the CLI user as is)."""
