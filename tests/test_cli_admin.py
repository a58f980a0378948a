"""The admin CLI: workspaces, keys (secret shown once, stored hashed, revocable), flags, limits, tags."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from herald.cli import app
from herald.config import Settings
from herald.db import create_database
from herald.timefmt import rfc3339
from herald.workspaces.models import ApiKey, Workspace

runner = CliRunner()


@pytest.fixture(autouse=True)
def _database(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
    monkeypatch.delenv("HERALD_REDIS_URL", raising=False)


def _run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _workspace() -> str:
    return _run("workspaces", "create", "Acme").strip()


def _read(workspace_id: str) -> tuple[Workspace, list[ApiKey]]:
    async def load() -> tuple[Workspace, list[ApiKey]]:
        database = create_database(Settings())
        try:
            async with database.reader() as session:
                workspace = await session.get(Workspace, workspace_id)
                keys = (
                    await session.scalars(select(ApiKey).where(ApiKey.workspace_id == workspace_id))
                ).all()
                assert workspace is not None
                return workspace, list(keys)
        finally:
            await database.dispose()

    return asyncio.run(load())


def test_workspace_create_and_list() -> None:
    workspace_id = _workspace()
    assert re.fullmatch(r"[A-Z0-9]{16}", workspace_id)
    assert workspace_id in _run("workspaces", "list")


def test_duplicate_workspace_id_is_refused() -> None:
    _run("workspaces", "create", "One", "--id", "ACME_DUP")
    result = runner.invoke(app, ["workspaces", "create", "Two", "--id", "ACME_DUP"])
    assert result.exit_code == 1
    assert "already exists" in result.output


def test_key_secret_is_printed_once_and_stored_hashed() -> None:
    workspace_id = _workspace()
    output = _run("keys", "create", "-w", workspace_id, "--scopes", "offers:read,campaigns:view")
    secret = re.search(r"(hk_\S+)", output)
    assert secret is not None
    _, keys = _read(workspace_id)
    assert len(keys) == 1
    assert keys[0].scopes == ["campaigns:view", "offers:read"]
    assert secret.group(1) not in keys[0].secret_hash
    listing = _run("keys", "list", "-w", workspace_id)
    assert secret.group(1) not in listing
    assert "active" in listing


def test_key_listing_shows_each_key_in_creation_order_with_its_state() -> None:
    workspace_id = _workspace()
    _run("keys", "create", "-w", workspace_id, "--scopes", "offers:read", "--name", "reader")
    _run("keys", "create", "-w", workspace_id, "--scopes", "offers:write,data:write")
    _, keys = _read(workspace_id)
    first, second = sorted(keys, key=lambda key: key.created_at)
    _run("keys", "revoke", "-w", workspace_id, first.id)
    assert _run("keys", "list", "-w", workspace_id) == (
        f"{first.id}\treader\toffers:read\trevoked\n{second.id}\tdefault\tdata:write,offers:write\tactive\n"
    )
    # Another workspace's keys are not listed; a workspace without keys lists none.
    assert first.id not in _run("keys", "list", "-w", _workspace())
    assert _run("keys", "list", "-w", _workspace()) == ""


def test_workspace_listing_shows_the_flags_that_are_on() -> None:
    workspace_id = _workspace()
    _run("features", "set", "-w", workspace_id, "queuing", "on")
    _run("features", "set", "-w", workspace_id, "portfolio", "on")
    _run("features", "set", "-w", workspace_id, "portfolio", "off")
    _run("features", "set", "-w", workspace_id, "campaign_audience_limit", "on")
    # campaign_meta is on by default: listed until it is set off.
    listed = f"{workspace_id}\tAcme\tfeatures=campaign_audience_limit,campaign_meta,queuing\n"
    assert listed in _run("workspaces", "list")
    _run("features", "set", "-w", workspace_id, "campaign_meta", "off")
    assert f"{workspace_id}\tAcme\tfeatures=campaign_audience_limit,queuing\n" in _run("workspaces", "list")


def test_unknown_scope_is_refused() -> None:
    workspace_id = _workspace()
    result = runner.invoke(app, ["keys", "create", "-w", workspace_id, "--scopes", "offers:everything"])
    assert result.exit_code != 0


def test_revoke_marks_the_key() -> None:
    workspace_id = _workspace()
    _run("keys", "create", "-w", workspace_id)
    _, keys = _read(workspace_id)
    _run("keys", "revoke", "-w", workspace_id, keys[0].id)
    _, keys = _read(workspace_id)
    assert keys[0].revoked_at is not None
    assert "revoked" in _run("keys", "list", "-w", workspace_id)


def test_revoking_again_on_a_clock_held_still_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sandbox's clock file held still: the second revocation is at the first one's moment.
    clock_file = tmp_path / "now"
    clock_file.write_text("1767268800")
    monkeypatch.setenv("HERALD_CLOCK_FILE", str(clock_file))
    workspace_id = _workspace()
    _run("keys", "create", "-w", workspace_id)
    _, keys = _read(workspace_id)
    assert _run("keys", "revoke", "-w", workspace_id, keys[0].id) == f"revoked {keys[0].id}\n"
    again = _run("keys", "revoke", "-w", workspace_id, keys[0].id)
    assert again == f"{keys[0].id} was revoked already, at 2026-01-01T12:00:00Z\n"


def test_revoke_takes_the_whole_key_and_never_prints_its_secret() -> None:
    workspace_id = _workspace()
    whole = next(
        word for word in _run("keys", "create", "-w", workspace_id).split() if word.startswith("hk_")
    )
    key_id, secret = whole.split("_", 2)[1:]
    assert _run("keys", "revoke", "-w", workspace_id, whole) == f"revoked {key_id}\n"
    _, keys = _read(workspace_id)
    assert keys[0].revoked_at is not None
    # Again: nothing changes, and the answer says so (it said "revoked" as if it had just been).
    again = _run("keys", "revoke", "-w", workspace_id, key_id)
    assert again == f"{key_id} was revoked already, at {rfc3339(keys[0].revoked_at)}\n"
    _, after = _read(workspace_id)
    assert after[0].revoked_at == keys[0].revoked_at
    unknown = f"hk_0000000000000000_{secret}"
    assert _refused("keys", "revoke", "-w", workspace_id, unknown) == (
        f"error: no key 0000000000000000 in workspace {workspace_id}"
    )


def test_features_and_limits_are_stored_per_workspace() -> None:
    workspace_id = _workspace()
    _run("features", "set", "-w", workspace_id, "queuing", "on")
    _run("limits", "set", "-w", workspace_id, "offers_read", "1000/minute;5000/hour")
    workspace, _ = _read(workspace_id)
    assert workspace.features == {"queuing": True}
    assert workspace.rate_limits == {"offers_read": "1000/minute;5000/hour"}
    _run("limits", "set", "-w", workspace_id, "offers_read", "default")
    workspace, _ = _read(workspace_id)
    assert workspace.rate_limits == {}


@pytest.mark.parametrize(
    "args",
    [
        ("features", "set", "-w", "{ws}", "nonsense", "on"),
        ("features", "set", "-w", "{ws}", "queuing", "maybe"),
        ("limits", "set", "-w", "{ws}", "offers_read", "lots"),
        ("limits", "set", "-w", "{ws}", "no_bucket", "5/minute"),
        ("keys", "create", "-w", "NO_SUCH_WORKSPACE"),
    ],
)
def test_bad_admin_input_exits_non_zero(args: tuple[str, ...]) -> None:
    workspace_id = _workspace()
    result = runner.invoke(app, [arg.format(ws=workspace_id) for arg in args])
    assert result.exit_code != 0


def test_tags_and_templates() -> None:
    workspace_id = _workspace()
    assert (
        _run("tags", "create", "-w", workspace_id, "seasonal", "--id", "seasonal1").strip() == "tag_seasonal1"
    )
    assert "tag_seasonal1\tseasonal" in _run("tags", "list", "-w", workspace_id)
    _run(
        "templates", "create", "-w", workspace_id, "banner", "--label", "Banner", "--fields", "headline,image"
    )
    assert "banner\tBanner\tjson\tfields=headline,image" in _run("templates", "list", "-w", workspace_id)


def _refused(*args: str) -> str:
    """The one error line of a refused command (exit 1)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("keys", "list"),
        ("tags", "list"),
        ("templates", "list"),
        ("content", "blocks", "list"),
        ("content", "product-sets", "list"),
        ("content", "apis", "list"),
        ("content", "templates", "list"),
        ("connectors", "list"),
        ("outbox", "list"),
        ("segments", "list"),
        ("workspaces", "settings"),
        ("campaigns", "stats", "0123456789abcdef01234567"),
        ("campaigns", "resume-delivery", "0123456789abcdef01234567"),
        ("campaigns", "reject", "0123456789abcdef01234567", "--comment", "x"),
        ("keys", "revoke", "0123456789abcdef"),
    ],
)
def test_every_command_refuses_an_unknown_workspace_in_the_same_words(args: tuple[str, ...]) -> None:
    assert _refused(*args, "-w", "NOPE") == "error: no workspace NOPE"


