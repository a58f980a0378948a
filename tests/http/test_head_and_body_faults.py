"""Contract §3: every violation in one response. A request refused for its head (no
Idempotency-Key, a malformed request id) also names what its body gets wrong, as the route reads
the body, instead of answering the body's faults only once the head is fixed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.factories import Tenant

_CAMPAIGN = "6b0eb1cb6dc39d1d02f616f9"
_OFFER = "offer_6b0eb1cb6dc39d1d02f616f9"
_MISSING_KEY = ("MISSING_IDEMPOTENCY_KEY", "Idempotency-Key")


@pytest.mark.parametrize(
    ("method", "path", "body", "fault"),
    [
        ("POST", "/v5/offers", {"name": 5}, ("INVALID_TYPE", "name")),
        ("PATCH", f"/v5/offers/{_OFFER}", {"updated_by": 5}, ("INVALID_TYPE", "updated_by")),
        ("POST", f"/v5/offers/{_OFFER}/archive", {"updated_by": 5}, ("INVALID_TYPE", "updated_by")),
        (
            "POST",
            "/v5/campaigns",
            {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "nope"},
            ("INVALID_TYPE", "created_by"),
        ),
        (
            "PATCH",
            f"/v5/campaigns/{_CAMPAIGN}/status",
            {"action": "EXPLODE"},
            ("INVALID_ENUM_VALUE", "action"),
        ),
        ("POST", "/v5/campaigns/search", {"limit": 99}, ("OUT_OF_RANGE", "limit")),
        ("POST", "/v5/campaigns/meta", {"limit": 99}, ("OUT_OF_RANGE", "limit")),
        ("POST", "/v5/campaigns/test", {"channel": "FAX"}, ("INVALID_ENUM_VALUE", "channel")),
        # C3 reads components as the stored campaign's channel: what is wrong whichever it is.
        (
            "PATCH",
            f"/v5/campaigns/{_CAMPAIGN}",
            {"updated_by": "nope", "basic_details": {"name": 5}},
            ("INVALID_TYPE", "updated_by"),
        ),
        (
            "PATCH",
            f"/v5/campaigns/{_CAMPAIGN}",
            {"updated_by": "a@example.com", "basic_details": {"name": 5}},
            ("INVALID_TYPE", "basic_details.name"),
        ),
    ],
)
async def test_a_missing_key_is_answered_with_the_bodys_faults(
    client: httpx.AsyncClient,
    tenant: Tenant,
    method: str,
    path: str,
    body: dict[str, Any],
    fault: tuple[str, str],
) -> None:
    headers = tenant.headers(campaigns=path.startswith("/v5/campaigns"))
    response = await client.request(method, path, json=body, headers=headers)
    assert response.status_code == 400, response.text
    details = {(d["code"], d["target"]) for d in response.json()["error"]["details"]}
    assert {_MISSING_KEY, fault} <= details


async def test_a_patch_refused_for_its_head_names_no_fault_of_one_channel_only(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    # Push content is wrong only for an Email campaign: unread, the stored channel may be Push.
    body = {
        "updated_by": "a@example.com",
        "campaign_content": {"content": {"push": {"android": {"basic_details": {"title": "Hi"}}}}},
    }
    response = await client.patch(
        f"/v5/campaigns/{_CAMPAIGN}", json=body, headers=tenant.headers(campaigns=True)
    )
    assert response.status_code == 400, response.text
    details = [(d["code"], d["target"]) for d in response.json()["error"]["details"]]
    assert details == [_MISSING_KEY]
