"""`herald campaigns import`, `herald campaigns reject` and `herald worker --once`, run as a user
runs them (against the test database), checked through the HTTP API."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from fastapi import FastAPI
from typer.testing import CliRunner

from herald.cli.app import app as cli
from herald.config import Settings
from tests.campaigns import lifecycle_helpers as h
from tests.campaigns.payloads import PAYLOADS
from tests.factories import Tenant

IDS = [f"{n:024x}" for n in range(500, 520)]


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


@pytest.fixture
def herald(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Any:
    monkeypatch.setenv("HERALD_DATABASE_URL", settings.database_url)
    runner = CliRunner()

    async def run(*args: str) -> Result:
        # The command runs its own event loop, so it gets a thread of its own.
        return await asyncio.to_thread(_invoke, runner, list(args))

    return run


def _invoke(runner: CliRunner, args: list[str]) -> Result:
    """The command, with the process's logging put back as it was found: `herald worker` sets up
    its log lines on the standard error the runner lends it and closes once the command returns,
    and a library logging later in this process (aiosmtpd's SMTP sinks) then wrote to it closed."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return runner.invoke(cli, args)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(item) for item in lines) + "\n\n")
    return path


class TestImport:
    async def test_every_channel_status_and_relation(
        self, herald: Any, client: httpx.AsyncClient, ws: Tenant, tmp_path: Path
    ) -> None:
        push = {
            key: value for key, value in PAYLOADS["push_one_time_android_ios"].items() if key != "request_id"
        }
        lines = [
            h.line(
                id=IDS[0],
                channel="SMS",
                sender_name="ACME",
                status="SENT",
                created_at="2025-06-01 10:00:00.000000",
                basic_details={"name": "OTP reminder"},
                campaign_content={"content": {"sms": {"message": "Hi"}}},
            ),
            h.line(id=IDS[1], channel="WHATSAPP", campaign_delivery_type="PERIODIC", status="ACTIVE"),
            h.line(
                id=IDS[2],
                channel="WHATSAPP",
                campaign_delivery_type="PERIODIC",
                status="SENT",
                parent_id=IDS[1],
            ),
            h.line(id=IDS[3], channel="FACEBOOK", status="DRAFT", rejection_comment="Off-brand"),
            h.line(id=IDS[4], channel="GOOGLE ADS", status="ARCHIVED"),
            h.line(
                id=IDS[5],
                channel="CONNECTORS",
                status="ACTIVE",
                flow_id="flow-1",
                flow_name="Welcome journey",
            ),
            {**push, "id": IDS[6], "status": "SCHEDULED"},
            {**push, "id": IDS[7], "campaign_id": IDS[6], "version_number": 2, "status": "SCHEDULED"},
            {**PAYLOADS["email_event_triggered"], "id": IDS[8], "status": "PAUSED", "paused_from": "ACTIVE"},
        ]
        result = await herald(
            "campaigns",
            "import",
            str(write_lines(tmp_path / "c.jsonl", lines)),
            "--workspace",
            ws.workspace_id,
        )
        assert result.exit_code == 0, result.output
        assert "imported 9 version documents of 8 campaigns" in result.output

        sms = await h.get(client, ws, IDS[0])
        assert (sms["channel"], sms["sender_name"], sms["status"]) == ("SMS", "ACME", "SENT")
        assert sms["created_at"] == "2025-06-01 10:00:00.000000"
        assert sms["campaign_content"] == {"content": {"sms": {"message": "Hi"}}}
        latest = await h.get(client, ws, IDS[6])
        assert (latest["id"], latest["version_number"]) == (IDS[7], 2)
        assert latest["campaign_content"] == push["campaign_content"]
        assert (await h.get(client, ws, IDS[8]))["status"] == "PAUSED"
        everything = await h.found(
            client,
            ws,
            include_child_campaigns=True,
            include_archive_campaigns=True,
            campaign_fields={"status": ["DRAFT", "ACTIVE", "SENT", "ARCHIVED", "SCHEDULED", "PAUSED"]},
        )
        assert len(everything) == 9
        meta = {
            r["campaign_id"]: r for r in await h.meta_rows(client, ws, campaign_fields={"status": ["DRAFT"]})
        }
        assert meta[IDS[3]]["rejection_comment"] == "Off-brand"
        resumed = await h.action(client, ws, IDS[8], "RESUME")
        assert resumed.status_code == 200
        assert (await h.get(client, ws, IDS[8]))["status"] == "ACTIVE"

    async def test_any_bad_line_imports_nothing_and_every_problem_is_reported(
        self, herald: Any, client: httpx.AsyncClient, ws: Tenant, tmp_path: Path
    ) -> None:
        lines = [
            h.line(id=IDS[0]),
            h.line(channel="PUSH", sender_name="x"),
            h.line(status="LIVE"),
            {**PAYLOADS["push_periodic"], "utm_params": {"utm_source": "x"}, "advanced": {"nope": 1}},
            h.line(id=IDS[0]),
            h.line(version_number=2),
            h.line(status="SENT", rejection_comment="too late"),
        ]
        path = write_lines(tmp_path / "bad.jsonl", lines)
        path.write_text(path.read_text() + "{not json\n")
        result = await herald("campaigns", "import", str(path), "--workspace", ws.workspace_id)
        assert result.exit_code == 1
        output = result.output
        for expected in (
            "line 2: sender_name",
            "line 3: status",
            "line 4: utm_params.utm_medium",
            "line 4: advanced.nope",
            "line 5: id",
            "line 6: campaign_id",
            "line 7: rejection_comment",
            "line 9: not JSON",  # line 8 is blank
        ):
            assert expected in output, output
        response = await client.get(f"{h.BASE}/{IDS[0]}", headers=ws.headers(campaigns=True))
        assert response.status_code == 404

    async def test_existing_campaigns_are_not_overwritten(
        self, herald: Any, app: FastAPI, ws: Tenant, tmp_path: Path
    ) -> None:
        await h.seed(app, ws, h.line(id=IDS[0]))
        path = write_lines(tmp_path / "again.jsonl", [h.line(id=IDS[0]), h.line(id=IDS[1])])
        result = await herald("campaigns", "import", str(path), "--workspace", ws.workspace_id)
        assert result.exit_code == 1
        assert "already exists" in result.output
        assert await h.stored(app, ws, IDS[1]) == []

    async def test_a_creation_time_beyond_the_calendar_in_utc_is_imported(
        self, herald: Any, client: httpx.AsyncClient, ws: Tenant, tmp_path: Path
    ) -> None:
        path = write_lines(
            tmp_path / "edge.jsonl", [h.line(id=IDS[0], created_at="0001-01-01T00:00:00+05:00")]
        )
        result = await herald("campaigns", "import", str(path), "--workspace", ws.workspace_id)
        assert result.exit_code == 0, result.output
        assert (await h.get(client, ws, IDS[0]))["created_at"] == "0001-01-01 00:00:00.000000"

    async def test_a_number_past_the_digit_limit_is_a_line_error(
        self, herald: Any, ws: Tenant, tmp_path: Path
    ) -> None:
        path = tmp_path / "c.jsonl"
        path.write_text('{"channel": "PUSH", "priority": ' + "9" * 5000 + "}\n")
        result = await herald("campaigns", "import", str(path), "--workspace", ws.workspace_id)
        assert result.exit_code == 1
        assert "line 1: holds a number of more digits than can be read" in result.output

    async def test_numbers_json_has_not_are_line_errors(
        self, herald: Any, ws: Tenant, tmp_path: Path
    ) -> None:
        # Python's reader takes NaN and Infinity, and reads 1e999 as infinity: each was stored as null.
        lines = [
            '{"channel": "PUSH", "basic_details": {"name": "n", "x": NaN}}',
            '{"channel": "PUSH", "basic_details": {"name": "n", "y": -Infinity}}',
            '{"channel": "PUSH", "basic_details": {"name": "n", "z": [1e999]}}',
        ]
        path = tmp_path / "c.jsonl"
        path.write_text("\n".join(lines) + "\n")
        result = await herald("campaigns", "import", str(path), "--workspace", ws.workspace_id)
        assert result.exit_code == 1
        assert "line 1: not JSON (NaN is no JSON number)" in result.output
        assert "line 2: not JSON (-Infinity is no JSON number)" in result.output
        assert "line 3: basic_details.z.0: numbers must fit a double" in result.output

    async def test_unknown_workspace(self, herald: Any, tmp_path: Path) -> None:
        path = write_lines(tmp_path / "c.jsonl", [h.line()])
        result = await herald("campaigns", "import", str(path), "--workspace", "NOPE")
        assert result.exit_code == 1
        assert "error: no workspace NOPE" in result.output


class TestReject:
    async def test_reject_a_draft_then_publish_clears_it(
        self, herald: Any, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        campaign_id = await h.create(client, ws, PAYLOADS["push_device_triggered"])
        result = await herald(
            "campaigns", "reject", campaign_id, "--workspace", ws.workspace_id, "--comment", "Add a deep link"
        )
        assert result.exit_code == 0, result.output
        [row] = await h.meta_rows(client, ws, campaign_fields={"status": ["DRAFT"]})
        assert row["rejection_comment"] == "Add a deep link"
        await h.publish(client, ws, campaign_id)
        [row] = await h.meta_rows(client, ws)
        assert "rejection_comment" not in row

    async def test_only_drafts_of_the_workspace_can_be_rejected(
        self, herald: Any, app: FastAPI, ws: Tenant
    ) -> None:
        [live] = await h.seed(app, ws, h.line(status="ACTIVE"))
        refused = await herald("campaigns", "reject", live, "--workspace", ws.workspace_id, "--comment", "x")
        assert refused.exit_code == 1
        assert "Only a DRAFT campaign" in refused.output
        other = await h.workspace(app)
        missing = await herald(
            "campaigns", "reject", live, "--workspace", other.workspace_id, "--comment", "x"
        )
        assert missing.exit_code == 1
        blank = await herald("campaigns", "reject", live, "--workspace", ws.workspace_id, "--comment", "  ")
        assert blank.exit_code == 1


@pytest.mark.own_database  # the worker applies every workspace's due transitions
async def test_worker_once_applies_due_transitions(
    herald: Any, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
) -> None:
    # The command reads the system clock: a start long past is due whatever today is.
    [campaign_id] = await h.seed(
        app,
        ws,
        h.line(
            campaign_delivery_type="PERIODIC",
            status="SCHEDULED",
            scheduling_details={"start_time": "2001-01-01T00:00:00Z"},
        ),
    )
    result = await herald("worker", "--once")
    assert result.exit_code == 0, result.output
    assert "transitions" in result.output
    assert (await h.get(client, ws, campaign_id))["status"] == "ACTIVE"