def _workspaces() -> list[Workspace]:
    async def load() -> list[Workspace]:
        database = create_database(Settings())
        try:
            async with database.reader() as session:
                return list((await session.scalars(select(Workspace))).all())
        finally:
            await database.dispose()

    return asyncio.run(load())


@pytest.mark.parametrize(
    ("workspace_id", "accepted"),
    [
        ("ACME", True),
        ("acme_2-b", True),
        ("X" * 64, True),
        ("X" * 65, False),
        ("工作", False),
        ("ÜNI", False),
        ("١٢", False),
        ("a b", False),
        ("a:b", False),
        ("a\tb", False),
    ],
)
def test_workspace_ids_are_ascii_letters_digits_underscore_and_hyphen(
    workspace_id: str, accepted: bool
) -> None:
    # The test's database is its own (`database_url`): the ids cannot collide with another test's.
    if accepted:
        assert _run("workspaces", "create", "Ok", "--id", workspace_id).strip() == workspace_id
        return
    before = len(_workspaces())
    line = _refused("workspaces", "create", "Refused", "--id", workspace_id)
    assert line == "error: workspace id must be 1-64 ASCII letters, digits, '_' or '-'"
    assert len(_workspaces()) == before


# ... and invisible formatting characters: a right-to-left override (shown as "admintxe.txt"), a
# zero-width space, a byte order mark.
BAD_NAMES = [
    "",
    "   ",
    "two\nlines",
    "a\tb",
    "bell\x07",
    "c1\x85",
    "sep\u2028x",
    "admin\u202etxt.exe",
    "ro\u200bot",
    "\ufeffbom",
]


