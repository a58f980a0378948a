"""Conversion goals with revenue tracking (O2, O3, the importer): `revenue_amount` names the event
attribute that holds a conversion's value, beside an ISO 4217 `revenue_currency`."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update
from typer.testing import CliRunner

from herald.cli import app as cli
from herald.clock import FrozenClock
from herald.offers.models import Offer
from herald.services import Services
from tests.factories import Tenant
from tests.offers.builders import OFFERS, create_id, details, flat_body, import_offers

EDITOR = "editor@example.com"


def goal(name: str = "purchase", **fields: Any) -> dict[str, Any]:
    return {"goal_name": name, "action": "order_placed", **fields}


def tracked(amount: Any = "order_value", currency: Any = "EUR", **fields: Any) -> dict[str, Any]:
    return goal(is_revenue_tracking=True, revenue_amount=amount, revenue_currency=currency, **fields)


async def _document(app: FastAPI, offer_id: str) -> dict[str, Any]:
    services: Services = app.state.herald
    async with services.database.reader() as session:
        query = select(Offer.document).where(Offer.id == offer_id.removeprefix("offer_"))
        document: dict[str, Any] = (await session.scalars(query)).one()
    return document


async def _post(client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]) -> httpx.Response:
    return await client.post(OFFERS, json=body, headers=tenant.write_headers())


async def _patch(client: httpx.AsyncClient, tenant: Tenant, offer_id: str, body: Any) -> httpx.Response:
    return await client.patch(f"{OFFERS}/{offer_id}", json=body, headers=tenant.write_headers())


class TestCreate:
    async def test_tracked_goals_are_created_and_stored_as_sent(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        conversion = {
            "primary": tracked("order_value", "USD", attributes={"channel": "app"}),
            "secondary": [goal("add_to_cart"), tracked("basket_total", "JPY", name="checkout")],
        }
        offer_id = await create_id(client, tenant, flat_body(clock.now(), conversion=conversion))
        assert (await _document(app, offer_id))["conversion"] == conversion

    async def test_an_attribute_name_of_100_characters_is_accepted(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        body = flat_body(clock.now(), conversion={"primary": tracked("a" * 100)})
        assert (await _post(client, tenant, body)).status_code == 201

    @pytest.mark.parametrize(
        ("primary", "expected"),
        [
            (tracked(currency="usd"), {("INVALID_CURRENCY_CODE", "conversion.primary.revenue_currency")}),
            (tracked(currency="EURO"), {("INVALID_CURRENCY_CODE", "conversion.primary.revenue_currency")}),
            (
                goal(is_revenue_tracking=True, revenue_currency="EUR"),
                {("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.revenue_amount")},
            ),
            (
                goal(is_revenue_tracking=True, revenue_amount="order_value"),
                {("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.revenue_currency")},
            ),
            (
                goal(is_revenue_tracking=True),
                {
                    ("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.revenue_amount"),
                    ("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.revenue_currency"),
                },
            ),
            (tracked(""), {("OUT_OF_RANGE", "conversion.primary.revenue_amount")}),
            (tracked("a" * 101), {("OUT_OF_RANGE", "conversion.primary.revenue_amount")}),
            # A value where the attribute's name belongs.
            (tracked(49.99), {("INVALID_TYPE", "conversion.primary.revenue_amount")}),
            (
                goal(revenue_amount="order_value", revenue_currency="EUR"),
                {("REVENUE_FIELDS_INCOMPLETE", "conversion.primary.is_revenue_tracking")},
            ),
        ],
        ids=[
            "lower-case currency",
            "unknown currency",
            "no amount",
            "no currency",
            "neither",
            "empty name",
            "name too long",
            "number",
            "tracking off",
        ],
    )
    async def test_each_revenue_rule_over_http(
        self,
        client: httpx.AsyncClient,
        tenant: Tenant,
        clock: FrozenClock,
        primary: dict[str, Any],
        expected: set[tuple[str, str]],
    ) -> None:
        response = await _post(client, tenant, flat_body(clock.now(), conversion={"primary": primary}))
        assert details(response) == expected

    async def test_every_violation_of_every_goal_is_reported_together(
        self, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        conversion = {
            "primary": tracked("", "usd"),
            "secondary": [
                tracked("b" * 101, None),
                goal("refund", is_revenue_tracking=True),
                tracked("order_value", "XYZ"),
                tracked(),
            ],
        }
        response = await _post(client, tenant, flat_body(clock.now(), "x", conversion=conversion))
        assert details(response) == {
            ("INVALID_OFFER_NAME", "name"),
            ("OUT_OF_RANGE", "conversion.primary.revenue_amount"),
            ("INVALID_CURRENCY_CODE", "conversion.primary.revenue_currency"),
            ("OUT_OF_RANGE", "conversion.secondary.0.revenue_amount"),
            ("REVENUE_FIELDS_INCOMPLETE", "conversion.secondary.0.revenue_currency"),
            ("REVENUE_FIELDS_INCOMPLETE", "conversion.secondary.1.revenue_amount"),
            ("REVENUE_FIELDS_INCOMPLETE", "conversion.secondary.1.revenue_currency"),
            ("INVALID_CURRENCY_CODE", "conversion.secondary.2.revenue_currency"),
        }
        assert response.json()["error"]["message"] == "The request has 8 validation errors."


class TestUpdate:
    async def test_a_scheduled_offer_takes_tracked_goals(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        conversion = {"primary": tracked(), "secondary": [tracked("refund_value", "GBP", name="refund")]}
        response = await _patch(client, tenant, offer_id, {"updated_by": EDITOR, "conversion": conversion})
        assert response.status_code == 200, response.text
        assert (await _document(app, offer_id))["conversion"] == conversion

    async def test_bad_goals_are_all_reported_and_nothing_changes(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        offer_id = await create_id(client, tenant, flat_body(clock.now(), conversion={"primary": tracked()}))
        conversion = {"primary": tracked(currency="eur"), "secondary": [tracked(None, "EUR")]}
        response = await _patch(
            client, tenant, offer_id, {"updated_by": EDITOR, "priority": 0, "conversion": conversion}
        )
        assert details(response) == {
            ("OUT_OF_RANGE", "priority"),
            ("INVALID_CURRENCY_CODE", "conversion.primary.revenue_currency"),
            ("REVENUE_FIELDS_INCOMPLETE", "conversion.secondary.0.revenue_amount"),
        }
        assert (await _document(app, offer_id))["conversion"] == {"primary": tracked()}

    async def test_an_offer_stored_with_a_number_there_reads_back_and_updates(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant, clock: FrozenClock
    ) -> None:
        # Stored before revenue_amount was an attribute name, when the schema took a number.
        offer_id = await create_id(client, tenant, flat_body(clock.now()))
        old = {"primary": tracked(12), "secondary": [goal("view"), tracked(9.5, "USD")]}
        services: Services = app.state.herald
        async with services.database.writer() as session:
            document = {**await _document(app, offer_id), "conversion": old}
            raw_id = offer_id.removeprefix("offer_")
            await session.execute(update(Offer).where(Offer.id == raw_id).values(document=document))
            await session.commit()
        response = await _patch(client, tenant, offer_id, {"updated_by": EDITOR, "priority": 30})
        assert response.status_code == 200, response.text
        assert (await _document(app, offer_id))["conversion"] == {
            "primary": tracked("12"),
            "secondary": [goal("view"), tracked("9.5", "USD")],
        }


class TestImport:
    async def test_tracked_goals_import(self, app: FastAPI, tenant: Tenant, clock: FrozenClock) -> None:
        conversion = {"primary": tracked(), "secondary": [tracked("tip", "CHF")]}
        [offer_id] = await import_offers(app, tenant, [flat_body(clock.now(), conversion=conversion)])
        assert (await _document(app, offer_id))["conversion"] == conversion

    def test_the_command_reports_revenue_problems_by_line(
        self, tmp_path: Path, database_url: str, clock: FrozenClock
    ) -> None:
        workspace_id = f"W{secrets.token_hex(6).upper()}"
        env = {"HERALD_DATABASE_URL": database_url}
        created = CliRunner().invoke(cli, ["workspaces", "create", "revenue", "--id", workspace_id], env=env)
        assert created.exit_code == 0, created.output
        lines = [
            flat_body(clock.now(), "Revenue_Good", conversion={"primary": tracked()}),
            flat_body(clock.now(), "Revenue_Bad", conversion={"primary": tracked("", "usd")}),
        ]
        path = tmp_path / "offers.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        result = CliRunner().invoke(
            cli,
            ["offers", "import", str(path), "--workspace", workspace_id, "--workers", "1", "-q"],
            env=env,
        )
        assert result.exit_code == 1
        [reported] = [line for line in result.output.splitlines() if line.startswith("line ")]
        assert reported.startswith("line 2: ")
        assert "conversion.primary.revenue_amount: OUT_OF_RANGE" in reported
        assert "conversion.primary.revenue_currency: INVALID_CURRENCY_CODE" in reported
