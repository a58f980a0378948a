"""`herald audience import USERS.jsonl [EVENTS.jsonl]` against the test database."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import store
from herald.audience.models import PLATFORM_BITS, Event, User
from herald.clock import FileClock, FrozenClock
from tests.audience.cli_helpers import Cli

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(b"".join((row if isinstance(row, bytes) else orjson.dumps(row)) + b"\n" for row in rows))
    return path


def customer(customer_id: str, **attributes: Any) -> dict[str, Any]:
    return {"type": "customer", "customer_id": customer_id, "attributes": attributes}


def users_of(cli: Cli, workspace_id: str) -> dict[str, User]:
    async def work(session: AsyncSession) -> dict[str, User]:
        rows = await session.scalars(select(User).where(User.workspace_id == workspace_id))
        return {user.customer_id: user for user in rows}

    return cli.read(work)


def events_of(cli: Cli, workspace_id: str) -> list[Event]:
    async def work(session: AsyncSession) -> list[Event]:
        query = (
            select(Event).where(Event.workspace_id == workspace_id).order_by(Event.occurred_at, Event.action)
        )
        return list(await session.scalars(query))

    return cli.read(work)


@pytest.fixture(params=["copy", "no-copy"])
def copy_flag(request: pytest.FixtureRequest) -> str:
    """Both event paths on PostgreSQL (COPY and Core executemany); SQLite ignores the flag."""
    return f"--{request.param}"


class TestImport:
    def test_users_and_events_are_loaded(self, cli: Cli, tmp_path: Path, copy_flag: str) -> None:
        workspace = cli.workspace()
        users = jsonl(
            tmp_path / "users.jsonl",
            [
                customer(
                    "u1", email="ana@example.com", timezone="Europe/Madrid", push_opt_out=True, plan="gold"
                ),
                customer("u2", first_name="Luis", signed_up="2025-06-01T10:00:00+02:00", tags=["a", "b"]),
            ],
        )
        events = jsonl(
            tmp_path / "events.jsonl",
            [
                {
                    "customer_id": "u1",
                    "action": "purchased",
                    "attributes": {"price": 9.5},
                    "occurred_at": 1_767_225_600,
                },
                {
                    "customer_id": "u2",
                    "action": "viewed",
                    "occurred_at": "2026-01-02T10:00:00+01:00",
                    "platform": "IOS",
                    "app_version": "5.0.1",
                },
                {"customer_id": "stranger", "action": "app_open", "occurred_at": "2026-01-03T00:00:00Z"},
            ],
        )
        result = cli(
            "audience",
            "import",
            str(users),
            str(events),
            "--workspace",
            workspace,
            "--no-progress",
            copy_flag,
        )
        assert result.exit_code == 0, result.output
        assert (
            "users 2 (2 created, 0 updated, 0 skipped), events 3 (1 users created for them)" in result.output
        )

        stored = users_of(cli, workspace)
        assert set(stored) == {"u1", "u2", "stranger"}
        assert (stored["u1"].email, stored["u1"].timezone, stored["u1"].push_opt_out) == (
            "ana@example.com",
            "Europe/Madrid",
            True,
        )
        assert stored["u1"].attributes == {"plan": "gold"}
        assert stored["u2"].attributes == {"signed_up": "2025-06-01T08:00:00Z", "tags": ["a", "b"]}
        assert stored["stranger"].attributes == {}
        assert stored["u1"].created_at == NOW

        loaded = events_of(cli, workspace)
        assert [(e.customer_id, e.action, e.attributes, e.occurred_at) for e in loaded] == [
            ("u1", "purchased", {"price": 9.5}, datetime(2026, 1, 1, tzinfo=UTC)),
            ("u2", "viewed", {}, datetime(2026, 1, 2, 9, 0, tzinfo=UTC)),
            ("stranger", "app_open", {}, datetime(2026, 1, 3, tzinfo=UTC)),
        ]
        assert (loaded[1].platform, loaded[1].app_version) == ("IOS", "5.0.1")
        assert all(e.received_at == NOW and len(e.id) == 24 for e in loaded)

    def test_users_alone_and_many_batches(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        users = jsonl(tmp_path / "users.jsonl", [customer(f"u{i}", n=i) for i in range(1050)])
        result = cli(
            "audience", "import", str(users), "-w", workspace, "--batch-size", "100", "--no-progress"
        )
        assert result.exit_code == 0, result.output
        stored = users_of(cli, workspace)
        assert len(stored) == 1050
        assert stored["u1049"].attributes == {"n": 1049}

    def test_reimport_merges_and_honours_update_existing_only(
        self, cli: Cli, tmp_path: Path, frozen: FrozenClock, copy_flag: str
    ) -> None:
        workspace = cli.workspace()
        first = jsonl(
            tmp_path / "first.jsonl",
            [
                customer("u1", plan="free", city="Madrid", email="a@example.com"),
                customer("u2", plan="free", gone=None),  # a null sent for a new user is not stored
            ],
        )
        imported = cli("audience", "import", str(first), "-w", workspace, "--no-progress", copy_flag)
        assert imported.exit_code == 0, imported.output
        assert users_of(cli, workspace)["u2"].attributes == {"plan": "free"}
        frozen.advance(hours=1)
        second = jsonl(
            tmp_path / "second.jsonl",
            [
                customer("u1", plan="gold", city=None),
                {
                    "type": "customer",
                    "customer_id": "ghost",
                    "attributes": {"plan": "x"},
                    "update_existing_only": True,
                },
                customer("u1", vip=True),  # the same user twice in one batch: applied in order
                {
                    "type": "customer",
                    "customer_id": "u2",
                    "attributes": {"plan": None, "tier": "b", "first_name": "Bo"},
                    "update_existing_only": True,
                },
            ],
        )
        result = cli("audience", "import", str(second), "-w", workspace, "--no-progress", copy_flag)
        assert result.exit_code == 0, result.output
        assert "(0 created, 3 updated, 1 skipped)" in result.output
        stored = users_of(cli, workspace)
        assert set(stored) == {"u1", "u2"}
        assert stored["u1"].attributes == {"plan": "gold", "vip": True}
        assert stored["u1"].email == "a@example.com"
        assert stored["u1"].updated_at == frozen.now()
        assert stored["u2"].attributes == {"tier": "b"}
        assert stored["u2"].first_name == "Bo"

    def test_check_writes_nothing(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        users = jsonl(tmp_path / "users.jsonl", [customer("u1")])
        events = jsonl(tmp_path / "events.jsonl", [{"customer_id": "u1", "action": "a", "occurred_at": 0}])
        result = cli(
            "audience", "import", str(users), str(events), "-w", workspace, "--check", "--no-progress"
        )
        assert result.exit_code == 0, result.output
        assert result.output.startswith(
            "checked (nothing written): users 1 (1 created, 0 updated, 0 skipped)"
        )
        assert users_of(cli, workspace) == {}
        assert events_of(cli, workspace) == []

    def test_no_progress_bar_off_a_terminal(self, cli: Cli, tmp_path: Path) -> None:
        # On a terminal the bar names each file (tests/test_cli_progress.py); scripts get the result only.
        workspace = cli.workspace()
        users = jsonl(tmp_path / "people.jsonl", [customer("u1")])
        result = cli("audience", "import", str(users), "-w", workspace)
        assert result.exit_code == 0, result.output
        assert "people.jsonl" not in result.output


class TestPushTokens:
    def test_a_user_imported_once_per_device_in_one_batch_keeps_a_token_per_platform(
        self, cli: Cli, tmp_path: Path, copy_flag: str
    ) -> None:
        workspace = cli.workspace()
        users = jsonl(
            tmp_path / "users.jsonl",
            [
                customer("multi", push_id="tok-android", platform="ANDROID"),
                customer("multi", push_id="tok-ios", platform="IOS"),
                customer("multi", push_id="tok-web", platform="WEB"),
                customer("multi", push_id=None, platform="WEB"),  # that device unregistered
            ],
        )
        result = cli("audience", "import", str(users), "-w", workspace, "--no-progress", copy_flag)
        assert result.exit_code == 0, result.output

        async def tokens(session: AsyncSession) -> dict[str, dict[str, str]]:
            return await store.push_tokens(await session.connection(), workspace, ["multi"])

        assert cli.read(tokens) == {"multi": {"ANDROID": "tok-android", "IOS": "tok-ios"}}
        assert (
            users_of(cli, workspace)["multi"].push_platforms
            == PLATFORM_BITS["ANDROID"] | PLATFORM_BITS["IOS"]
        )


class TestInvalidLines:
    def test_invalid_lines_are_reported_and_skipped(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        users = jsonl(
            tmp_path / "users.jsonl",
            [
                customer("u1"),
                b"{not json",
                customer("u2", timezone="Mars/Base"),
                {"customer_id": "u3"},
                b"",
                customer("u4"),
                customer("u5", push_id="t5", platform="BLACKBERRY"),
            ],
        )
        events = jsonl(
            tmp_path / "events.jsonl",
            [
                {"customer_id": "u1", "action": "a", "occurred_at": "2026-01-15T12:06:00Z"},  # 6 min ahead
                {"customer_id": "u1", "action": "a"},
                {"customer_id": "u1", "action": "b", "occurred_at": "2026-01-15T12:05:00Z"},
            ],
        )
        result = cli("audience", "import", str(users), str(events), "-w", workspace, "--no-progress")
        assert result.exit_code == 1
        assert "users.jsonl:2: Not a JSON line" in result.output
        assert (
            "users.jsonl:3: attributes.timezone: 'Mars/Base' is not an IANA timezone name." in result.output
        )
        assert "users.jsonl:4: type: 'type' is required. (REQUIRED_FIELD_MISSING)" in result.output
        assert (
            "users.jsonl:7: attributes.platform: 'platform' must be one of ANDROID, IOS, WEB (or null)."
            in result.output
        )
        assert (
            "events.jsonl:1: occurred_at: The event time 2026-01-15T12:06:00Z is in the future"
            in result.output
        )
        assert "events.jsonl:2: occurred_at: 'occurred_at' is required." in result.output
        assert "invalid lines 6" in result.output
        assert set(users_of(cli, workspace)) == {"u1", "u4"}
        assert [e.action for e in events_of(cli, workspace)] == ["b"]

    @pytest.mark.parametrize("check", [False, True])
    def test_a_string_holding_nul_is_an_invalid_line(
        self, cli: Cli, tmp_path: Path, copy_flag: str, check: bool
    ) -> None:
        # PostgreSQL stores no NUL in text: the import crashed with a traceback after `--check`
        # had passed the file, and SQLite stored it. Refused as the API refuses it, line by line.
        workspace = cli.workspace()
        users = jsonl(
            tmp_path / "users.jsonl",
            [customer("n1", ok=1), customer("n2", s="a\x00b"), customer("n3", tags=["x", "\x00"])],
        )
        at = "2026-01-10T08:00:00Z"
        events = jsonl(
            tmp_path / "events.jsonl",
            [
                {"customer_id": "n1", "action": "fine", "occurred_at": at},
                {"customer_id": "n1", "action": "a", "occurred_at": at, "attributes": {"s": "\x00"}},
                {"customer_id": "n1", "action": "b", "occurred_at": at, "platform": "and\x00roid"},
            ],
        )
        extra = ["--check"] if check else [copy_flag]
        result = cli("audience", "import", str(users), str(events), "-w", workspace, "--no-progress", *extra)
        assert result.exit_code == 1, result.output
        message = "Strings must not contain NUL characters. (INVALID_TYPE)"
        assert f"users.jsonl:2: attributes.s: {message}" in result.output
        assert f"users.jsonl:3: attributes.tags.1: {message}" in result.output
        assert f"events.jsonl:2: attributes.s: {message}" in result.output
        assert f"events.jsonl:3: platform: {message}" in result.output
        assert "invalid lines 4" in result.output
        if not check:
            assert set(users_of(cli, workspace)) == {"n1"}
            assert [e.action for e in events_of(cli, workspace)] == ["fine"]

    def test_a_sandbox_moved_in_time_imports_by_its_clock_file(
        self, database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        # The command's own clock (no `frozen` fixture): HERALD_CLOCK_FILE's time, as the server's.
        # On the system's clock an event of 2030 would be "in the future", and one of 2026 not.
        clock_file = tmp_path / "clock"
        FileClock.write(str(clock_file), datetime(2030, 11, 5, 12, 0, tzinfo=UTC))
        monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
        monkeypatch.setenv("HERALD_CLOCK_FILE", str(clock_file))
        cli = Cli(database_url)
        workspace = cli.workspace()
        users = jsonl(tmp_path / "users.jsonl", [customer("u1")])
        events = jsonl(
            tmp_path / "events.jsonl",
            [
                {"customer_id": "u1", "action": "past", "occurred_at": "2030-11-05T11:00:00Z"},
                {"customer_id": "u1", "action": "ahead", "occurred_at": "2030-11-05T12:06:00Z"},
            ],
        )
        result = cli("audience", "import", str(users), str(events), "-w", workspace, "--no-progress")
        assert result.exit_code == 1, result.output
        assert (
            "events.jsonl:2: occurred_at: The event time 2030-11-05T12:06:00Z is in the future"
            in result.output
        )
        assert [e.action for e in events_of(cli, workspace)] == ["past"]

    def test_too_many_invalid_lines_stop_the_import(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        rows: list[Any] = [customer(f"u{i}") for i in range(250)]
        rows += [b"[]", b"[]"] + [customer(f"late{i}") for i in range(10)]
        users = jsonl(tmp_path / "users.jsonl", rows)
        result = cli(
            "audience",
            "import",
            str(users),
            "-w",
            workspace,
            "--max-errors",
            "1",
            "--batch-size",
            "100",
            "--no-progress",
        )
        assert result.exit_code == 1
        assert "more than 1 invalid lines; stopped at users.jsonl line 252" in result.output
        stored = users_of(cli, workspace)
        assert len(stored) == 250  # every valid line before the stop
        assert not any(customer_id.startswith("late") for customer_id in stored)

    def test_unknown_workspace_is_an_error(self, cli: Cli, tmp_path: Path) -> None:
        users = jsonl(tmp_path / "users.jsonl", [customer("u1")])
        result = cli("audience", "import", str(users), "-w", "NOPE", "--no-progress")
        assert result.exit_code == 1
        assert "no workspace NOPE" in result.output

    def test_missing_file_is_a_usage_error(self, cli: Cli, tmp_path: Path) -> None:
        result = cli("audience", "import", str(tmp_path / "nope.jsonl"), "-w", "W")
        assert result.exit_code == 2


def test_sqlite_datetime_text_is_what_sqlalchemy_stores() -> None:
    from datetime import timedelta, timezone

    from sqlalchemy.dialects import sqlite

    from herald.audience.importer import sqlite_datetime
    from herald.db import UTCDateTime

    dialect = sqlite.dialect()
    stored = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert stored is not None
    for value in (
        datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2025, 1, 2, 3, 4, 5, 123, tzinfo=timezone(timedelta(hours=2))),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ):
        assert sqlite_datetime(value) == stored(value)


def test_bulk_ids_continue_the_one_by_one_sequence() -> None:
    from herald.ids import is_object_id, object_id, object_ids

    before = object_id(NOW)
    batch = object_ids(NOW, 1000)
    after = object_id(NOW)
    ids = [before, *batch, after]
    assert all(is_object_id(value) for value in ids)
    assert len(set(ids)) == len(ids)
    assert {value[:8] for value in ids} == {f"{int(NOW.timestamp()):08x}"}
