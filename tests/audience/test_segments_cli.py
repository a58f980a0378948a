"""`herald segments create|list`: filter-based and static custom segments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.models import Segment, SegmentMember
from tests.audience.cli_helpers import Cli

GOLD = {
    "filter_operator": "and",
    "filters": [
        {
            "filter_type": "user_attributes",
            "data_type": "string",
            "name": "plan",
            "operator": "in",
            "value": ["gold"],
        },
        {
            "filter_type": "actions",
            "action_name": "purchased",
            "execution": {"type": "atleast", "count": 2},
            "attributes": {
                "filter_operator": "or",
                "filters": [
                    {
                        "filter_type": "user_attributes",
                        "data_type": "double",
                        "name": "price",
                        "operator": "greaterThan",
                        "value": 50,
                    }
                ],
            },
        },
    ],
}


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def stored_segment(cli: Cli, workspace_id: str, segment_id: str) -> tuple[Segment | None, list[str]]:
    async def work(session: AsyncSession) -> tuple[Segment | None, list[str]]:
        segment = await session.get(Segment, (workspace_id, segment_id))
        members = await session.scalars(
            select(SegmentMember.customer_id)
            .where(SegmentMember.workspace_id == workspace_id, SegmentMember.segment_id == segment_id)
            .order_by(SegmentMember.customer_id)
        )
        return segment, list(members)

    return cli.read(work)


class TestFilterSegments:
    def test_a_valid_filter_group_is_stored(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        result = cli(
            "segments",
            "create",
            "--workspace",
            workspace,
            "gold_buyers",
            "--filters",
            str(write_json(tmp_path / "f.json", GOLD)),
        )
        assert result.exit_code == 0, result.output
        segment_id = result.output.strip()
        segment, members = stored_segment(cli, workspace, segment_id)
        assert segment is not None
        assert (segment.name, segment.kind, segment.filters) == ("gold_buyers", "filter", GOLD)
        assert members == []
        listed = cli("segments", "list", "-w", workspace)
        assert listed.output.splitlines() == [f"{segment_id}\tgold_buyers\tfilter"]

    def test_problems_are_reported_with_paths(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        bad = {
            "filter_operator": "xor",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "bool",
                    "name": "vip",
                    "operator": "contains",
                    "value": True,
                },
                {"filter_type": "user_attributes", "data_type": "string", "name": "city", "operator": "in"},
                {"filter_type": "geo", "name": "x"},
                {"filter_type": "actions", "action_name": "a", "execution": {"type": "often", "count": 1}},
            ],
        }
        result = cli(
            "segments",
            "create",
            "-w",
            workspace,
            "bad",
            "--filters",
            str(write_json(tmp_path / "f.json", bad)),
        )
        assert result.exit_code == 1
        for target in ("filter_operator", "filters.2.filter_type", "filters.3.execution.type"):
            assert f"  {target}: " in result.output, target
        # The rules run on a group that parses; this one does not, so they are checked separately below.
        assert cli("segments", "list", "-w", workspace).output == ""

    def test_operator_rules_are_checked(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        bad = {
            "filter_operator": "or",
            "filters": [
                {
                    "filter_type": "user_attributes",
                    "data_type": "bool",
                    "name": "vip",
                    "operator": "contains",
                    "value": True,
                },
                {"filter_type": "user_attributes", "data_type": "string", "name": "city", "operator": "in"},
            ],
        }
        result = cli(
            "segments",
            "create",
            "-w",
            workspace,
            "bad",
            "--filters",
            str(write_json(tmp_path / "f.json", bad)),
        )
        assert result.exit_code == 1
        assert "filters.0.operator: Operator 'contains' does not apply to data_type 'bool'" in result.output
        assert "filters.1.value: 'value' is required with operator 'in'." in result.output

    def test_custom_segment_references_must_exist(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        base = cli(
            "segments",
            "create",
            "-w",
            workspace,
            "base",
            "--filters",
            str(write_json(tmp_path / "b.json", GOLD)),
        )
        base_id = base.output.strip()

        def referencing(segment_id: str) -> dict[str, Any]:
            return {
                "filter_operator": "and",
                "filters": [{"filter_type": "custom_segments", "name": "base", "id": segment_id}],
            }

        unknown = cli(
            "segments",
            "create",
            "-w",
            workspace,
            "s1",
            "--filters",
            str(write_json(tmp_path / "u.json", referencing("nope"))),
        )
        assert unknown.exit_code == 1
        assert "filters.0.id: No segment with id 'nope' in this workspace. (NOT_FOUND)" in unknown.output
        known = cli(
            "segments",
            "create",
            "-w",
            workspace,
            "s2",
            "--filters",
            str(write_json(tmp_path / "k.json", referencing(base_id))),
        )
        assert known.exit_code == 0, known.output

    def test_an_empty_group_is_refused(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        empty = write_json(tmp_path / "f.json", {"filter_operator": "and", "filters": []})
        result = cli("segments", "create", "-w", workspace, "empty", "--filters", str(empty))
        assert result.exit_code == 1
        assert "filters: A filter segment needs at least one filter." in result.output

    def test_a_file_that_is_not_json_is_an_error(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        path = tmp_path / "f.json"
        path.write_text("{oops")
        result = cli("segments", "create", "-w", workspace, "x", "--filters", str(path))
        assert result.exit_code == 1
        assert "error: f.json is not JSON" in result.output


class TestStaticSegments:
    def test_members_are_stored_once_each(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        users = tmp_path / "users.jsonl"
        users.write_text('{"type": "customer", "customer_id": "u1"}\n')
        assert cli("audience", "import", str(users), "-w", workspace, "--no-progress").exit_code == 0
        ids = tmp_path / "ids.txt"
        ids.write_text("u1\n\n  u2  \nu1\nu3\n")
        result = cli("segments", "create", "-w", workspace, "vips", "--customers", str(ids))
        assert result.exit_code == 0, result.output
        segment_id = result.output.splitlines()[0]
        assert "note: 2 of 3 customer ids are not known users yet" in result.output
        segment, members = stored_segment(cli, workspace, segment_id)
        assert segment is not None
        assert (segment.kind, segment.filters) == ("static", None)
        assert members == ["u1", "u2", "u3"]
        assert cli("segments", "list", "-w", workspace).output.splitlines() == [
            f"{segment_id}\tvips\tstatic\tmembers=3"
        ]

    def test_an_empty_list_is_refused(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        ids = tmp_path / "ids.txt"
        ids.write_text("\n\n")
        result = cli("segments", "create", "-w", workspace, "none", "--customers", str(ids))
        assert result.exit_code == 1
        assert "The list holds no customer ids." in result.output

    def test_an_overlong_id_names_its_line(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        ids = tmp_path / "ids.txt"
        ids.write_text("u1\n" + "x" * 201 + "\n")
        result = cli("segments", "create", "-w", workspace, "long", "--customers", str(ids))
        assert result.exit_code == 1
        assert "line 2: Not a customer id" in result.output


class TestRules:
    def test_names_are_unique_in_a_workspace_only(self, cli: Cli, tmp_path: Path) -> None:
        first, second = cli.workspace(), cli.workspace()
        ids = tmp_path / "ids.txt"
        ids.write_text("u1\n")
        assert cli("segments", "create", "-w", first, "same", "--customers", str(ids)).exit_code == 0
        again = cli("segments", "create", "-w", first, "same", "--customers", str(ids))
        assert again.exit_code == 1
        assert "a segment named 'same' already exists" in again.output
        assert cli("segments", "create", "-w", second, "same", "--customers", str(ids)).exit_code == 0
        assert len(cli("segments", "list", "-w", first).output.splitlines()) == 1

    def test_exactly_one_source_is_required(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        assert cli("segments", "create", "-w", workspace, "x").exit_code == 2
        ids = tmp_path / "ids.txt"
        ids.write_text("u1\n")
        both = cli("segments", "create", "-w", workspace, "x", "--customers", str(ids), "--filters", str(ids))
        assert both.exit_code == 2

    def test_unknown_workspace_is_an_error(self, cli: Cli, tmp_path: Path) -> None:
        ids = tmp_path / "ids.txt"
        ids.write_text("u1\n")
        result = cli("segments", "create", "-w", "NOPE", "x", "--customers", str(ids))
        assert result.exit_code == 1
        assert "no workspace NOPE" in result.output
        assert cli("segments", "list", "-w", "NOPE").exit_code == 1


class TestNames:
    def test_names_with_controls_or_too_long_are_refused_and_nothing_is_stored(
        self, cli: Cli, tmp_path: Path
    ) -> None:
        workspace = cli.workspace()
        ids = tmp_path / "ids.txt"
        ids.write_text("u1\n")
        for name in ("a\tb", "two\nlines", "bell\x07", "", "n" * 201):
            result = cli("segments", "create", name, "-w", workspace, "--customers", str(ids))
            assert result.exit_code == 1, result.output
            assert result.output.startswith(
                "error: a segment name must be printable text of 1-200 characters"
            )
        assert cli("segments", "list", "-w", workspace).output == ""

    def test_a_customers_file_that_is_not_utf8_is_one_error_line(self, cli: Cli, tmp_path: Path) -> None:
        workspace = cli.workspace()
        ids = tmp_path / "ids.txt"
        ids.write_bytes(b"u1\n\xff\n")
        result = cli("segments", "create", "s", "-w", workspace, "--customers", str(ids))
        assert result.exit_code == 1
        assert result.output.startswith("error: ids.txt is not UTF-8 text")
        assert cli("segments", "list", "-w", workspace).output == ""
