"""Long imports draw a progress bar on a terminal and print nothing of it in scripts."""

from __future__ import annotations

import os
import pty
import secrets
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from herald.clock import SystemClock
from tests.offers.builders import offer_body

BAR = "━"  # what every bar of rich is drawn with


def _herald(*args: str, env: dict[str, str], terminal: bool = False) -> tuple[int, str, str]:
    """Run `herald ARGS`; stderr on a pseudo-terminal when `terminal`. Exit status, stdout, stderr."""
    command = [sys.executable, "-m", "herald", *args]
    if not terminal:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr
    main, side = pty.openpty()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=side)
    os.close(side)
    drawn = bytearray()
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the other side closed: the process is done with its terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(main)
    out, _ = process.communicate(timeout=120)
    return process.returncode, out.decode(), drawn.decode(errors="replace")


@pytest.fixture
def env(database_url: str) -> dict[str, str]:
    return {**os.environ, "HERALD_DATABASE_URL": database_url, "TERM": "xterm-256color", "COLUMNS": "100"}


@pytest.fixture
def workspace(env: dict[str, str]) -> str:
    workspace_id = f"W{secrets.token_hex(6).upper()}"
    assert _herald("workspaces", "create", "progress", "--id", workspace_id, env=env)[0] == 0
    return workspace_id


@pytest.fixture
def offers_file(tmp_path: Path) -> Path:
    path = tmp_path / "offers.jsonl"
    now = SystemClock().now()
    path.write_bytes(b"\n".join(orjson.dumps(offer_body(now, f"Offer_{n}")) for n in range(20)))
    return path


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.jsonl"
    lines = [
        {"type": "customer", "customer_id": f"u{n}", "attributes": {"first_name": "Ana"}} for n in range(50)
    ]
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    return path


@pytest.mark.parametrize("command", ["offers", "audience"])
def test_in_a_script_only_the_result_is_printed(
    command: str, env: dict[str, str], workspace: str, offers_file: Path, users_file: Path
) -> None:
    source = offers_file if command == "offers" else users_file
    status, out, err = _herald(command, "import", str(source), "-w", workspace, env=env)
    assert status == 0, err
    assert "imported" in out
    assert BAR not in out + err
    assert "\x1b[" not in out + err  # no cursor movement either


@pytest.mark.parametrize("command", ["offers", "audience"])
def test_on_a_terminal_a_bar_is_drawn(
    command: str, env: dict[str, str], workspace: str, offers_file: Path, users_file: Path
) -> None:
    source = offers_file if command == "offers" else users_file
    status, out, drawn = _herald(command, "import", str(source), "-w", workspace, env=env, terminal=True)
    assert status == 0, drawn
    assert "imported" in out
    assert BAR in drawn
    assert source.name in drawn or command == "offers"  # the audience bar names each file
