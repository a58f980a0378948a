"""The admin CLI: workspaces, keys (secret shown once, stored hashed, revocable), flags, limits, tags."""

from __future__ import annotations

import asyncio
import re

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from herald.cli import app
from herald.config import Settings
from herald.db import create_database
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
    # Another workspace's keys are not listed; an unknown workspace has none (and is no error).
    assert first.id not in _run("keys", "list", "-w", _workspace())
    assert _run("keys", "list", "-w", "NO_SUCH_WORKSPACE") == ""


def test_workspace_listing_shows_the_flags_that_are_on() -> None:
    workspace_id = _workspace()
    _run("features", "set", "-w", workspace_id, "queuing", "on")
    _run("features", "set", "-w", workspace_id, "portfolio", "on")
    _run("features", "set", "-w", workspace_id, "portfolio", "off")
    _run("features", "set", "-w", workspace_id, "campaign_audience_limit", "on")
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
