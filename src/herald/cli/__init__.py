"""The `herald` command line: serve, migrate, demo, and workspace administration."""

from herald.cli.app import app

__all__ = ["app"]
