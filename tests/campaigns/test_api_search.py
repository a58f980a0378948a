"""C6 Search campaigns through the HTTP API: paging, visibility rules, every filter, order,
tenancy, and one indexed SQL query per page."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.campaigns import search as search_module
from herald.campaigns.schemas.search import SearchBody
from herald.workspaces.scopes import Scope
from tests.campaigns import lifecycle_helpers as h
from tests.factories import Tenant, add_key
from tests.sql_probes import plan_of, recorded_statements

IDS = [f"{n:024x}" for n in range(1, 40)]


def at(day: int, hour: int = 12) -> str:
    return f"2025-12-{day:02d}T{hour:02d}:00:00Z"


@pytest.fixture
async def ws(app: FastAPI) -> Tenant:
    return await h.workspace(app)


def ids_of(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


class TestPaging:
    @pytest.mark.parametrize(
        ("body", "code", "target"),
        [
            ({"page": 1}, "REQUIRED_FIELD_MISSING", "limit"),
            ({"limit": 5}, "REQUIRED_FIELD_MISSING", "page"),
            ({"limit": 0, "page": 1}, "OUT_OF_RANGE", "limit"),
            ({"limit": 16, "page": 1}, "OUT_OF_RANGE", "limit"),
            ({"limit": 5, "page": 0}, "OUT_OF_RANGE", "page"),
            ({"limit": "5", "page": 1}, "INVALID_TYPE", "limit"),
            ({"limit": 5, "page": 1, "sender_name": "ACME"}, "UNKNOWN_FIELD", "sender_name"),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"sender_name": "ACME"}},
                "UNKNOWN_FIELD",
                "campaign_fields.sender_name",
            ),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"status": ["LIVE"]}},
                "INVALID_ENUM_VALUE",
                "campaign_fields.status.0",
            ),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"channels": ["sms"]}},
                "INVALID_ENUM_VALUE",
                "campaign_fields.channels.0",
            ),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"created_date": {"from_date": "01/12/2025"}}},
                "INVALID_TYPE",
                "campaign_fields.created_date.from_date",
            ),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"created_date": {"from_date": "2025-02-29"}}},
                "INVALID_TYPE",
                "campaign_fields.created_date.from_date",
            ),
            (
                {
                    "limit": 5,
                    "page": 1,
                    "campaign_fields": {"created_date": {"to_date": "2025-12-01T10:00+0530"}},
                },
                "INVALID_TYPE",
                "campaign_fields.created_date.to_date",
            ),
            (
                {
                    "limit": 5,
                    "page": 1,
                    "campaign_fields": {"created_date": {"from_date": "2025-12-05", "to_date": "2025-12-04"}},
                },
                "OUT_OF_RANGE",
                "campaign_fields.created_date",
            ),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"version_number": 0}},
                "OUT_OF_RANGE",
                "campaign_fields.version_number",
            ),
            # A filter list holds at most 1,000 values (each a statement parameter).
            (
                {"limit": 5, "page": 1, "campaign_fields": {"channels": ["PUSH"] * 32_768}},
                "OUT_OF_RANGE",
                "campaign_fields.channels",
            ),
            (
                {"limit": 5, "page": 1, "campaign_fields": {"created_by": ["a@example.com"] * 1001}},
                "OUT_OF_RANGE",
                "campaign_fields.created_by",
            ),
        ],
    )
    async def test_bad_bodies_are_400(
        self, client: httpx.AsyncClient, ws: Tenant, body: dict[str, Any], code: str, target: str
    ) -> None:
        response = await h.search(client, ws, body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        assert (code, target) in [(d["code"], d["target"]) for d in error["details"]]

    @pytest.mark.parametrize("statuses", [None, ["SCHEDULED", "DRAFT"]])
    async def test_a_page_past_32_bits_of_offset_is_empty(
        self, client: httpx.AsyncClient, ws: Tenant, statuses: list[str] | None
    ) -> None:
        # (page - 1) x limit = 8,189,097,015: past a 32-bit parameter (it answered 500 on PostgreSQL).
        body: dict[str, Any] = {"limit": 11, "page": 744_463_366}
        if statuses is not None:
            body["campaign_fields"] = {"status": statuses}
        for search in (h.search, h.meta):
            response = await search(client, ws, body)
            assert response.status_code == 200, response.text

    async def test_a_thousand_values_in_every_list_are_answered(
        self, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        many = [f"user{i}@example.com" for i in range(1000)]
        fields = {"created_by": many, "tags": many, "ids": many, "channels": ["PUSH"] * 1000}
        response = await h.search(client, ws, {"limit": 5, "page": 1, "campaign_fields": fields})
        assert response.status_code == 200, response.text
        assert response.json()["data"] == {"campaigns": []}

    async def test_pages_in_stable_order(self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant) -> None:
        # Two campaigns share each created_at: the id breaks the tie (descending).
        lines = [h.line(id=IDS[n], created_at=at(1 + n // 2)) for n in range(7)]
        await h.seed(app, ws, *lines)
        expected = [IDS[n] for n in (6, 5, 4, 3, 2, 1, 0)]
        pages = [ids_of(await h.found(client, ws, limit=3, page=page)) for page in (1, 2, 3, 4)]
        assert pages == [expected[0:3], expected[3:6], expected[6:7], []]

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"include_archive_campaigns": True},
            {"include_child_campaigns": True, "campaign_fields": {"status": ["DRAFT", "ACTIVE", "SENT"]}},
            {"campaign_fields": {"status": ["PAUSED", "STOPPED", "ARCHIVED"], "channels": ["EMAIL"]}},
        ],
    )
    async def test_pages_across_statuses_in_one_order(
        self, app: FastAPI, client: httpx.AsyncClient, body: dict[str, Any]
    ) -> None:
        """Rows of every status, three to a created_at, some children: each page continues the one
        order (created_at, then id, descending) across statuses, whichever statuses are shown."""
        flat = await h.workspace(app, versioning=False)
        statuses = ["ACTIVE", "DRAFT", "SENT", "PAUSED", "ARCHIVED", "STOPPED", "SCHEDULED", "SENDING"]
        lines = [
            h.line(
                id=IDS[n],
                status=statuses[n % len(statuses)],
                channel="EMAIL" if n % 3 else "SMS",
                created_at=at(1 + n // 3),
                **({"parent_id": IDS[0]} if n % 5 == 4 else {}),
            )
            for n in range(len(IDS))
        ]
        await h.seed(app, flat, *lines)
        fields = body.get("campaign_fields", {})
        shown = set(fields.get("status", set(statuses) - {"DRAFT"}))
        if not body.get("include_archive_campaigns"):
            shown.discard("ARCHIVED")
        expected = [
            IDS[n]
            for n in reversed(range(len(IDS)))  # created_at, then id, both ascending with n
            if lines[n]["status"] in shown
            and lines[n]["channel"] in fields.get("channels", ["EMAIL", "SMS"])
            and ("parent_id" not in lines[n] or body.get("include_child_campaigns"))
        ]
        pages = [ids_of(await h.found(client, flat, **body, limit=4, page=page)) for page in range(1, 12)]
        assert [len(page) for page in pages if page][:-1] == [4] * (-(-len(expected) // 4) - 1)
        assert [row_id for page in pages for row_id in page] == expected

    async def test_needs_an_idempotency_key_and_view_scope_is_enough(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        missing = await client.post(
            f"{h.BASE}/search", json={"limit": 1, "page": 1}, headers=ws.headers(campaigns=True)
        )
        assert missing.status_code == 400
        assert missing.json()["error"]["details"][0]["code"] == "MISSING_IDEMPOTENCY_KEY"
        viewer = await add_key(app, ws, [Scope.CAMPAIGNS_VIEW])
        assert (await h.search(client, viewer, {"limit": 1, "page": 1})).status_code == 200


class TestVisibility:
    async def test_drafts_only_when_listed(self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant) -> None:
        draft, active = await h.seed(app, ws, h.line(status="DRAFT"), h.line(status="ACTIVE"))
        assert ids_of(await h.found(client, ws)) == [active]
        assert ids_of(await h.found(client, ws, campaign_fields={"status": ["DRAFT"]})) == [draft]
        both = await h.found(client, ws, campaign_fields={"status": ["DRAFT", "ACTIVE"]})
        assert sorted(ids_of(both)) == sorted([draft, active])

    async def test_archived_only_with_the_flag_whatever_status_says(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        archived, sent = await h.seed(app, ws, h.line(status="ARCHIVED"), h.line(status="SENT"))
        assert ids_of(await h.found(client, ws)) == [sent]
        assert ids_of(await h.found(client, ws, campaign_fields={"status": ["ARCHIVED"]})) == []
        flagged = await h.found(
            client, ws, include_archive_campaigns=True, campaign_fields={"status": ["ARCHIVED"]}
        )
        assert ids_of(flagged) == [archived]
        assert sorted(ids_of(await h.found(client, ws, include_archive_campaigns=True))) == sorted(
            [archived, sent]
        )

    async def test_children_and_flow_nodes_only_with_the_flag(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        parent, child, node = await h.seed(
            app,
            ws,
            h.line(id=IDS[0], campaign_delivery_type="PERIODIC"),
            h.line(campaign_delivery_type="PERIODIC", parent_id=IDS[0], status="SENT"),
            h.line(flow_id="flow-7", flow_name="Onboarding"),
        )
        assert ids_of(await h.found(client, ws)) == [parent]
        rows = {row["id"]: row for row in await h.found(client, ws, include_child_campaigns=True)}
        assert set(rows) == {parent, child, node}
        assert rows[child]["parent_id"] == parent
        assert (rows[node]["flow_id"], rows[node]["flow_name"]) == ("flow-7", "Onboarding")

    async def test_another_workspace_rows_never_appear(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        stranger = await h.workspace(app)
        [mine] = await h.seed(app, ws, h.line())
        await h.seed(app, stranger, h.line(), h.line(status="DRAFT"), h.line(status="ARCHIVED"))
        wide = {
            "include_child_campaigns": True,
            "include_archive_campaigns": True,
            "campaign_fields": {"status": ["DRAFT", "ACTIVE", "ARCHIVED"]},
        }
        assert ids_of(await h.found(client, ws, **wide)) == [mine]

    async def test_without_versioning_only_latest_versions(
        self, app: FastAPI, client: httpx.AsyncClient
    ) -> None:
        flat = await h.workspace(app, versioning=False)
        versioned = await h.workspace(app, versioning=True)
        lines = [h.line(id=IDS[0]), h.line(id=IDS[1], campaign_id=IDS[0], version_number=2)]
        await h.seed(app, flat, *lines)
        await h.seed(app, versioned, *lines)
        flat_rows = await h.found(client, flat)
        assert ids_of(flat_rows) == [IDS[1]]
        assert "version_number" not in flat_rows[0]
        assert [row["version_number"] for row in await h.found(client, versioned)] == [2, 1]


class TestFilters:
    @pytest.fixture
    async def seeded(self, app: FastAPI, ws: Tenant) -> list[str]:
        return await h.seed(
            app,
            ws,
            h.line(
                id=IDS[0],
                channel="SMS",
                sender_name="ACME",
                created_at=at(1),
                basic_details={"name": "Flash 50% sale", "tags": ["promo", "sms"]},
            ),
            h.line(
                id=IDS[1],
                channel="PUSH",
                campaign_delivery_type="PERIODIC",
                status="SCHEDULED",
                created_by="ops@example.com",
                created_at=at(2),
                basic_details={"name": "Weekly flash digest", "platforms": ["ANDROID"], "tags": ["digest"]},
            ),
            h.line(
                id=IDS[2],
                channel="GOOGLE ADS",
                campaign_delivery_type="EVENT_TRIGGERED",
                status="PAUSED",
                created_at=at(3, 23),
                basic_details={"name": "flash_ads", "tags": ["promo"]},
            ),
            h.line(id=IDS[3], channel="WHATSAPP", created_at=at(4), basic_details={"name": "Hello"}),
        )

    @pytest.mark.parametrize(
        ("fields", "expected"),
        [
            ({}, [3, 2, 1, 0]),
            ({"ids": [IDS[1], IDS[3], "not-an-id"]}, [3, 1]),
            ({"name": "FLASH"}, [2, 1, 0]),
            ({"name": "50%"}, [0]),
            ({"name": "h_a"}, [2]),
            ({"name": "%"}, [0]),
            ({"channels": ["SMS", "GOOGLE ADS"]}, [2, 0]),
            ({"status": ["PAUSED", "SCHEDULED"]}, [2, 1]),
            ({"campaign_delivery_type": ["PERIODIC", "EVENT_TRIGGERED"]}, [2, 1]),
            ({"created_by": ["ops@example.com"]}, [1]),
            ({"tags": ["promo", "digest"]}, [2, 1, 0]),
            ({"tags": ["sms"]}, [0]),
            ({"created_date": {"from_date": "2025-12-02"}}, [3, 2, 1]),
            ({"created_date": {"to_date": "2025-12-03"}}, [2, 1, 0]),
            ({"created_date": {"from_date": "2025-12-02", "to_date": "2025-12-03T12:00:00Z"}}, [1]),
            ({"created_date": {"from_date": "2025-12-02 00:00+05:00", "to_date": "9999-12-31"}}, [3, 2, 1]),
            ({"created_date": {"from_date": "0001-01-01T00:00+05:00", "to_date": "2025-12-01"}}, [0]),
            ({"created_date": {"from_date": "9999-12-31T23:00-05:00"}}, []),
            ({"version_number": 1}, [3, 2, 1, 0]),
            ({"version_number": 2}, []),
            ({"name": "flash", "channels": ["PUSH"], "tags": ["digest"]}, [1]),
        ],
    )
    async def test_filter(
        self,
        client: httpx.AsyncClient,
        ws: Tenant,
        seeded: list[str],
        fields: dict[str, Any],
        expected: list[int],
    ) -> None:
        rows = await h.found(client, ws, campaign_fields=fields)
        assert ids_of(rows) == [IDS[n] for n in expected]

    async def test_name_folds_every_letter_not_only_ascii(
        self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant
    ) -> None:
        # SQLite's own lower() folds ASCII only: 'Ü' would match 'Ü' and never 'ü'.
        await h.seed(
            app,
            ws,
            h.line(id=IDS[0], basic_details={"name": "Ünïcode naïve"}),
            h.line(id=IDS[1], basic_details={"name": "unicode naive"}),
        )
        for name in ("ünïcode", "NAÏVE", "ÜNÏCODE NAÏVE"):
            assert ids_of(await h.found(client, ws, campaign_fields={"name": name})) == [IDS[0]], name

    async def test_rows_are_c2_objects_with_sender_name_for_sms(
        self, client: httpx.AsyncClient, ws: Tenant, seeded: list[str]
    ) -> None:
        [row] = await h.found(client, ws, campaign_fields={"channels": ["SMS"]})
        assert row == await h.get(client, ws, IDS[0])
        assert row["sender_name"] == "ACME"
        assert row["created_at"] == "2025-12-01 12:00:00.000000"


class TestQueryPlan:
    async def test_one_query_per_page(self, app: FastAPI, client: httpx.AsyncClient, ws: Tenant) -> None:
        await h.seed(app, ws, *(h.line(basic_details={"name": f"c{n}", "tags": ["t"]}) for n in range(5)))
        with recorded_statements(app) as statements:
            rows = await h.found(
                client,
                ws,
                limit=2,
                page=2,
                campaign_fields={"tags": ["t"], "name": "c", "created_date": {"from_date": "2020-01-01"}},
            )
        assert len(rows) == 2
        touching = [s for s, _ in statements if "campaign" in s.lower() and "idempotency" not in s.lower()]
        assert len(touching) == 1, touching

    @pytest.mark.parametrize(
        "fields",
        [{"tags": ["t"], "status": ["ACTIVE"]}, {}, {"tags": ["t"], "channels": ["EMAIL"], "name": "c"}],
    )
    async def test_the_page_query_uses_indexes_that_start_with_workspace_id(
        self, app: FastAPI, ws: Tenant, fields: dict[str, Any]
    ) -> None:
        body = SearchBody.model_validate({"limit": 15, "page": 1, "campaign_fields": fields})
        database = app.state.herald.database
        statement, parameters = search_module.ROWS.page(
            ws.workspace_id,
            search_module.search_criteria(body),
            versioning=True,
            limit=15,
            page=1,
            dialect=database.engine.dialect.name,
        )
        async with database.engine.connect() as connection:
            dialect = connection.dialect.name
            compiled = statement.params(parameters).compile(
                dialect=connection.dialect, compile_kwargs={"literal_binds": True}
            )
            plan = await plan_of(connection, str(compiled))
        assert "Seq Scan on campaigns" not in plan
        assert "SCAN campaigns" not in plan.replace("SCAN campaigns USING", "")
        used = [
            word
            for word in plan.replace("(", " ").split()
            if word.startswith(("ix_campaigns", "uq_campaigns", "pk_campaign"))
        ]
        assert used, plan
        assert all("workspace_id" in name or name.startswith("pk_") for name in used), plan
        if dialect == "sqlite" and "status" not in fields:
            # Without statistics SQLite would walk every row of the workspace in created_at order,
            # hidden statuses too; the page merges one ordered walk per shown status instead.
            assert "MERGE (UNION ALL)" in plan, plan
            assert (
                plan.count("ix_campaigns_workspace_id_status_created_at_id (workspace_id=? AND status=?)")
                == 6
            )
