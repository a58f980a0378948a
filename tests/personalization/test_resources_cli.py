"""`herald content ...` commands, and the demo examples working through the preview."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from herald.cli import app as cli
from herald.personalization.seed import seed_examples
from herald.services import Services
from tests.factories import Tenant
from tests.personalization.helpers import add_user, email_body, preview, push_body, title_of


@pytest.fixture
def run(database_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("HERALD_DATABASE_URL", database_url)
    monkeypatch.delenv("HERALD_REDIS_URL", raising=False)
    return CliRunner()


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_content_commands_create_and_list_each_resource(run: CliRunner, tmp_path: Path) -> None:
    workspace = f"CLI{secrets.token_hex(4).upper()}"
    _ok(run, "workspaces", "create", "cli test", "--id", workspace)
    footer = tmp_path / "footer.html"
    footer.write_text("<p>Bye {{ user.first_name }}</p>")
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"title": "Hat"}, {"title": "Scarf"}]))
    html = tmp_path / "welcome.html"
    html.write_text("<h1>{{ user.first_name }}</h1>{{ ContentBlock['footer'] }}")

    _ok(run, "content", "blocks", "create", "-w", workspace, "footer", "--file", str(footer), "--html")
    _ok(run, "content", "blocks", "create", "-w", workspace, "sig", "--text", "The team")
    _ok(run, "content", "product-sets", "create", "-w", workspace, "bestsellers", "--file", str(items))
    _ok(
        run, "content", "apis", "create", "-w", workspace, "weather",
        "--url", "https://api.example.com/w?city={{ user.city }}",
        "--header", "X-Api-Key: secret-value", "--timeout", "1.5",
    )  # fmt: skip
    _ok(run, "content", "templates", "create", "-w", workspace, "welcome", "--channel", "EMAIL",
        "--html-file", str(html), "--subject", "Hi {{ user.first_name }}")  # fmt: skip
    assert "version 2" in _ok(
        run,
        "content",
        "templates",
        "create",
        "-w",
        workspace,
        "welcome",
        "--channel",
        "EMAIL",
        "--html-file",
        str(html),
    )
    _ok(
        run,
        "content",
        "templates",
        "create",
        "-w",
        workspace,
        "promo",
        "--channel",
        "PUSH",
        "--title",
        "T",
        "--message",
        "M",
    )

    assert _ok(run, "content", "blocks", "list", "-w", workspace).splitlines() == [
        "footer\thtml\t32 chars",
        "sig\ttext\t8 chars",
    ]
    assert _ok(run, "content", "product-sets", "list", "-w", workspace).strip() == "bestsellers\t2 items"
    apis = _ok(run, "content", "apis", "list", "-w", workspace)
    assert (
        "weather\tGET https://api.example.com/w?city={{ user.city }}\ttimeout=1.5s\theaders=X-Api-Key" in apis
    )
    assert "secret-value" not in apis
    assert _ok(run, "content", "templates", "list", "-w", workspace).splitlines() == [
        "promo\tversion 1\tPUSH\tpromo",
        "welcome\tversion 1\tEMAIL\twelcome",
        "welcome\tversion 2\tEMAIL\twelcome",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["blocks", "create", "bad", "--text", "{{ user.first_name"],
        ["blocks", "create", "has space", "--text", "x"],
        ["blocks", "create", "twice", "--text", "x"],
        ["apis", "create", "api", "--url", "https://{{ user.host }}/x"],
        ["apis", "create", "api", "--url", "https://example.com/", "--timeout", "9"],
        ["templates", "create", "t", "--channel", "SMS", "--title", "x"],
        ["templates", "create", "t", "--channel", "EMAIL", "--subject", "no body"],
        ["templates", "create", "t", "--channel", "PUSH", "--title", "{% if %}"],
    ],
)
def test_invalid_resources_are_refused(run: CliRunner, args: list[str]) -> None:
    workspace = f"CLI{secrets.token_hex(4).upper()}"
    _ok(run, "workspaces", "create", "cli test", "--id", workspace)
    _ok(run, "content", "blocks", "create", "-w", workspace, "twice", "--text", "x")
    result = run.invoke(cli, ["content", args[0], args[1], "-w", workspace, *args[2:]])
    assert result.exit_code != 0


def test_replace_changes_an_existing_block(run: CliRunner) -> None:
    workspace = f"CLI{secrets.token_hex(4).upper()}"
    _ok(run, "workspaces", "create", "cli test", "--id", workspace)
    _ok(run, "content", "blocks", "create", "-w", workspace, "b", "--text", "one")
    _ok(run, "content", "blocks", "create", "-w", workspace, "b", "--text", "three", "--replace")
    assert _ok(run, "content", "blocks", "list", "-w", workspace).strip() == "b\ttext\t5 chars"


async def test_demo_examples_render_through_the_preview(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
) -> None:
    services: Services = app.state.herald
    async with services.database.writer() as session:
        await seed_examples(session, services.clock.now(), workspace.workspace_id)
        await session.commit()
    await add_user(app, workspace, "u9")
    email = await preview(client, workspace, email_body({"custom_template_id": "welcome_email"}))
    assert email.status_code == 200, email.text
    rendered = email.json()["data"]["personalized_content"]["content"]["email"]
    assert rendered["subject"] == "Welcome, Ana!"
    assert (
        '<a href="https://example.com/p/trail-runner-2">Trail Runner 2</a> — 89.00 EUR'
        in rendered["html_content"]
    )
    assert "You receive this because you are a member, Ana." in rendered["html_content"]
    body = push_body({})
    body["campaign_content"]["content"]["push"] = {
        "android": {"template_type": "Custom", "custom_template_id": "promo_push"}
    }
    push = await preview(
        client,
        workspace,
        {**body, "user_identification": {"type": "USER_ATTRIBUTE_UNIQUE_ID", "value": "u9"}},
    )
    assert push.status_code == 200, push.text
    assert title_of(push) == "Hi, Trail Runner 2 is back"
    assert push.json()["data"]["missing"] == []