@pytest.mark.parametrize(
    ("workspace_id", "name"),
    [
        ("SCRIPTS", "Équipe 東京"),
        ("EMOJI", "family \U0001f468\u200d\U0001f469\u200d\U0001f467"),  # joined by ZWJs
        (
            "JOINER",
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        ),  # a zero-width non-joiner in a Persian word
    ],
)
def test_names_may_hold_any_script_and_emoji_sequences(workspace_id: str, name: str) -> None:
    result = runner.invoke(app, ["workspaces", "create", name, "--id", workspace_id])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", [*BAD_NAMES, "n" * 201])
def test_workspace_names_are_printable_and_fit_their_column(name: str) -> None:
    before = len(_workspaces())
    line = _refused("workspaces", "create", name)
    assert line.startswith("error: workspace name must be printable text of 1-200 characters")
    assert len(_workspaces()) == before


@pytest.mark.parametrize("name", [*BAD_NAMES, "k" * 201])
def test_key_names_are_printable_and_fit_their_column(name: str) -> None:
    workspace_id = _workspace()
    line = _refused("keys", "create", "-w", workspace_id, "--name", name)
    assert line.startswith("error: key name must be printable text of 1-200 characters")
    assert _read(workspace_id)[1] == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("ctl\x07",), "error: tag name must be printable text of 1-200 characters"),
        (("t" * 201,), "error: tag name must be printable text of 1-200 characters"),
        (("ok", "--id", "bad id!"), "error: tag id must be 1-64 ASCII letters, digits, '_' or '-'"),
        (("ok", "--id", "i" * 65), "error: tag id must be 1-64 ASCII letters, digits, '_' or '-'"),
        (("ok", "--id", "é"), "error: tag id must be 1-64 ASCII letters, digits, '_' or '-'"),
    ],
)
def test_bad_tags_are_refused(args: tuple[str, ...], error: str) -> None:
    workspace_id = _workspace()
    assert _refused("tags", "create", "-w", workspace_id, *args).startswith(error)
    assert _run("tags", "list", "-w", workspace_id) == ""


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("", "--label", "T"), "error: template id must be printable text of 1-64 characters"),
        (("t\t4", "--label", "T"), "error: template id must be printable text of 1-64 characters"),
        (("t" * 65, "--label", "T"), "error: template id must be printable text of 1-64 characters"),
        (("t4", "--label", ""), "error: template label must be printable text of 1-200 characters"),
        (("t4", "--label", "a\nb"), "error: template label must be printable text of 1-200 characters"),
        (("t4", "--label", "L" * 201), "error: template label must be printable text of 1-200 characters"),
        (("t4", "--label", "T", "--type", "json,bo gus"), "error: template type must be 1-64 ASCII letters"),
        (("t4", "--label", "T", "--type", ""), "error: a template needs at least one type"),
        (("t4", "--label", "T", "--fields", "a,b\tc"), "error: template field name must be printable text"),
    ],
)
def test_bad_templates_are_refused(args: tuple[str, ...], error: str) -> None:
    workspace_id = _workspace()
    assert _refused("templates", "create", "-w", workspace_id, *args).startswith(error)
    assert _run("templates", "list", "-w", workspace_id) == ""


