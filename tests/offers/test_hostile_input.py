"""No input makes the offers surface answer 500: every field gets every kind of wrong value."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from herald.clock import FrozenClock
from herald.offers.requests import OfferFields
from tests.factories import Tenant
from tests.offers.builders import OFFERS, create_id, flat_body, offer_body

NASTY: list[Any] = [
    None,
    True,
    -1,
    2**63,
    1.5,
    "",
    "x" * 5000,
    [],
    [None, {}],
    {},
    {"filters": {"included_filters": {"filter_operator": "and", "filters": [{"filter_type": "actions"}]}}},
    {"content_1": {"type": "template", "value": {"a": 1}, "meta": {"templateId": 7}}},
    {"locales": {"en": {"variations": {"A": {"content_1": {"type": "json", "value": "1"}}}}}, "content_1": 1},
    {"type": "SMV", "smv_distribution": {"split": {"": 100}}, "control_group": {"is_enabled": "yes"}},
    {"primary": {"goal_name": "g", "action": "a", "revenue_amount": -5, "revenue_currency": 3}},
]
FIELDS = sorted(OfferFields.model_fields)
RAW_BODIES = [
    b"NaN",
    b'{"name": NaN}',
    b'{"priority": Infinity}',
    b'{"offer_content": {"content_1": {"type": "json", "value": -Infinity}}}',
    b'{"offering_attribute_configuration": [{"weight": NaN}]}',
    b'{"updated_by": "e@example.com", "offering_attribute_configuration": [{"weight": -Infinity}]}',
    b'{"priority": 1' + b"0" * 5000 + b"}",
]


def _headers(tenant: Tenant) -> dict[str, str]:
    return {**tenant.write_headers(), "Content-Type": "application/json"}


@pytest.mark.parametrize("field", FIELDS)
async def test_create_never_fails_with_500(
    client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, field: str
) -> None:
    for value in NASTY:
        response = await client.post(
            OFFERS, json=offer_body(clock.now(), **{field: value}), headers=tenant.write_headers()
        )
        assert response.status_code in (201, 400), (field, value, response.text)


@pytest.mark.parametrize("field", FIELDS)
async def test_update_never_fails_with_500(
    client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, field: str
) -> None:
    offer_id = await create_id(client, tenant, flat_body(clock.now()))
    for value in NASTY:
        body = {"updated_by": "e@example.com", field: value}
        response = await client.patch(f"{OFFERS}/{offer_id}", json=body, headers=tenant.write_headers())
        assert response.status_code in (200, 400), (field, value, response.text)


@pytest.mark.parametrize("raw", RAW_BODIES)
async def test_non_finite_and_oversized_numbers_are_400(
    client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock, raw: bytes
) -> None:
    offer_id = await create_id(client, tenant, flat_body(clock.now()))
    for method, url in (
        ("POST", OFFERS),
        ("PATCH", f"{OFFERS}/{offer_id}"),
        ("POST", f"{OFFERS}/{offer_id}/archive"),
    ):
        response = await client.request(method, url, content=raw, headers=_headers(tenant))
        assert response.status_code == 400, (method, raw[:40], response.text)
