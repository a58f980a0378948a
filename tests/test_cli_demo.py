"""`herald demo`: the demo workspace made once per database, and its key shown only where it works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herald.cli import app

runner = CliRunner()


def _run(database: Path, *args: str) -> str:
    result = runner.invoke(app, list(args), env={"HERALD_DATABASE_URL": f"sqlite+aiosqlite:///{database}"})
    assert result.exit_code == 0, result.output
    return result.output


def _key(output: str) -> str | None:
    found = re.search(r"API key\s*: (\S+)", output)
    return found.group(1) if found else None


def test_the_key_shown_is_one_this_database_accepts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the credentials file lives in the working directory
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    for database in (first, second):
        _run(database, "migrate")
    made_here = _key(_run(first, "demo"))
    assert made_here is not None
    assert _key(_run(first, "demo")) == made_here  # shown again
    made_there = _key(_run(second, "demo"))  # the other database's own demo workspace and key
    assert made_there is not None
    assert made_there != made_here
    # Back on the first database, the file holds the second's key: not shown, as it would get 401s.
    output = _run(first, "demo")
    assert _key(output) is None
    assert "herald keys create -w DEMO" in output
    # A revoked key is not shown either.
    key_id = made_there.split("_")[1]
    _run(second, "keys", "revoke", "-w", "DEMO", key_id)
    assert _key(_run(second, "demo")) is None