def test_template_types_may_be_several_known_ones() -> None:
    workspace_id = _workspace()
    _run("templates", "create", "-w", workspace_id, "t", "--label", "T", "--type", "json,html")
    assert _run("templates", "list", "-w", workspace_id) == "t\tT\tjson,html\tfields=\n"


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("minimum-delay", "24000000000", "minimum-delay must be a whole number of hours from 1 to 8760"),
        (
            "minimum-delay",
            "99999999999999999999",
            "minimum-delay must be a whole number of hours from 1 to 8760",
        ),
        ("minimum-delay", "8761", "minimum-delay must be a whole number of hours from 1 to 8760"),
        ("minimum-delay", "0", "minimum-delay must be a whole number of hours from 1 to 8760"),
        ("minimum-delay", "³", "minimum-delay must be a whole number of hours from 1 to 8760"),
        ("minimum-delay", "1.5", "minimum-delay must be a whole number of hours from 1 to 8760"),
        ("frequency-cap-day", "²", "frequency-cap-day must be a whole number of messages from 1 to 1000"),
        ("frequency-cap-day", "1001", "frequency-cap-day must be a whole number of messages from 1 to 1000"),
        ("frequency-cap-day", "1_0", "frequency-cap-day must be a whole number of messages from 1 to 1000"),
        ("frequency-cap-week", "١٢", "frequency-cap-week must be a whole number of messages from 1 to 7000"),
        (
            "frequency-cap-week",
            "9" * 5000,
            "frequency-cap-week must be a whole number of messages from 1 to 7000",
        ),
        ("global-control", "١٢", "global-control must be a percentage from 0 to 100"),
        ("global-control", "nan", "global-control must be a percentage from 0 to 100"),
        ("global-control", "1e1", "global-control must be a percentage from 0 to 100"),
        ("global-control", "100.5", "global-control must be a percentage from 0 to 100"),
        ("dnd", "22:00-22:00", "dnd must not start and end at the same time"),
        ("dnd", "2٢:00-08:00", "dnd must be a window HH:MM-HH:MM of times 00:00-23:59"),
        ("dnd", "00:00-24:00", "dnd must be a window HH:MM-HH:MM of times 00:00-23:59"),
        ("timezone", "localtime", "unknown timezone"),
        ("timezone", "europe/paris", "unknown timezone"),
        ("timezone", "../../etc/passwd", "unknown timezone"),
    ],
)
def test_delivery_settings_out_of_range_are_refused_and_change_nothing(
    key: str, value: str, error: str
) -> None:
    workspace_id = _workspace()
    _run("workspaces", "set", "-w", workspace_id, key, "off")
    before = _run("workspaces", "settings", "-w", workspace_id)
    line = _refused("workspaces", "set", "-w", workspace_id, key, value)
    assert line.startswith(f"error: {error}")
    assert value.isascii() or value not in line  # other scripts' digits are not echoed back
    assert _run("workspaces", "settings", "-w", workspace_id) == before
    assert _read(workspace_id)[0].delivery == {}


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("minimum-delay", "8760", "8760"),
        ("frequency-cap-day", " 3 ", "3"),
        ("frequency-cap-week", "7000", "7000"),
        ("global-control", "2.5", "2.5"),
        ("global-control", "0", "0"),
        ("global-control", "1", "1"),  # as set: it was echoed "1.0"
        ("global-control", "99.999999", "99.999999"),  # not rounded to 100
        ("dnd", "22:00-08:00", "22:00-08:00"),
        ("timezone", "Europe/Paris", "Europe/Paris"),
        ("timezone", "UTC", "UTC"),
    ],
)
def test_delivery_settings_in_range_are_stored_and_echoed_as_stored(key: str, value: str, shown: str) -> None:
    workspace_id = _workspace()
    assert (
        _run("workspaces", "set", "-w", workspace_id, key, value) == f"{key} = {shown} for {workspace_id}\n"
    )
    assert f"{key}\t{shown}\n" in _run("workspaces", "settings", "-w", workspace_id)
    assert (
        _run("workspaces", "set", "-w", workspace_id, key, "off")
        == f"{key} = {'UTC' if key == 'timezone' else 'off'} for {workspace_id}\n"
    )


