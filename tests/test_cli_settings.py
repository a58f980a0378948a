"""Start-up checks of the command line: settings out of their range, bad options, an unmigrated
database, a bad clock file. Each stops the command with one `error: ...` line on stderr and changes
nothing (tests/test_cli_admin.py has the commands' own errors)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from typer.testing import CliRunner, Result

from herald import migrate as migrations
from herald.cli import app
from herald.cli.app import LAZY, Lazy, _operator_error
from herald.clock import FileClock
from herald.config import Settings, SettingsError

runner = CliRunner()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "herald.db"
    migrations.upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture
def database(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A migrated SQLite database of the test's own, named by `HERALD_DATABASE_URL`."""
    path = tmp_path / "herald.db"
    shutil.copy(template, path)
    for name in list(os.environ):
        if name.upper().startswith("HERALD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HERALD_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    monkeypatch.chdir(tmp_path)  # no .env of the checkout's
    return path


def _workspaces(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        count: int = connection.execute("SELECT count(*) FROM workspaces").fetchone()[0]
        return count
    finally:
        connection.close()


def _refused(result: Result, status: int, *words: str) -> str:
    """The one line a refused command wrote on stderr."""
    assert result.exit_code == status, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    for word in words:
        assert word in lines[0], lines
    assert "Traceback" not in result.output
    return lines[0]


BAD_SETTINGS = [
    ("HERALD_WORKER_INTERVAL_SECONDS", "0", "> 0"),
    ("HERALD_WORKER_INTERVAL_SECONDS", "-1", "> 0"),
    ("HERALD_WORKER_INTERVAL_SECONDS", "nan", "finite"),
    ("HERALD_HEADER_TIMEOUT_SECONDS", "-1", "> 0"),
    ("HERALD_BODY_TIMEOUT_SECONDS", "0", "> 0"),
    ("HERALD_MAX_BODY_BYTES", "-1", ">= 1"),
    ("HERALD_MAX_HEADER_BYTES", "0", ">= 1"),
    ("HERALD_MAX_JSON_DEPTH", "0", ">= 1"),
    ("HERALD_DB_POOL_SIZE", "0", ">= 1"),
    ("HERALD_DB_POOL_SIZE", "abc", "whole number"),
    ("HERALD_DB_POOL_SIZE", "1.5", "whole number"),
    ("HERALD_DB_CONNECT_TIMEOUT_SECONDS", "0", "> 0"),
    ("HERALD_CREDENTIALS_CACHE_SECONDS", "-1", ">= 0"),
    ("HERALD_CREDENTIALS_CACHE_SECONDS", "inf", "finite"),
    ("HERALD_SHUTDOWN_TIMEOUT_SECONDS", "-5", ">= 1"),
    ("HERALD_DELIVERY_TIMEOUT_SECONDS", "0", "> 0"),
    ("HERALD_DELIVERY_CONCURRENCY", "0", ">= 1"),
    ("HERALD_DELIVERY_SMTP_CONNECTIONS", "-2", ">= 1"),
    ("HERALD_DELIVERY_MAX_ATTEMPTS", "0", ">= 1"),
    ("HERALD_DELIVERY_RETRY_SECONDS", "-30", "> 0"),
    ("HERALD_DELIVERY_RETRY_MAX_SECONDS", "0", "> 0"),
    ("HERALD_DELIVERY_ERROR_THRESHOLD", "-1", ">= 0"),
    ("HERALD_DELIVERY_LEASE_SECONDS", "-inf", "finite"),
    ("HERALD_DELIVERY_LEASE_SECONDS", "1e11", "up to 604,800"),  # every tick failed: past year 9999
    ("HERALD_REDIS_URL", "notaurl", "redis://"),  # serve died with a traceback
    ("HERALD_REDIS_URL", "redis://:secret@127.0.0.1:6379/1?socket_timeout=abc", "socket_timeout"),
    ("HERALD_REDIS_URL", "redis://127.0.0.1:6379/1?socket_timeout=-1", "socket_timeout must be > 0"),
    ("HERALD_BASE_URL", "notaurl", "http://"),  # was printed in every doc_url
    ("HERALD_BASE_URL", "http://a b", "http://"),
    ("HERALD_BASE_URL", "https://h.example:99999", "http://"),
    ("HERALD_SECRET_KEY", "secret-abc", "Fernet"),  # serve was ready, and every sealed send failed
    ("HERALD_HEADER_TOKEN", "", "header token"),
    ("HERALD_HEADER_TOKEN", "A B", "header token"),
    ("HERALD_HEADER_TOKEN", "SVC:", "header token"),
    ("HERALD_LOG_LEVEL", "bogus", "debug, info, warning, error"),
    ("HERALD_METRICS", "maybe", "on or off"),
    ("HERALD_DATABASE_URL", "bogus://user:secret@host/db", "sqlite+aiosqlite://"),
    # A traceback each: the driver's OverflowError; a keyword the engine's driver refused, or a
    # server setting PostgreSQL refused (the CLI's reads).
    ("HERALD_DATABASE_URL", "postgresql+asyncpg://u:secret@127.0.0.1:99999/db", "Port out of range"),
    ("HERALD_DATABASE_URL", "postgresql+asyncpg://u:secret@127.0.0.1/db?bogus=1", "unknown option bogus"),
]


@pytest.mark.parametrize(("variable", "value", "expected"), BAD_SETTINGS)
def test_a_bad_setting_stops_a_command_before_it_writes(
    database: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = runner.invoke(app, ["workspaces", "create", "Acme", "--id", "NEWWS"])
    line = _refused(result, 2, variable, expected)
    if variable in ("HERALD_DATABASE_URL", "HERALD_REDIS_URL", "HERALD_SECRET_KEY"):
        assert "secret" not in line  # only the scheme is repeated, of a key nothing
    else:
        assert repr(value) in line
    assert _workspaces(database) == 0


@pytest.mark.parametrize(
    "args", [["keys", "list", "-w", "X"], ["worker", "--once"], ["demo"], ["migrate"], ["workspaces", "list"]]
)
def test_every_command_checks_the_settings(
    database: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setenv("HERALD_DB_POOL_SIZE", "abc")
    _refused(runner.invoke(app, args), 2, "HERALD_DB_POOL_SIZE='abc'")
    assert not (database.parent / ".herald").exists()  # demo wrote nothing


def test_a_commands_help_needs_no_valid_setting(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_DB_POOL_SIZE", "abc")
    result = runner.invoke(app, ["keys", "list", "--help"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HERALD_CREDENTIALS_CACHE_SECONDS", "0"),  # read on every request
        ("HERALD_DELIVERY_ERROR_THRESHOLD", "0"),  # never pause
        ("HERALD_WORKER_INTERVAL_SECONDS", "0.5"),
        ("HERALD_HEADER_TOKEN", "ACME"),
        ("HERALD_LOG_LEVEL", "WARNING"),
    ],
)
def test_meaningful_values_are_accepted(
    database: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = runner.invoke(app, ["workspaces", "create", "Acme", "--id", "NEWWS"])
    assert result.exit_code == 0, result.output
    assert _workspaces(database) == 1


def test_a_sqlite_url_may_name_any_driver(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `sqlite:///herald.db` as well as `sqlite+aiosqlite:///herald.db`: Herald opens SQLite itself.
    monkeypatch.setenv("HERALD_DATABASE_URL", f"sqlite:///{database}")
    result = runner.invoke(app, ["workspaces", "create", "Acme", "--id", "NEWWS"])
    assert result.exit_code == 0, result.output
    assert _workspaces(database) == 1


def test_settings_given_in_code_are_checked_too() -> None:
    with pytest.raises(SettingsError, match=r"HERALD_DB_POOL_SIZE='0' .* >= 1"):
        Settings(db_pool_size=0)
    with pytest.raises(SettingsError, match="finite"):
        Settings(worker_interval_seconds=float("nan"))
    assert Settings(credentials_cache_seconds=0, delivery_error_threshold=0).delivery_error_threshold == 0


@pytest.mark.parametrize("interval", ["0", "-5", "nan", "inf"])
def test_worker_refuses_an_interval_that_is_not_positive(database: Path, interval: str) -> None:
    result = runner.invoke(app, ["worker", f"--interval={interval}"])
    assert result.exit_code == 2
    assert "--interval" in result.stderr


@pytest.mark.parametrize(
    "args", [["--port", "70000"], ["--port", "0"], ["--port=-1"], ["--workers", "0"], ["--workers=-3"]]
)
def test_serve_refuses_a_port_or_worker_count_out_of_range(database: Path, args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "herald", "serve", *args], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 2, done.stderr
    assert "Invalid value for '--" in done.stderr


def test_serve_refuses_a_bad_setting_at_start_up(database: Path) -> None:
    env = {**os.environ, "HERALD_HEADER_TIMEOUT_SECONDS": "-1"}
    done = subprocess.run(
        [sys.executable, "-m", "herald", "serve", "--port", "18899"],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: HERALD_HEADER_TIMEOUT_SECONDS='-1' is not valid: expected a finite number > 0"
    ]


@pytest.mark.parametrize("args", [["keys", "list", "-w", "X"], ["worker", "--once"], ["demo"]])
def test_a_database_that_is_not_there_is_not_created(
    tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    missing = tmp_path / "missing.db"
    monkeypatch.setenv("HERALD_DATABASE_URL", f"sqlite+aiosqlite:///{missing}")
    _refused(runner.invoke(app, args), 1, str(missing), "run `herald migrate`")
    assert not missing.exists()


@pytest.mark.parametrize("environment", ["missing", "unmigrated", "bad setting"])
def test_keygen_needs_neither_a_database_nor_valid_settings(
    tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch, environment: str
) -> None:
    # The key is what an operator puts in HERALD_SECRET_KEY, often before the first `migrate`.
    target = tmp_path / "absent.db"
    if environment == "unmigrated":
        target.touch()
    if environment == "bad setting":
        monkeypatch.setenv("HERALD_HEADER_TIMEOUT_SECONDS", "-1")
    else:
        monkeypatch.setenv("HERALD_DATABASE_URL", f"sqlite+aiosqlite:///{target}")
    result = runner.invoke(app, ["connectors", "keygen"])
    assert result.exit_code == 0, (result.output, result.exception)
    Fernet(result.stdout.strip().encode())
    assert target.exists() == (environment == "unmigrated")
    assert not target.exists() or target.stat().st_size == 0


def test_an_unmigrated_database_says_to_migrate(
    tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    monkeypatch.setenv("HERALD_DATABASE_URL", f"sqlite+aiosqlite:///{empty}")
    for args in (["keys", "list", "-w", "X"], ["workspaces", "create", "Acme"], ["worker", "--once"]):
        _refused(runner.invoke(app, args), 1, "not migrated", "run `herald migrate`")
    assert empty.stat().st_size == 0
    result = runner.invoke(app, ["migrate"])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["workspaces", "list"]).exit_code == 0


def test_migrate_a_database_a_newer_release_migrated_says_so(database: Path) -> None:
    with contextlib.closing(sqlite3.connect(database)) as connection, connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_release'")
    line = _refused(runner.invoke(app, ["migrate"]), 1, "9999_from_a_newer_release", "newer release")
    assert "herald migrate" not in line


@pytest.mark.parametrize("what", ["not a database", "a directory"])
def test_a_database_file_sqlite_cannot_use_is_one_line(
    tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    target = tmp_path / "x.db"
    if what == "a directory":
        target.mkdir()
    else:
        target.write_text("this is not sqlite")
    url = f"sqlite+aiosqlite:///{target}"
    monkeypatch.setenv("HERALD_DATABASE_URL", url)
    expected = f"{target} is a directory" if what == "a directory" else "file is not a database"
    if what != "a directory":  # (refused before: no database at that path)
        for args in (["keys", "list", "-w", "X"], ["workspaces", "create", "Acme"]):
            _refused(runner.invoke(app, args), 1, "cannot use the database file", expected)
    # In a process of its own: the migration's driver thread answers the failed open after the
    # command's event loop is gone, which a test process reports as an error of the next test.
    done = subprocess.run(
        [sys.executable, "-m", "herald", "migrate"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HERALD_DATABASE_URL": url},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: cannot use the database file (HERALD_DATABASE_URL): {expected}"
    ]


def test_migrate_into_a_directory_that_does_not_exist(
    tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "nodir" / "x.db"
    monkeypatch.setenv("HERALD_DATABASE_URL", f"sqlite+aiosqlite:///{target}")
    _refused(runner.invoke(app, ["migrate"]), 1, "no directory", str(target.parent))
    assert not target.parent.exists()


# 253402300799 is 9999-12-31T23:59:59Z: a moment a day later could not be written (C1 answered 500);
# ids hold their moment in 32 bits of seconds (a time before 1970 made ids sorted after all others).
# Python's float syntax is wider than epoch seconds: underscores, "infinity", signs.
@pytest.mark.parametrize(
    "content",
    [None, "garbage", "nan", "1e400", "directory", "253402300799", "-86400", "1_767_268_800", "+1767268800"],
)
def test_a_bad_clock_file_stops_the_commands_that_read_the_time(
    tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    clock_file = tmp_path / "now"
    if content == "directory":
        clock_file.mkdir()
    elif content is not None:
        clock_file.write_text(content)
    monkeypatch.setenv("HERALD_CLOCK_FILE", str(clock_file))
    _refused(runner.invoke(app, ["worker", "--once"]), 2, "HERALD_CLOCK_FILE", str(clock_file))
    _refused(runner.invoke(app, ["workspaces", "create", "Acme"]), 2, "HERALD_CLOCK_FILE")
    assert _workspaces(database) == 0
    with pytest.raises(SettingsError, match="HERALD_CLOCK_FILE"):
        FileClock(str(clock_file))


@pytest.mark.parametrize("content", ["1767268800", "1767268800.25", " 1767268800\n", "1.7672688e9"])
def test_a_clock_file_of_epoch_seconds_is_read(tmp_path: Path, content: str) -> None:
    clock_file = tmp_path / "now"
    clock_file.write_text(content)
    assert FileClock(str(clock_file)).now().timestamp() == float(content)


def test_a_clock_file_copied_over_with_its_modification_time_is_read_again(tmp_path: Path) -> None:
    # `cp -p` and `touch -r` keep the modification time the clock looked at alone.
    clock_file, other = tmp_path / "now", tmp_path / "other"
    clock_file.write_text("1767268800")
    clock = FileClock(str(clock_file))
    other.write_text("1767355200")
    stamp = clock_file.stat().st_mtime_ns
    os.utime(other, ns=(stamp, stamp))
    os.replace(other, clock_file)
    assert clock.now().timestamp() == 1767355200


def test_serve_refuses_a_missing_clock_file(tmp_path: Path, database: Path) -> None:
    env = {**os.environ, "HERALD_CLOCK_FILE": str(tmp_path / "nofile")}
    done = subprocess.run(
        [sys.executable, "-m", "herald", "serve", "--port", "18898"],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "HERALD_CLOCK_FILE" in done.stderr
    assert "No such file" in done.stderr


def test_a_good_clock_file_is_read(tmp_path: Path, database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock_file = tmp_path / "now"
    clock_file.write_text("1767268800.5")
    monkeypatch.setenv("HERALD_CLOCK_FILE", str(clock_file))
    assert FileClock(str(clock_file)).now().timestamp() == 1767268800.5
    result = runner.invoke(app, ["worker", "--once"])
    assert result.exit_code == 0, result.output


# The top-level handler, on a command made for the test (`_raise` raises what `BOOM` names).
BOOM: list[BaseException] = []


def _raise() -> None:
    raise BOOM[0]


@pytest.fixture
def boom(database: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BaseException]]:
    monkeypatch.setitem(LAZY, "boom", Lazy(f"{__name__}:_raise", "Raise."))
    yield BOOM
    BOOM.clear()


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            FileNotFoundError(2, "No such file or directory", "ids.txt"),
            ["ids.txt: No such file or directory"],
        ),
        (IsADirectoryError(21, "Is a directory", "/tmp"), ["/tmp: Is a directory"]),
        (b"u1\n\xff".decode, ["not UTF-8 text", "byte 3"]),
        (sqlite3.OperationalError("no such table: api_keys"), ["no table api_keys", "herald migrate"]),
    ],
)
def test_operator_errors_are_one_line(boom: list[BaseException], error: object, words: list[str]) -> None:
    if callable(error):
        try:
            error()
        except UnicodeDecodeError as exc:
            error = exc
    assert isinstance(error, BaseException)
    boom.append(error)
    _refused(runner.invoke(app, ["boom"]), 1, *words)


def test_a_missing_table_is_found_behind_the_error_that_wraps_it() -> None:
    wrapped = RuntimeError("(sqlite3.OperationalError) wrapped")
    wrapped.__cause__ = sqlite3.OperationalError("no such table: workspaces")
    assert _operator_error(wrapped) == ("the database has no table workspaces: run `herald migrate` first", 1)
    postgresql = RuntimeError('(asyncpg.UndefinedTableError) relation "api_keys" does not exist')
    assert _operator_error(postgresql) == (
        "the database has no table api_keys: run `herald migrate` first",
        1,
    )
    assert _operator_error(KeyError("x")) is None


def test_a_bug_keeps_its_traceback(boom: list[BaseException]) -> None:
    boom.append(KeyError("not an operator's error"))
    result = runner.invoke(app, ["boom"])
    assert result.exit_code == 1
    assert isinstance(result.exception, KeyError)


def test_debug_shows_the_traceback_of_an_operator_error(
    boom: list[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERALD_LOG_LEVEL", "debug")
    boom.append(FileNotFoundError(2, "No such file or directory", "ids.txt"))
    result = runner.invoke(app, ["boom"])
    assert isinstance(result.exception, FileNotFoundError)
