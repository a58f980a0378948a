"""O4 `GET /v5/offers/templates`: the workspace's templates, paged like O1."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from herald.offers import cursor
from herald.services import Services
from herald.workspaces import service as workspaces_service
from tests.factories import Tenant
from tests.offers.builders import TEMPLATES


async def _templates(app: FastAPI, tenant: Tenant, count: int) -> list[str]:
    services: Services = app.state.herald
    ids = [f"tpl_{index:02d}" for index in range(count)]
    async with services.database.writer() as session:
        for template_id in ids:
            await workspaces_service.create_template(
                session,
                services.clock.now(),
                tenant.workspace_id,
                template_id,
                f"Label {template_id}",
                ["json", "html"],
            )
        await session.commit()
    return ids


async def _get(client: httpx.AsyncClient, tenant: Tenant, params: Any = None) -> httpx.Response:
    return await client.get(TEMPLATES, params=params, headers=tenant.headers())


class TestTemplates:
    async def test_items_have_id_value_label_and_types(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        await _templates(app, tenant, 1)
        response = await _get(client, tenant)
        assert response.status_code == 200
        body = response.json()
        assert body["type"] == "template"
        assert body["data"] == [
            {"id": "tpl_00", "value": "tpl_00", "label": "Label tpl_00", "template_type": ["json", "html"]}
        ]
        assert body["pagination"] == {"next_cursor": None, "limit": 20, "has_more": False, "total_count": 1}
        assert response.headers["X-RateLimit-Limit"] == "150"

    async def test_cursor_walk_returns_every_template_once(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        ids = await _templates(app, tenant, 7)
        seen: list[str] = []
        params: dict[str, Any] = {"limit": 3}
        while True:
            body = (await _get(client, tenant, params)).json()
            assert body["pagination"]["total_count"] == 7
            seen += [item["id"] for item in body["data"]]
            if body["pagination"]["next_cursor"] is None:
                assert body["pagination"]["has_more"] is False
                break
            params["cursor"] = body["pagination"]["next_cursor"]
        assert seen == ids

    @pytest.mark.parametrize(
        ("params", "expected"),
        [
            ({"limit": "101"}, [("OUT_OF_RANGE", "limit")]),
            ({"limit": "1_0"}, [("INVALID_TYPE", "limit")]),
            ({"limit": "+10"}, [("INVALID_TYPE", "limit")]),
            ({"limit": "0", "cursor": "%%%"}, [("OUT_OF_RANGE", "limit"), ("INVALID_CURSOR", "cursor")]),
            ({"cursor": cursor.encode("65f1c0ffee0123456789abcd")}, [("INVALID_CURSOR", "cursor")]),
        ],
    )
    async def test_bad_parameters_are_400(
        self,
        client: httpx.AsyncClient,
        tenant: Tenant,
        params: dict[str, str],
        expected: list[tuple[str, str]],
    ) -> None:
        response = await _get(client, tenant, params)
        assert response.status_code == 400
        assert sorted((d["code"], d["target"]) for d in response.json()["error"]["details"]) == sorted(
            expected
        )

    async def test_another_workspace_never_sees_or_counts_templates(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
    ) -> None:
        await _templates(app, tenant, 2)
        body = (await _get(client, other_tenant)).json()
        assert body["data"] == []
        assert body["pagination"]["total_count"] == 0
