"""`herald audience import --check`: the counts and invalid lines the import would report, nothing written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.audience.cli_helpers import Cli
from tests.audience.test_import import customer, jsonl, users_of
from tests.snapshots import rows_in

SUMMARY = re.compile(r"^(checked \(nothing written\)|imported): (users .*)$", re.MULTILINE)
INVALID = re.compile(r"^\S+\.jsonl:\d+: .*$", re.MULTILINE)


@pytest.fixture(params=["copy", "no-copy"])
def copy_flag(request: pytest.FixtureRequest) -> str:
    """Both write paths on PostgreSQL (COPY and executemany); SQLite ignores the flag."""
    return f"--{request.param}"


def summary(result: Result) -> tuple[str, str]:
    """(verb, counts) of the summary line."""
    found = SUMMARY.search(result.output)
    assert found is not None, result.output
    return found.group(1), found.group(2)


def snapshot(cli: Cli, workspace: str) -> dict[str, list[tuple[Any, ...]]]:
    return cli.read(lambda session: rows_in(session, workspace))


def event(customer_id: str, action: str = "opened", **fields: Any) -> dict[str, Any]:
    return {"customer_id": customer_id, "action": action, "occurred_at": "2026-01-10T08:00:00Z", **fields}


def only_if_known(customer_id: str, **attributes: Any) -> dict[str, Any]:
    return {**customer(customer_id, **attributes), "update_existing_only": True}


class TestCheck:
    def test_check_counts_what_the_import_then_does_and_writes_nothing(
        self, cli: Cli, tmp_path: Path, copy_flag: str
    ) -> None:
        workspace = cli.workspace()
        # Stored beforehand: users old0..old29, and an event of "orphan" whose user was never made
        # (an earlier import stopped after writing its events, before creating their users).
        before = jsonl(tmp_path / "before.jsonl", [customer(f"old{i}", n=i) for i in range(30)])
        assert cli("audience", "import", str(before), "-w", workspace, "--no-progress").exit_code == 0
        stopped_events = jsonl(tmp_path / "stopped.jsonl", [event("orphan"), b"[]"])
        stopped = cli(
            "audience", "import", str(before), str(stopped_events), "-w", workspace,
            "--max-errors", "0", "--no-progress", copy_flag,
        )  # fmt: skip
        assert stopped.exit_code == 1, stopped.output

        users: list[Any] = [customer(f"new{i}", plan="gold") for i in range(150)]  # 150 created
        users += [customer(f"old{i}", plan="free") for i in range(20)]  # 20 updated
        users += [b"{not json", customer("bad", timezone="Mars/Base"), {"customer_id": "no type"}]
        users += [customer("new5", vip=True)]  # made earlier in the file, another batch: updated
        users += [
            only_if_known("ghost"),
            only_if_known("new149"),
            only_if_known("old29"),
        ]  # skipped, 2 updated
        users += [customer("twice"), customer("twice", again=True)]  # created, then updated in one batch
        events: list[Any] = [event(f"new{i}") for i in range(0, 150, 3)]  # 50 events of known users
        events += [event("ghost"), event("stranger"), event("stranger"), event("old3")]  # 2 users for them
        events += [{"customer_id": "x", "action": "a"}, event("late", occurred_at="2026-01-15T12:10:00Z")]
        users_file = jsonl(tmp_path / "users.jsonl", users)
        events_file = jsonl(tmp_path / "events.jsonl", events)
        command = ["audience", "import", str(users_file), str(events_file), "-w", workspace]
        command += ["--batch-size", "100", "--no-progress", copy_flag]

        stored = snapshot(cli, workspace)
        checked = cli(*command, "--check")
        assert checked.exit_code == 1, checked.output  # invalid lines, as the import reports them
        assert snapshot(cli, workspace) == stored
        verb, counts = summary(checked)
        assert verb == "checked (nothing written)"
        assert counts == (
            "users 175 (151 created, 24 updated, 1 skipped), events 54 (3 users created for them), "
            "invalid lines 5 (users 3, events 2)"
        )
        problems = INVALID.findall(checked.output)
        assert [line.split(":", 2)[:2] for line in problems] == [
            ["users.jsonl", "171"],
            ["users.jsonl", "172"],
            ["users.jsonl", "173"],
            ["events.jsonl", "55"],
            ["events.jsonl", "56"],
        ]

        imported = cli(*command)
        assert imported.exit_code == 1, imported.output
        assert summary(imported) == ("imported", counts)
        assert INVALID.findall(imported.output) == problems
        after = users_of(cli, workspace)
        assert len(after) == 30 + 151 + 3  # old, created, and ghost, stranger, orphan for their events
        assert {"ghost", "stranger", "orphan"} <= set(after)

    def test_a_check_that_stops_at_max_errors_writes_nothing(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        rows: list[Any] = [customer(f"u{i}") for i in range(150)] + [b"[]", b"[]"]
        users = jsonl(tmp_path / "users.jsonl", rows)
        result = cli(
            "audience", "import", str(users), "-w", workspace, "--max-errors", "1",
            "--batch-size", "100", "--no-progress", "--check",
        )  # fmt: skip
        assert result.exit_code == 1
        assert "stopped at users.jsonl line 152; nothing was written" in result.output
        assert users_of(cli, workspace) == {}

    def test_a_large_valid_file_is_counted(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        users = jsonl(
            tmp_path / "users.jsonl",
            [customer(f"user{i:05d}", email=f"user{i}@example.com", plan="free") for i in range(50_000)],
        )
        result = cli("audience", "import", str(users), "-w", workspace, "--check", "--no-progress")
        assert result.exit_code == 0, result.output
        assert summary(result) == (
            "checked (nothing written)",
            "users 50000 (50000 created, 0 updated, 0 skipped), events 0 (0 users created for them), "
            "invalid lines 0 (users 0, events 0)",
        )
        assert users_of(cli, workspace) == {}


class TestErrorLinesArePlainText:
    def test_line_numbers_and_values_are_not_read_as_emoji_or_markup(self, cli: Cli, tmp_path: Path) -> None:
        # Rich would turn `:100:` into 💯 and `:1234:` into 🔢, and `[bold]` into a style.
        workspace = cli.workspace()
        users = tmp_path / "users.jsonl"
        users.write_text("{x\n" * 1234 + '{"customer_id": ":smile: [bold]x[/bold]", "email": 5}\n')
        result = cli(
            "audience", "import", str(users), "-w", workspace, "--check", "--max-errors", "2000", "--no-progress",
        )  # fmt: skip
        assert result.exit_code == 1
        assert "users.jsonl:100: " in result.output
        assert "users.jsonl:1234: " in result.output
        assert "\U0001f4af" not in result.output
        assert "\U0001f522" not in result.output
        assert "users.jsonl:1235: " in result.output
        assert "\U0001f604" not in result.output  # :smile:
