"""Workspaces are isolated: one cannot preview another's users or use its personalization resources."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from tests.factories import Tenant
from tests.personalization.helpers import (
    add_resources,
    add_user,
    detail_codes,
    email_body,
    preview,
    render_title,
    title_of,
)


async def test_another_workspaces_user_is_404(
    client: httpx.AsyncClient, workspace: Tenant, other_workspace: Tenant
) -> None:
    assert (await render_title(client, workspace, "{{ user.first_name }}")).status_code == 200
    response = await render_title(client, other_workspace, "{{ user.first_name }}")
    assert response.status_code == 404
    assert response.json()["error"]["target"] == "user_identification"


async def test_another_workspaces_resources_are_missing(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, other_workspace: Tenant
) -> None:
    await add_resources(
        app,
        workspace,
        blocks={"footer": "A's footer"},
        product_sets={"bestsellers": [{"title": "A's hat"}]},
        apis={"weather": {"url": "http://127.0.0.1:9/never", "allow_private": True}},
    )
    await add_resources(app, other_workspace, blocks={"own": "B's block"})
    # B's own user, named like A's.
    await add_user(app, other_workspace, "u1", first_name="Bea")
    template = (
        "{{ user.first_name }}|{{ ContentBlock['own'] }}|{{ ContentBlock['footer'] }}"
        "|{{ ProductSet['bestsellers'][0].title }}|{{ ContentApi['weather'].summary }}"
    )
    response = await render_title(client, other_workspace, template)
    assert response.status_code == 200, response.text
    assert title_of(response) == "Bea|B's block|||"
    assert [item["expression"] for item in response.json()["data"]["missing"]] == [
        "ContentBlock['footer']",
        "ProductSet['bestsellers']",
        "ContentApi['weather']",
    ]


async def test_another_workspaces_custom_template_is_unknown(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, other_workspace: Tenant
) -> None:
    await add_resources(app, workspace, templates={"welcome": ("EMAIL", {"html_content": "A"})})
    await add_user(app, other_workspace, "u1")
    response = await preview(client, other_workspace, email_body({"custom_template_id": "welcome"}))
    assert response.status_code == 400
    assert detail_codes(response) == {
        ("INVALID_TEMPLATE_ID", "campaign_content.content.email.custom_template_id")
    }
