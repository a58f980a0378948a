"""The command line imports only what a command uses (checked by module, never by timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from herald.cli.app import LAZY, app

# The web stack and the delivery clients: no administrative command needs them.
WEB = {"fastapi", "starlette", "jinja2", "httpx", "aiosmtplib", "uvicorn", "prometheus_client"}
DATA = {"sqlalchemy", "pydantic", "pydantic_settings", "alembic", "herald.db"}


def _imported_by(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    """Top-level packages (and herald's modules) imported by running `herald ARGS` in a fresh process."""
    script = (
        "import json, sys\n"
        "from herald.cli.app import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules}"
        " | {m for m in sys.modules if m.startswith(('herald.', 'sqlalchemy.dialects.', 'sqlalchemy.ext.'))})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_help_imports_neither_the_web_stack_nor_the_database_layer() -> None:
    imported = _imported_by(["--help"])
    assert imported & (WEB | DATA) == set()
    assert [name for name in imported if name.startswith("herald.") and name != "herald.cli"] == [
        "herald.cli.app"
    ]


@pytest.mark.parametrize("args", [["keys", "list", "-w", "NOSUCHWS"], ["workspaces", "list"]])
def test_listings_run_on_the_driver_without_sqlalchemy(database_url: str, args: list[str]) -> None:
    env = {**os.environ, "HERALD_DATABASE_URL": database_url}
    imported = _imported_by(args, env)
    assert imported & (WEB | DATA) == set()
    assert {"herald.config", "herald.workspaces.listings"} <= imported
    # Neither the models nor the services: the statement names the columns it reads.
    assert {name for name in imported if name.startswith("herald.workspaces.")} <= {
        "herald.workspaces.delivery_settings",
        "herald.workspaces.errors",
        "herald.workspaces.features",
        "herald.workspaces.listings",
        "herald.workspaces.scopes",
    }
    assert ("asyncpg" in imported) is not database_url.startswith("sqlite")


def test_a_groups_command_help_imports_no_service() -> None:
    imported = _imported_by(["campaigns", "stats", "--help"])
    assert imported & (WEB | DATA) == set()
    assert sorted(name for name in imported if name.startswith("herald.")) == [
        "herald.cli",
        "herald.cli.app",
        "herald.cli.campaigns",
    ]


def test_help_lists_every_command_with_its_own_help() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    listed = result.output.split("Commands:")[1]
    for name in ["migrate", "serve", "demo", *LAZY]:
        assert f"  {name} " in listed
    for name, entry in LAZY.items():
        # The one-line help kept for the listing is the command's own.
        assert entry.load(name).help.strip() == entry.help


def test_every_group_still_answers() -> None:
    for name in LAZY:
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage: " in result.output
