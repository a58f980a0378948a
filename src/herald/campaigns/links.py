"""OpenAPI links from a created campaign to the operations that take it.

They tell clients (and Schemathesis's stateful phase) how a create's `data.id` feeds the next call:
get, patch, validate, change status, and search for it by id.
"""

from __future__ import annotations

from typing import Any

CREATED_ID = "$response.body#/data/id"
_BY_ID = {"campaign_id": CREATED_ID}
# (link name, path, method, link fields beyond the operation)
_FROM_CREATE: list[tuple[str, str, str, dict[str, Any]]] = [
    ("GetCampaign", "/v5/campaigns/{campaign_id}", "get", {"parameters": _BY_ID}),
    ("UpdateCampaign", "/v5/campaigns/{campaign_id}", "patch", {"parameters": _BY_ID}),
    ("ValidateCampaign", "/v5/campaigns/{campaign_id}/validate", "post", {"parameters": _BY_ID}),
    ("ChangeCampaignStatus", "/v5/campaigns/{campaign_id}/status", "patch", {"parameters": _BY_ID}),
    (
        "SearchCampaign",
        "/v5/campaigns/search",
        "post",
        {"requestBody": {"limit": 15, "page": 1, "campaign_fields": {"ids": [CREATED_ID]}}},
    ),
]


def add_links(document: dict[str, Any]) -> None:
    paths = document.get("paths", {})
    created = paths.get("/v5/campaigns", {}).get("post", {}).get("responses", {}).get("201")
    if created is None:
        return
    links = created.setdefault("links", {})
    for name, path, method, fields in _FROM_CREATE:
        target = paths.get(path, {}).get(method)
        if target is not None and "operationId" in target:
            links[name] = {"operationId": target["operationId"], **fields}
