"""C4 validate (DRAFT_PUBLISH) parses every personalization expression with the sandbox's parser."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.factories import Tenant, make_tenant
from tests.personalization.helpers import OPEN_LIMITS

TITLE = "campaign_content.content.push.android.basic_details.title"


@pytest.fixture
async def drafts(app: FastAPI) -> Tenant:
    return await make_tenant(app, rate_limits={**OPEN_LIMITS, "campaign_create_success": "1000/minute"})


async def _validate_title(client: httpx.AsyncClient, tenant: Tenant, title: str) -> list[dict[str, Any]]:
    body = {
        "channel": "PUSH",
        "campaign_delivery_type": "ONE_TIME",
        "created_by": "ana@example.com",
        "basic_details": {"name": "Spring", "platforms": ["ANDROID"]},
        "campaign_content": {
            "content": {
                "push": {
                    "android": {"template_type": "BASIC", "basic_details": {"title": title, "message": "m"}}
                }
            }
        },
    }
    created = await client.post("/v5/campaigns", json=body, headers=tenant.write_headers(campaigns=True))
    assert created.status_code == 201, created.text
    campaign_id = created.json()["data"]["id"]
    response = await client.post(
        f"/v5/campaigns/{campaign_id}/validate", headers=tenant.headers(campaigns=True)
    )
    assert response.status_code == 200
    errors: list[dict[str, Any]] = response.json()["data"]["errors"]
    return [error for error in errors if error["code"] == "INVALID_TEMPLATE"]


@pytest.mark.parametrize(
    "title",
    [
        "Hi {{ user.first_name",
        "{{ user.first_name | no_such_filter }}",
        "{% include 'x' %}",
        "{{ x.__class__ }}",
    ],
)
async def test_an_expression_that_does_not_parse_fails_validation(
    client: httpx.AsyncClient, drafts: Tenant, title: str
) -> None:
    invalid = await _validate_title(client, drafts, title)
    assert [(error["field"], error["code"]) for error in invalid] == [(TITLE, "INVALID_TEMPLATE")]
    assert invalid[0]["issue"]


async def test_valid_expressions_pass(client: httpx.AsyncClient, drafts: Tenant) -> None:
    title = "Hi {{ UserAttribute['first_name'] | default('there') }} {% if event.x %}!{% endif %}"
    assert await _validate_title(client, drafts, title) == []