def test_workspaces_set_help_names_every_setting() -> None:
    shown = " ".join(_run("workspaces", "set", "--help").split())
    for key in (
        "global-control",
        "frequency-cap-day",
        "frequency-cap-week",
        "dnd",
        "timezone",
        "minimum-delay",
    ):
        assert key in shown


@pytest.mark.parametrize(
    "args",
    [
        ("workspaces", "create", "Bo\udcffots"),
        ("workspaces", "create", "Acme", "--id", "W\udcff"),
        ("keys", "list", "-w", "W\udcff"),
        ("events", "business", "price_drop", "-w", "W", "--attr", "product=Bo\udcffots"),
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line_exit_2_and_nothing_is_written(
    args: tuple[str, ...],
) -> None:
    # The shell hands bytes; Python keeps a byte that is not UTF-8 as a lone surrogate. Some commands
    # stored it (a business event's attribute then failed its run at every attempt), others failed
    # with a traceback.
    before = {workspace.id for workspace in _workspaces()}
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    [line] = result.output.splitlines()
    assert line.startswith("error: the argument '"), line
    assert line.endswith("' is not UTF-8 text"), line
    assert "\\xff" in line
    assert {workspace.id for workspace in _workspaces()} == before


def test_an_empty_workspace_id_is_refused_not_replaced() -> None:
    assert _refused("workspaces", "create", "Empty", "--id", "").startswith("error: workspace id")
    assert "Empty" not in {workspace.name for workspace in _workspaces()}


@pytest.fixture
def saturated_server() -> Iterator[int]:
    """A PostgreSQL server that refuses every connection as a saturated one does (SQLSTATE 53300,
    "sorry, too many clients already"): its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                length = struct.unpack("!I", connection.recv(4))[0]
                startup = connection.recv(length - 4)
                if struct.unpack("!I", startup[:4])[0] == 80877103:  # an SSLRequest first: no TLS
                    connection.sendall(b"N")
                    length = struct.unpack("!I", connection.recv(4))[0]
                    connection.recv(length - 4)
                fields = b"SFATAL\0VFATAL\0C53300\0Msorry, too many clients already\0\0"
                connection.sendall(b"E" + struct.pack("!I", len(fields) + 4) + fields)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    listener.close()
    thread.join(timeout=5)


def test_a_postgresql_server_out_of_connections_is_one_line(
    monkeypatch: pytest.MonkeyPatch, saturated_server: int
) -> None:
    # It answered a traceback of some 470 lines (the shared server had run out of connections).
    monkeypatch.setenv("HERALD_DATABASE_URL", f"postgresql+asyncpg://postgres@127.0.0.1:{saturated_server}/x")
    for args in (("workspaces", "list"), ("keys", "list", "-w", "X"), ("outbox", "list", "-w", "X")):
        line = _refused(*args)
        assert line.startswith("error: cannot reach the database (HERALD_DATABASE_URL): "), line
        assert "too many clients" in line


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://postgres@127.0.0.1:1/test",
        "postgresql+asyncpg://postgres@127.0.0.1:5432/no_such_db",
    ],
)
def test_a_postgresql_server_out_of_reach_is_one_line(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("HERALD_DATABASE_URL", url)
    for args in (("workspaces", "list"), ("workspaces", "create", "X"), ("keys", "list", "-w", "X")):
        assert _refused(*args).startswith("error: cannot reach the database (HERALD_DATABASE_URL): ")
