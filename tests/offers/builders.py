"""Offer bodies and workspace catalog data (tags, templates) for the offers tests."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import httpx
import orjson
from fastapi import FastAPI
from sqlalchemy import select

from herald.offers import importer
from herald.offers.models import Offer
from herald.offers.rules.scheduling import zulu
from herald.services import Services
from herald.workspaces import service as workspaces_service
from tests.factories import Tenant

OFFERS = "/v5/offers"
TEMPLATES = "/v5/offers/templates"
TAG_ID = "seasonal01"
TEMPLATE_ID = "banner"
TEMPLATE_FIELDS = ("headline", "image_url")


def offer_body(
    now: datetime,
    name: str = "Winter_Sale_20",
    *,
    starts_in: timedelta = timedelta(hours=1),
    runs_for: timedelta = timedelta(days=30),
    **overrides: Any,
) -> dict[str, Any]:
    """A valid O2 body: SMV with two variants in two locales, a 10% control group."""
    start = now + starts_in
    body: dict[str, Any] = {
        "name": name,
        "description": "Twenty percent off winter gear.",
        "priority": 10,
        "delivery": "scheduled",
        "created_by": "owner@example.com",
        "scheduling": {"start_datetime": zulu(start), "expiry_datetime": zulu(start + runs_for)},
        "segment_info": {
            "filters": {
                "included_filters": {
                    "filter_operator": "and",
                    "filters": [
                        {
                            "filter_type": "user_attributes",
                            "data_type": "string",
                            "name": "city",
                            "operator": "is",
                            "value": "Berlin",
                        }
                    ],
                }
            }
        },
        "offer_content": {
            "locales": {
                locale: {
                    "variations": {
                        variant: {"content_1": {"type": "json", "value": '{"discount": 20}'}}
                        for variant in ("A", "B")
                    }
                }
                for locale in ("en", "de")
            }
        },
        "variation_meta": {
            "type": "SMV",
            "variantsPerLocale": ["A", "B"],
            "smv_distribution": {"split": {"A": 50, "B": 50}},
            "control_group": {"is_enabled": True, "percentage": 10},
        },
    }
    body.update(copy.deepcopy(overrides))
    return body


def flat_body(now: datetime, name: str = "Flat_Offer_1", **overrides: Any) -> dict[str, Any]:
    """A valid O2 body with flat content and a single-variant DMV."""
    flat: dict[str, Any] = {
        "offer_content": {"content_1": {"type": "json", "value": "{}"}},
        "variation_meta": {"type": "DMV"},
    }
    return offer_body(now, name, **{**flat, **overrides})


async def create(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any], *, expect: int = 201
) -> dict[str, Any]:
    response = await client.post(OFFERS, json=body, headers=tenant.write_headers())
    assert response.status_code == expect, response.text
    data: dict[str, Any] = response.json()
    return data


async def create_id(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> str:
    return str((await create(client, tenant, body))["data"]["id"])


async def seed_catalog(app: FastAPI, tenant: Tenant) -> None:
    """The tag `seasonal01` and the template `banner` (fields headline, image_url)."""
    services: Services = app.state.herald
    now = services.clock.now()
    async with services.database.writer() as session:
        await workspaces_service.create_tag(session, now, tenant.workspace_id, "seasonal", TAG_ID)
        await workspaces_service.create_template(
            session, now, tenant.workspace_id, TEMPLATE_ID, "Banner", ["json"], list(TEMPLATE_FIELDS)
        )
        await session.commit()


def details(response: httpx.Response) -> set[tuple[str, str]]:
    """The (code, target) pairs of a VALIDATION_FAILED answer."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_FAILED", error
    return {(detail["code"], detail["target"]) for detail in error["details"]}


async def import_offers(app: FastAPI, tenant: Tenant, documents: list[dict[str, Any]]) -> list[str]:
    """Load offerings through the importer (drafts, archived, history); returns their public ids."""
    services: Services = app.state.herald
    async with services.database.writer() as session:
        result = await importer.import_lines(
            session, tenant.workspace_id, [orjson.dumps(doc) for doc in documents], services.clock.now()
        )
        assert result.ok, [error.describe() for error in result.errors]
        ids = await session.scalars(
            select(Offer.id).where(Offer.workspace_id == tenant.workspace_id).order_by(Offer.id.desc())
        )
        await session.commit()
    return [f"offer_{raw}" for raw in ids]
