"""`herald campaigns stats` (table) and `herald campaigns reject`: what the operator reads."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from herald.cli import app
from herald.cli.campaigns import stats_table

runner = CliRunner()


@pytest.fixture(autouse=True)
def _database(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
    monkeypatch.delenv("HERALD_REDIS_URL", raising=False)


def _run(run_id: str, reason: str | None = None, **figures: int) -> dict[str, Any]:
    base = {"audience": 10, "pending": 4, "retrying": 1, "deferred": 2, "sent": 5, "failed": 1, "unsent": 0}
    return {
        "id": run_id, "status": "PAUSED" if reason else "RUNNING", "reason": reason,
        "held_out": {}, "suppressed": {}, "conversions": None, **base, **figures,
    }  # fmt: skip


def test_stats_table_shows_retrying_and_deferred_and_the_reason_under_the_table() -> None:
    reason = "Delivery paused: connector 'mail' failed 5 attempts in a row (" + "x" * 200 + ")."
    data = {
        "campaign_id": "c1",
        "status": "SENDING",
        "executions": [_run("e1", retrying=3, deferred=7), _run("e2", reason)],
    }
    lines = stats_table(data).splitlines()
    figures = {line[:10].strip(): line[10:].split() for line in lines[1:] if not line.startswith("reason")}
    assert figures["retrying"] == ["3", "1"]
    assert figures["deferred"] == ["7", "2"]
    assert figures["pending"] == ["4", "4"]
    # The reason is its own line; it widens no column.
    assert lines[-1] == f"reason (e2): {reason}"
    assert max(len(line) for line in lines[:-1]) < 40


def test_stats_table_lists_why_users_failed_under_the_table() -> None:
    failures = [{"reason": "The webhook answered 410.", "users": 12}, {"reason": "Timed out.", "users": 1}]
    data = {"campaign_id": "c1", "status": "SENT", "executions": [_run("e1", failures=failures), _run("e2")]}
    lines = stats_table(data).splitlines()
    assert lines[-2:] == [
        "failed (e1): 12 user(s): The webhook answered 410.",
        "failed (e1): 1 user(s): Timed out.",
    ]


def test_stats_table_shows_each_executions_run_moment_and_child_campaign() -> None:
    periodic = [
        _run("65f1c0ffee0123456789abc1", run=1, scheduled_for="2026-01-15T12:00:00Z", child_campaign_id="65f1c0ffee0123456789def1"),
        _run("65f1c0ffee0123456789abc2", run=2, scheduled_for="2026-01-16T12:00:00Z", child_campaign_id="65f1c0ffee0123456789def2"),
    ]  # fmt: skip
    asap = [_run("65f1c0ffee0123456789abc3", run=1, scheduled_for=None, child_campaign_id=None)]
    for runs, expected in [
        (
            periodic,
            {
                "run": ["1", "2"],
                "scheduled for": ["2026-01-15T12:00:00Z", "2026-01-16T12:00:00Z"],
                "child campaign": ["65f1c0ffee0123456789def1", "65f1c0ffee0123456789def2"],
            },
        ),
        (asap, {"run": ["1"], "scheduled for": ["-"], "child campaign": ["-"]}),
    ]:
        lines = stats_table({"campaign_id": "c1", "status": "SENDING", "executions": runs}).splitlines()
        width = len("child campaign")
        figures = {line[:width].strip(): line[width:].split() for line in lines[1:]}
        assert {label: figures[label] for label in expected} == expected


def test_reject_says_its_error_once() -> None:
    workspace_id = runner.invoke(app, ["workspaces", "create", "Acme"]).output.strip()
    result = runner.invoke(
        app, ["campaigns", "reject", "0123456789abcdef01234567", "-w", workspace_id, "--comment", ""]
    )
    assert result.exit_code == 1
    assert result.output == "error: The comment must have 1 to 2000 characters.\n"
