"""Run Alembic migrations from code (CLI, demo and tests share this)."""

from __future__ import annotations

import re
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    config.attributes["configure_logger"] = False
    return config


class SchemaAhead(Exception):
    """The database is at a revision these migrations do not know: a newer release migrated it."""

    def __init__(self, revision: str) -> None:
        super().__init__(
            f"the database is at revision {revision}, which this release of Herald does not know: a "
            "newer release migrated it. Run that release; this one neither serves nor downgrades it."
        )


# How Alembic says the database's revision is none of its scripts.
_UNKNOWN_REVISION = re.compile(r"Can't locate revision identified by '([^']*)'")


def upgrade(database_url: str, revision: str = "heads") -> None:
    try:
        command.upgrade(alembic_config(database_url), revision)
    except CommandError as exc:
        unknown = _UNKNOWN_REVISION.search(str(exc))
        if unknown is None:
            raise
        raise SchemaAhead(unknown.group(1)) from exc
