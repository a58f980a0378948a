"""`herald offers import`: the importer (statuses, history, errors by line, batches) and the command."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from typer.testing import CliRunner

from herald.cli import app as cli
from herald.cli.demo import sample_offers
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import create_database
from herald.offers import importer
from herald.offers.models import Offer
from herald.offers.rules.scheduling import zulu
from herald.services import Services
from herald.workspaces.service import AdminError
from tests.factories import Tenant
from tests.offers.builders import OFFERS, TAG_ID, create_id, flat_body, import_offers, seed_catalog

LONG_AGO = datetime(2025, 3, 1, tzinfo=UTC)


def _line(document: Any) -> bytes:
    return document if isinstance(document, bytes) else orjson.dumps(document)


async def _run(
    app: FastAPI, tenant: Tenant, documents: list[Any], **options: Any
) -> tuple[importer.ImportResult, int]:
    """Import in a transaction that is rolled back; returns the result and the rows it held."""
    services: Services = app.state.herald
    async with services.database.writer() as session:
        result = await importer.import_lines(
            session, tenant.workspace_id, [_line(d) for d in documents], services.clock.now(), **options
        )
        count = await session.scalar(
            select(func.count()).select_from(Offer).where(Offer.workspace_id == tenant.workspace_id)
        )
        await session.rollback()
    return result, int(count or 0)


def _errors(result: importer.ImportResult) -> list[tuple[int, set[tuple[str, str]]]]:
    return [(error.line, {(p.code, p.target) for p in error.problems}) for error in result.errors]


class TestImporter:
    async def test_every_status_imports_and_lists_with_its_effective_status(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        now = clock.now()
        ended = {"start_datetime": zulu(LONG_AGO), "expiry_datetime": zulu(LONG_AGO + timedelta(days=30))}
        running = {"start_datetime": zulu(LONG_AGO), "expiry_datetime": zulu(now + timedelta(days=30))}
        given_id = "offer_" + "f" * 24  # the newest-looking id there can be
        await import_offers(
            app,
            tenant,
            [
                {**flat_body(now, "Was_Expired"), "scheduling": ended, "created_at": zulu(LONG_AGO)},
                {**flat_body(now, "Is_Running"), "scheduling": running, "id": given_id},
                {**flat_body(now, "Starts_Later"), "status": "published"},
                {"name": "Just_A_Draft", "created_by": "d@example.com", "status": "draft"},
                {**flat_body(now, "Put_Away"), "status": "archived"},
            ],
        )
        listed = (await client.get(OFFERS, params={"limit": 10}, headers=tenant.headers())).json()["data"]
        by_name = {item["name"]: item for item in listed}
        assert {name: item["status"] for name, item in by_name.items()} == {
            "Was_Expired": "expired",
            "Is_Running": "active",
            "Starts_Later": "scheduled",
            "Just_A_Draft": "draft",
            "Put_Away": "archived",
        }
        assert by_name["Was_Expired"]["created_at"] == "2025-03-01T00:00:00Z"
        assert by_name["Is_Running"]["id"] == given_id
        assert listed[0]["id"] == given_id  # a given id is kept, and sorts by its value
        assert listed[-1]["name"] == "Was_Expired"  # a new id sorts by the (old) creation time

    async def test_bad_lines_are_reported_with_their_numbers(
        self, app: FastAPI, tenant: Tenant, clock: FrozenClock
    ) -> None:
        now = clock.now()
        result, _ = await _run(
            app,
            tenant,
            [
                flat_body(now, "Good_Offer"),  # 1
                b'{"name": ',  # 2
                b"[1, 2]",  # 3
                flat_body(now, "bad name"),  # 4
                flat_body(now, "Good_Offer"),  # 5: duplicate of line 1
                {**flat_body(now, "Odd_Status"), "status": "live"},  # 6
                {**flat_body(now, "Odd_Id"), "id": "offer_123", "created_at": "yesterday"},  # 7
                {**flat_body(now, "Good_Offer"), "status": "archived"},  # 8: archived names may repeat
                b"   ",  # 9: blank lines are skipped
                {"name": "Lone_Draft", "status": "draft"},  # 10
                {**flat_body(now, "No_Priority"), "priority": None},  # 11
                # 12, 13: times an id cannot hold (year 1 sorted among today's ids; PostgreSQL
                # stored them as -infinity and infinity, shown as null)
                {**flat_body(now, "Year_One"), "created_at": "0001-01-01T00:00:00Z"},
                {**flat_body(now, "Year_9999"), "created_at": "9999-12-31T23:59:59.999999Z"},
                {**flat_body(now, "In_1970"), "created_at": "1970-01-01T00:00:00Z"},  # 14
            ],
        )
        assert _errors(result) == [
            (2, {("INVALID_TYPE", "")}),
            (3, {("INVALID_TYPE", "")}),
            (4, {("INVALID_OFFER_NAME", "name")}),
            (5, {("DUPLICATE_OFFER_NAME", "name")}),
            (6, {("INVALID_ENUM_VALUE", "status")}),
            (7, {("INVALID_TYPE", "id"), ("INVALID_TYPE", "created_at")}),
            (10, {("REQUIRED_FIELD_MISSING", "created_by")}),
            (11, {("INVALID_TYPE", "priority")}),
            (12, {("OUT_OF_RANGE", "created_at")}),
            (13, {("OUT_OF_RANGE", "created_at")}),
        ]
        assert result.lines == 14
        assert not result.ok

    async def test_history_is_not_held_to_the_present(
        self, app: FastAPI, tenant: Tenant, clock: FrozenClock
    ) -> None:
        old = {"start_datetime": zulu(LONG_AGO), "expiry_datetime": zulu(LONG_AGO + timedelta(minutes=5))}
        backwards = {"start_datetime": zulu(LONG_AGO), "expiry_datetime": zulu(LONG_AGO)}
        result, _ = await _run(
            app,
            tenant,
            [
                {**flat_body(clock.now(), "Old_Offer"), "scheduling": old},
                {**flat_body(clock.now()), "scheduling": backwards},
            ],
        )
        assert _errors(result) == [(2, {("INVALID_SCHEDULING", "scheduling.expiry_datetime")})]

    async def test_names_and_ids_clash_across_batches_and_with_the_workspace(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        now = clock.now()
        existing = await create_id(client, tenant, flat_body(now, "Already_There"))
        given = "offer_" + "fedcba9876543210fedcba98"
        result, rows = await _run(
            app,
            tenant,
            [
                {**flat_body(now, "Batch_One_A"), "id": given},  # 1
                flat_body(now, "Already_There"),  # 2
                flat_body(now, "Batch_Two_A"),  # 3
                flat_body(now, "Batch_One_A"),  # 4: named like line 1, a batch earlier
                {**flat_body(now, "Other_Name"), "id": given},  # 5: id of line 1
                {**flat_body(now, "Another_One"), "id": existing},  # 6: id of an offer in the workspace
            ],
            batch_size=2,
        )
        assert _errors(result) == [
            (2, {("DUPLICATE_OFFER_NAME", "name")}),
            (4, {("DUPLICATE_OFFER_NAME", "name")}),
            (5, {("DUPLICATE_OFFER_ID", "id")}),
            (6, {("DUPLICATE_OFFER_ID", "id")}),
        ]
        assert result.imported == 2
        assert rows == 3  # the existing offer and the two good lines, until the caller rolls back

    async def test_worker_processes_give_the_same_result(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        now = clock.now()
        await create_id(client, tenant, flat_body(now, "Already_There"))
        documents: list[Any] = [flat_body(now, f"Parallel_{i:02d}") for i in range(20)]
        documents[3] = flat_body(now, "Already_There")
        documents[7] = b"{not json"
        documents[15] = flat_body(now, "Parallel_01")  # a name from an earlier chunk
        sequential, rows = await _run(app, tenant, documents, batch_size=4)
        parallel, parallel_rows = await _run(app, tenant, documents, batch_size=4, workers=2)
        assert (
            _errors(parallel)
            == _errors(sequential)
            == [
                (4, {("DUPLICATE_OFFER_NAME", "name")}),
                (8, {("INVALID_TYPE", "")}),
                (16, {("DUPLICATE_OFFER_NAME", "name")}),
            ]
        )
        assert (parallel.imported, parallel_rows) == (sequential.imported, rows) == (17, 18)

    async def test_reading_stops_after_max_errors(self, app: FastAPI, tenant: Tenant) -> None:
        result, _ = await _run(app, tenant, [b"nope"] * 10, max_errors=3)
        assert [error.line for error in result.errors] == [1, 2, 3]
        assert result.stopped_early

    async def test_progress_reports_bytes_read(
        self, app: FastAPI, tenant: Tenant, clock: FrozenClock
    ) -> None:
        lines = [orjson.dumps(flat_body(clock.now(), f"Progress_{i}")) + b"\n" for i in range(5)]
        seen: list[int] = []
        services: Services = app.state.herald
        async with services.database.writer() as session:
            await importer.import_lines(
                session, tenant.workspace_id, lines, clock.now(), batch_size=2, progress=seen.append
            )
            await session.rollback()
        assert seen == [len(b"".join(lines[:2])), len(b"".join(lines[:4])), len(b"".join(lines))]

    async def test_unknown_workspace_is_refused(self, app: FastAPI, clock: FrozenClock) -> None:
        services: Services = app.state.herald
        async with services.database.writer() as session:
            with pytest.raises(AdminError):
                await importer.import_lines(session, "NO_SUCH_WS", [b"{}"], clock.now())


def _count(database_url: str, workspace_id: str) -> int:
    async def count() -> int:
        database = create_database(Settings(database_url=database_url))
        try:
            async with database.reader() as session:
                query = select(func.count()).select_from(Offer).where(Offer.workspace_id == workspace_id)
                return int(await session.scalar(query) or 0)
        finally:
            await database.dispose()

    return asyncio.run(count())


class TestCommand:
    @pytest.fixture
    def workspace(self, database_url: str) -> str:
        workspace_id = f"W{secrets.token_hex(6).upper()}"
        result = CliRunner().invoke(
            cli,
            ["workspaces", "create", "import test", "--id", workspace_id],
            env={"HERALD_DATABASE_URL": database_url},
        )
        assert result.exit_code == 0, result.output
        return workspace_id

    def _file(self, tmp_path: Path, documents: list[Any]) -> Path:
        path = tmp_path / "offers.jsonl"
        path.write_bytes(b"".join(_line(d) + b"\n" for d in documents))
        return path

    def test_import_loads_every_line(self, tmp_path: Path, database_url: str, workspace: str) -> None:
        now = datetime.now(UTC)
        path = self._file(tmp_path, [flat_body(now, f"Cli_Offer_{i}") for i in range(3)])
        result = CliRunner().invoke(
            cli,
            ["offers", "import", str(path), "--workspace", workspace, "--workers", "2", "--batch-size", "2"],
            env={"HERALD_DATABASE_URL": database_url},
        )
        assert result.exit_code == 0, result.output
        assert f"imported 3 offerings into {workspace}" in result.output
        assert _count(database_url, workspace) == 3

    def test_a_bad_line_imports_nothing(self, tmp_path: Path, database_url: str, workspace: str) -> None:
        now = datetime.now(UTC)
        path = self._file(
            tmp_path, [flat_body(now, "Cli_Good_1"), flat_body(now, "x"), flat_body(now, "Cli_Good_2")]
        )
        result = CliRunner().invoke(
            cli,
            ["offers", "import", str(path), "--workspace", workspace, "--workers", "1", "-q"],
            env={"HERALD_DATABASE_URL": database_url},
        )
        assert result.exit_code == 1
        assert "line 2: name: INVALID_OFFER_NAME" in result.output
        assert "nothing was imported" in result.output
        assert _count(database_url, workspace) == 0

    def test_unknown_workspace_is_an_error(self, tmp_path: Path, database_url: str) -> None:
        path = self._file(tmp_path, [flat_body(datetime.now(UTC))])
        result = CliRunner().invoke(
            cli,
            ["offers", "import", str(path), "--workspace", "NOPE", "--workers", "1"],
            env={"HERALD_DATABASE_URL": database_url},
        )
        assert result.exit_code == 1
        assert "no workspace NOPE" in result.output


class TestDemoSamples:
    async def test_demo_offers_import_and_can_be_updated(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        await seed_catalog(app, tenant)  # the demo's tag and template
        ids = await import_offers(app, tenant, sample_offers(clock.now(), TAG_ID))
        for offer_id in ids:
            response = await client.patch(
                f"{OFFERS}/{offer_id}",
                json={"updated_by": "demo@example.com", "priority": 20},
                headers=tenant.write_headers(),
            )
            assert response.status_code == 200, response.text
        statuses = (
            await client.get(OFFERS, params={"fields": "name,status"}, headers=tenant.headers())
        ).json()["data"]
        assert sorted((item["name"], item["status"]) for item in statuses) == [
            ("Loyalty_Bonus_Points", "draft"),
            ("Spring_Preview", "scheduled"),
            ("Winter_Sale_20", "active"),
        ]
