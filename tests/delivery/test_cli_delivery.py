"""`herald connectors` and `herald outbox`: secrets given once, sealed, never listed."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select
from typer.testing import CliRunner

from herald.campaigns.models import Campaign
from herald.cli import app
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import create_database
from herald.delivery.connectors import open_secrets
from herald.delivery.models import Connector, OutboxEntry
from herald.delivery.outbox import OutboxStatus
from herald.ids import object_id
from tests.conftest import Databases

runner = CliRunner()
KEY = Fernet.generate_key().decode()
PASSWORD = "cli-smtp-password-123"
SECRET = "cli-hook-secret-0123456789abcdef"


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
    monkeypatch.setenv("HERALD_SECRET_KEY", KEY)
    monkeypatch.delenv("HERALD_REDIS_URL", raising=False)
    monkeypatch.delenv("HERALD_CONNECTOR_PASSWORD", raising=False)
    monkeypatch.delenv("HERALD_CONNECTOR_SECRET", raising=False)


def _run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _fails(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code != 0
    return result.output


def _workspace() -> str:
    return _run("workspaces", "create", "Acme").strip()


def _stored(workspace_id: str) -> list[Connector]:
    async def load() -> list[Connector]:
        database = create_database(Settings())
        try:
            async with database.reader() as session:
                query = (
                    select(Connector).where(Connector.workspace_id == workspace_id).order_by(Connector.name)
                )
                return list((await session.scalars(query)).all())
        finally:
            await database.dispose()

    return asyncio.run(load())


def _add_smtp(workspace_id: str, *extra: str) -> str:
    return _run(
        "connectors", "add", "-w", workspace_id, "--name", "mail", "--type", "CUSTOM_SMTP",
        "--host", "smtp.example.com", "--username", "mailer", "--password", PASSWORD,
        "--sender", "news@example.com", "--sender", "@brand.example", *extra,
    )  # fmt: skip


def test_add_list_remove_never_shows_secrets() -> None:
    workspace_id = _workspace()
    assert "connector mail added" in _add_smtp(workspace_id)
    added = _run(
        "connectors", "add", "-w", workspace_id, "--name", "push-gw", "--type", "CUSTOM_API",
        "--channel", "push", "--url", "https://push.example.com/in?token=q", "--secret", SECRET,
        "--timeout", "2.5",
    )  # fmt: skip
    assert SECRET not in added  # a secret the admin chose is not echoed
    listing = _run("connectors", "list", "-w", workspace_id)
    assert listing.splitlines() == [
        "mail\tCUSTOM_SMTP\tEMAIL\tsmtp://smtp.example.com:587 (starttls)\tsenders=news@example.com,@brand.example\tsecret=sealed\ttimeout=default",
        "push-gw\tCUSTOM_API\tPUSH\thttps://push.example.com/in?…\tsenders=-\tsecret=sealed\ttimeout=2.5s",
    ]
    as_json = [
        json.loads(line) for line in _run("connectors", "list", "-w", workspace_id, "--json").splitlines()
    ]
    assert {view["name"]: view["timeout"] for view in as_json} == {"mail": None, "push-gw": 2.5}
    # Times as the outbox and the offers write them: UTC with Z (not +00:00).
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z", view["created_at"]) for view in as_json
    )
    for text in (listing, json.dumps(as_json)):
        assert PASSWORD not in text
        assert SECRET not in text
        assert "token=q" not in text
    stored = _stored(workspace_id)
    assert all(PASSWORD not in f"{row.settings}{row.sealed_secrets}" for row in stored)
    assert _run("connectors", "remove", "-w", workspace_id, "mail") == "removed mail\n"
    assert [row.name for row in _stored(workspace_id)] == ["push-gw"]
    assert "no connector named 'mail'" in _fails("connectors", "remove", "-w", workspace_id, "mail")


def test_generated_webhook_secret_is_shown_once() -> None:
    workspace_id = _workspace()
    output = _run(
        "connectors",
        "add",
        "-w",
        workspace_id,
        "--name",
        "hook",
        "--type",
        "CUSTOM_API",
        "--url",
        "https://h.example/in",
    )
    match = re.search(r"shown once, give it to the receiver now\): (\S+)", output)
    assert match is not None
    assert match.group(1) not in _run("connectors", "list", "-w", workspace_id, "--json")


def test_secrets_are_refused_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    workspace_id = _workspace()
    monkeypatch.delenv("HERALD_SECRET_KEY")
    assert "HERALD_SECRET_KEY is not set" in _fails(*_smtp_args(workspace_id))
    assert _stored(workspace_id) == []
    # A connector without secrets needs no key.
    _run(
        "connectors",
        "add",
        "-w",
        workspace_id,
        "--name",
        "relay",
        "--type",
        "CUSTOM_SMTP",
        "--host",
        "localhost",
        "--security",
        "none",
    )
    assert [row.sealed_secrets for row in _stored(workspace_id)] == [None]


def _smtp_args(workspace_id: str) -> list[str]:
    return [
        "connectors",
        "add",
        "-w",
        workspace_id,
        "--name",
        "mail",
        "--type",
        "CUSTOM_SMTP",
        "--host",
        "h",
        "--username",
        "u",
        "--password",
        PASSWORD,
    ]


def test_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    workspace_id = _workspace()
    monkeypatch.setenv("HERALD_CONNECTOR_PASSWORD", PASSWORD)
    _run(
        "connectors",
        "add",
        "-w",
        workspace_id,
        "--name",
        "m",
        "--type",
        "CUSTOM_SMTP",
        "--host",
        "h",
        "--username",
        "u",
    )
    assert _stored(workspace_id)[0].sealed_secrets


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--type", "CUSTOM_API", "--url", "http://hooks.example.com/in"], "loopback"),
        (["--type", "CUSTOM_SMTP"], "--host is required"),
        (
            ["--type", "CUSTOM_SMTP", "--host", "bad host!"],
            "--host 'bad host!' is not a server name or address",
        ),
        (["--type", "FAX"], "--type must be one of"),
        # The URL parser drops a line break: the requests went where the listing did not say.
        (["--type", "CUSTOM_API", "--url", "http://127.0.0.1:9/a\nb"], "must not hold control characters"),
        # A file that holds no certificate was taken, and every send then failed.
        (["--type", "CUSTOM_SMTP", "--host", "h", "--ca-file", __file__], "holds no certificate"),
        # Refused as an address is: taken as '@domain', no from_address could be sent through it.
        (["--type", "CUSTOM_SMTP", "--host", "h", "--sender", "news@"], "is not an e-mail address"),
        (
            ["--type", "CUSTOM_SMTP", "--host", "h", "--sender", "@brand@test"],
            "'@brand@test' is not '@domain'",
        ),
    ],
)
def test_bad_connectors_are_refused_with_the_reason(args: list[str], message: str) -> None:
    workspace_id = _workspace()
    assert message in _fails("connectors", "add", "-w", workspace_id, "--name", "x", *args)
    assert _stored(workspace_id) == []


@pytest.mark.parametrize("sender", ["news@brand.test", "@brand.test", "news@localhost", "@localhost"])
def test_a_sandbox_may_send_from_the_domains_its_users_have(sender: str) -> None:
    # The rule of the addresses Herald sends to (`localhost` and `.test` domains too): the relay
    # decides what it takes. A special-use name was refused here while users there were not.
    workspace_id = _workspace()
    _run(
        "connectors",
        "add",
        "-w",
        workspace_id,
        "--name",
        "x",
        "--type",
        "CUSTOM_SMTP",
        "--host",
        "h",
        "--sender",
        sender,
    )
    assert [row.name for row in _stored(workspace_id)] == ["x"]


def test_duplicate_name_and_unknown_workspace() -> None:
    workspace_id = _workspace()
    _add_smtp(workspace_id)
    assert "already exists" in _fails(*_smtp_args(workspace_id))
    assert "no workspace" in _fails("connectors", "list", "-w", "NOPE")
    assert "no workspace" in _fails("outbox", "list", "-w", "NOPE")
    for campaign in ("", "x" * 24, "6b0d5ad6"):
        assert "is not a campaign id" in _fails("outbox", "list", "-w", workspace_id, "--campaign", campaign)


def test_keygen_prints_a_usable_key() -> None:
    key = _run("connectors", "keygen").strip()
    Fernet(key.encode())


def test_reseal_moves_every_connector_to_the_first_key_all_or_nothing(
    monkeypatch: pytest.MonkeyPatch, databases: Databases
) -> None:
    # After a rotation (a new key put first), the old key could not be dropped: nothing sealed the
    # connectors again, and without it every send failed "cannot be opened" at the next attempt.
    monkeypatch.setenv("HERALD_DATABASE_URL", databases.fresh())  # every workspace's connectors
    first, second = _workspace(), _workspace()
    _add_smtp(first)
    _run("connectors", "add", "-w", second, "--name", "hooks", "--type", "CUSTOM_API", "--channel", "push",
         "--url", "https://hooks.example/push", "--secret", SECRET)  # fmt: skip
    new = Fernet.generate_key().decode()
    monkeypatch.setenv("HERALD_SECRET_KEY", f"{new},{KEY}")
    assert "resealed the secrets of 2 connector(s)" in _run("connectors", "reseal")
    monkeypatch.setenv("HERALD_SECRET_KEY", new)  # the old key dropped
    [mail], [hooks] = _stored(first), _stored(second)
    assert open_secrets(mail, new) == {"password": PASSWORD}
    assert open_secrets(hooks, new) == {"hmac_secret": SECRET}

    # A connector no key opens: named, and nothing is resealed.
    monkeypatch.setenv("HERALD_SECRET_KEY", KEY)
    third = _workspace()
    _add_smtp(third)
    monkeypatch.setenv("HERALD_SECRET_KEY", f"{Fernet.generate_key().decode()},{new}")
    refused = _fails("connectors", "reseal")
    assert f"{third}/mail" in refused
    assert "nothing was resealed" in refused
    assert _stored(first)[0].sealed_secrets == mail.sealed_secrets


def test_outbox_list_newest_first_with_reasons() -> None:
    workspace_id = _workspace()
    clock = FrozenClock()

    async def seed() -> None:
        database = create_database(Settings())
        try:
            async with database.writer() as session:
                for minute, status, reason in (
                    (0, OutboxStatus.SENT, None),
                    (1, OutboxStatus.FAILED, "SMTP down"),
                ):
                    now = clock.advance(minutes=minute)
                    session.add(
                        OutboxEntry(
                            workspace_id=workspace_id, id=object_id(now), status=status.value, failure_reason=reason,
                            is_test=True, channel="EMAIL", platform=None, locale="default", variation="variation_1",
                            connector_id=None, connector_name="mail", recipient="a@example.com", customer_id=None,
                            campaign_id=None, request_id=None, summary={"subject": "Hi"}, created_at=now, updated_at=now,
                        )
                    )  # fmt: skip
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(seed())
    lines = _run("outbox", "list", "-w", workspace_id).splitlines()
    assert len(lines) == 2
    assert lines[0].split("\t")[2:] == [
        "FAILED",
        "test",
        "EMAIL_default_variation_1",
        "mail",
        "a@example.com",
        "'Hi'",
        "SMTP down",
    ]
    assert lines[1].split("\t")[2] == "SENT"
    assert len(_run("outbox", "list", "-w", workspace_id, "--limit", "1").splitlines()) == 1
    [row] = [
        json.loads(line)
        for line in _run("outbox", "list", "-w", workspace_id, "--limit", "1", "--json").splitlines()
    ]
    assert row["failure_reason"] == "SMTP down"


def _seed(*rows: object) -> None:
    async def seed() -> None:
        database = create_database(Settings())
        try:
            async with database.writer() as session:
                session.add_all(rows)
                await session.commit()
        finally:
            await database.dispose()

    asyncio.run(seed())


def _campaign(workspace_id: str, channel: str, status: str, connector: str | None = None) -> Campaign:
    now = FrozenClock().now()
    row_id = object_id(now)
    components = (
        {"connector": {"connector_type": "CUSTOM_SMTP", "connector_name": connector}} if connector else {}
    )
    return Campaign(
        workspace_id=workspace_id, id=row_id, campaign_id=row_id, channel=channel, delivery_type="ONE_TIME",
        status=status, created_by="ops@example.com", created_at=now, updated_at=now, components=components,
    )  # fmt: skip


def _add_push(workspace_id: str, name: str, *extra: str) -> str:
    return _run(
        "connectors", "add", "-w", workspace_id, "--name", name, "--type", "CUSTOM_API",
        "--channel", "push", "--url", "https://push.example.com/in", "--secret", SECRET, *extra,
    )  # fmt: skip


def test_remove_refuses_a_connector_live_campaigns_send_through_unless_forced() -> None:
    workspace_id = _workspace()
    _add_smtp(workspace_id)
    live = [_campaign(workspace_id, "EMAIL", status, "mail") for status in ("ACTIVE", "SCHEDULED", "SENDING")]
    # Not live, or through another connector: no reason to refuse.
    others = [
        _campaign(workspace_id, "EMAIL", "SENT", "mail"),
        _campaign(workspace_id, "EMAIL", "DRAFT", "mail"),
        _campaign(workspace_id, "EMAIL", "ACTIVE", "other"),
    ]
    _seed(*live, *others)
    result = runner.invoke(app, ["connectors", "remove", "-w", workspace_id, "mail"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: connector 'mail' is used by 3 live campaign(s): ")
    for campaign in live:
        assert f"{campaign.campaign_id} ({campaign.status})" in line
    for campaign in others:
        assert campaign.campaign_id not in line
    assert line.endswith("or pass --force to remove it anyway")
    assert [row.name for row in _stored(workspace_id)] == ["mail"]

    forced = runner.invoke(app, ["connectors", "remove", "-w", workspace_id, "mail", "--force"])
    assert forced.exit_code == 0
    assert forced.output.splitlines()[0] == "removed mail"
    assert "warning: " in forced.output
    assert live[0].campaign_id in forced.output
    assert _stored(workspace_id) == []


def test_remove_refuses_the_only_push_connector_of_live_push_campaigns() -> None:
    workspace_id = _workspace()
    _add_push(workspace_id, "push-a")
    _seed(_campaign(workspace_id, "PUSH", "ACTIVE"))
    assert "is used by 1 live campaign(s)" in _fails("connectors", "remove", "-w", workspace_id, "push-a")
    # With two push connectors the engine names neither: removing one is what makes the other the one.
    _add_push(workspace_id, "push-b", "--force")
    assert _run("connectors", "remove", "-w", workspace_id, "push-a") == "removed push-a\n"
    assert "is used by" in _fails("connectors", "remove", "-w", workspace_id, "push-b")


def test_a_second_push_connector_beside_the_one_live_campaigns_use_is_refused_unless_forced() -> None:
    # Push goes through the workspace's only push connector: a second one left every live push
    # campaign with none (its next run failed, naming both), and adding it said nothing.
    workspace_id = _workspace()
    _add_push(workspace_id, "push-a")
    live = _campaign(workspace_id, "PUSH", "ACTIVE")
    _seed(live, _campaign(workspace_id, "PUSH", "SENT"))
    result = runner.invoke(app, ["connectors", "add", "-w", workspace_id, "--name", "push-b", "--type",
                                 "CUSTOM_API", "--channel", "push", "--url", "https://push.example.com/b",
                                 "--secret", SECRET])  # fmt: skip
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("error: 1 live push campaign(s) send through 'push-a'")
    assert f"{live.campaign_id} (ACTIVE)" in line
    assert line.endswith("or add it with --force")
    assert [row.name for row in _stored(workspace_id)] == ["push-a"]
    forced = _add_push(workspace_id, "push-b", "--force")
    assert (
        f"warning: 1 live push campaign(s) now have no push connector to send through: {live.campaign_id}"
        in (forced)
    )
    assert [row.name for row in _stored(workspace_id)] == ["push-a", "push-b"]


def test_connector_json_lines_have_the_same_keys() -> None:
    workspace_id = _workspace()
    _add_smtp(workspace_id)
    _add_push(workspace_id, "push-gw")
    rows = [
        json.loads(line) for line in _run("connectors", "list", "-w", workspace_id, "--json").splitlines()
    ]
    assert len(rows) == 2
    assert rows[0].keys() == rows[1].keys()
    assert {"username", "senders", "batch_size", "session_messages"} <= rows[0].keys()
    mail, push = rows
    assert (mail["username"], mail["senders"]) == ("mailer", ["news@example.com", "@brand.example"])
    assert (push["username"], push["senders"], push["session_messages"]) == (None, None, None)


def test_outbox_list_shows_a_dash_for_no_connector() -> None:
    workspace_id = _workspace()
    now = FrozenClock().now()
    _seed(
        OutboxEntry(
            workspace_id=workspace_id, id=object_id(now), status=OutboxStatus.FAILED.value, failure_reason="gone",
            is_test=False, channel="EMAIL", platform=None, locale="default", variation="variation_1",
            connector_id=None, connector_name=None, recipient="a@example.com", customer_id="u1",
            campaign_id=None, request_id=None, summary={}, created_at=now, updated_at=now,
        )
    )  # fmt: skip
    [line] = _run("outbox", "list", "-w", workspace_id).splitlines()
    assert line.split("\t")[5] == "-"
    assert "None" not in line
