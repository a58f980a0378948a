"""The OpenAPI document describes the offers operations as they behave."""

from __future__ import annotations

from typing import Any

import httpx


async def _spec(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    spec: dict[str, Any] = response.json()
    return spec


async def test_every_offers_operation_is_described(client: httpx.AsyncClient) -> None:
    paths = (await _spec(client))["paths"]
    assert set(paths["/v5/offers"]) == {"get", "post"}
    assert set(paths["/v5/offers/templates"]) == {"get"}
    assert set(paths["/v5/offers/{offer_id}"]) == {"patch"}
    assert set(paths["/v5/offers/{offer_id}/archive"]) == {"post"}


async def test_write_bodies_show_their_real_shapes(client: httpx.AsyncClient) -> None:
    spec = await _spec(client)
    create = spec["paths"]["/v5/offers"]["post"]
    assert create["requestBody"]["required"] is True
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/OfferCreate"
    }
    schemas = spec["components"]["schemas"]
    assert set(schemas["OfferCreate"]["required"]) == {
        "name",
        "priority",
        "delivery",
        "created_by",
        "scheduling",
        "segment_info",
        "offer_content",
        "variation_meta",
    }
    assert schemas["OfferUpdate"]["required"] == ["updated_by"]
    assert "FilterGroup" in schemas


async def test_responses_list_every_status_the_routes_answer(client: httpx.AsyncClient) -> None:
    paths = (await _spec(client))["paths"]
    assert {"201", "400", "401", "403", "409", "413", "429"} <= set(paths["/v5/offers"]["post"]["responses"])
    update = paths["/v5/offers/{offer_id}"]["patch"]["responses"]
    assert {"200", "400", "401", "403", "404", "409", "429"} <= set(update)
    # 403 is the gateway's text/plain refusal or the envelope of an expired/archived offering.
    assert set(update["403"]["content"]) == {"text/plain", "application/json"}
    assert {"200", "400", "429"} <= set(paths["/v5/offers/templates"]["get"]["responses"])


async def test_an_offer_summary_is_its_six_fields_none_of_them_null(client: httpx.AsyncClient) -> None:
    # Spec "Offering summary": only these six fields; `fields` selects some, the rest are left out.
    schemas = (await _spec(client))["components"]["schemas"]
    summary = schemas["OfferSummary"]
    fields = summary["properties"]
    assert set(fields) == {"id", "name", "status", "tags", "created_at", "created_by"}
    assert "required" not in summary
    assert summary["additionalProperties"] is False
    for name, field in fields.items():
        assert "anyOf" not in field, name
        assert "null" not in str(field.get("type")), name
    assert fields["id"]["pattern"] == "^offer_[0-9a-f]{24}$"
    assert fields["created_at"]["format"] == "date-time"
    assert fields["status"] == {"$ref": "#/components/schemas/OfferStatus", "examples": ["active"]}
    assert schemas["OfferStatus"]["enum"] == ["active", "scheduled", "expired", "archived", "draft"]
    for answer, stamp in (("OfferCreated", "created_at"), ("OfferChanged", "updated_at")):
        assert schemas[answer]["properties"]["status"]["$ref"] == "#/components/schemas/OfferStatus"
        assert schemas[answer]["properties"]["id"]["pattern"] == fields["id"]["pattern"]
        assert schemas[answer]["properties"][stamp]["format"] == "date-time"
    assert schemas["Pagination"]["properties"]["total_count"]["format"] == "int64"
