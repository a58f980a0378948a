"""C4 DRAFT_PUBLISH: an Email campaign must name a connector configured in its workspace."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from herald.delivery.config import ConnectorInput
from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import CAMPAIGNS, EMAIL_CONTENT, create_campaign
from tests.factories import Tenant, add_connector

DRAFT = {
    "channel": "EMAIL",
    "campaign_delivery_type": "ONE_TIME",
    "created_by": "ana@example.com",
    "basic_details": {"name": "Receipts", "content_type": "TRANSACTIONAL"},
    "campaign_content": {"content": {"email": EMAIL_CONTENT}},
    "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "receipts-smtp"},
    "segmentation_details": {"is_all_user_campaign": True},
    "scheduling_details": {"delivery_type": "ASAP"},
}


async def _validate(client: httpx.AsyncClient, tenant: Tenant, campaign_id: str) -> dict[str, object]:
    response = await client.post(
        f"{CAMPAIGNS}/{campaign_id}/validate", headers=tenant.headers(campaigns=True)
    )
    assert response.status_code == 200
    data: dict[str, object] = response.json()["data"]
    return data


async def test_unconfigured_connector_is_invalid_until_it_is_added(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, other_tenant: Tenant
) -> None:
    campaign_id = await create_campaign(client, workspace, DRAFT)
    assert await _validate(client, workspace, campaign_id) == {
        "valid": False,
        "errors": [
            {
                "field": "connector.connector_name",
                "issue": "No connector named 'receipts-smtp' is configured in this workspace.",
                "code": "INVALID_ENUM_VALUE",
            }
        ],
    }
    # Another workspace's connector of that name does not count.
    await add_connector(
        app, other_tenant, ConnectorInput("receipts-smtp", "CUSTOM_SMTP", host="smtp.example.com")
    )
    assert (await _validate(client, workspace, campaign_id))["valid"] is False
    # Nor does a push connector of that name, which the error then names for what it is.
    push = ConnectorInput("receipts-smtp", "CUSTOM_API", channel="push", url="https://push.example.com/in")
    await add_connector(app, workspace, push)
    assert (await _validate(client, workspace, campaign_id))["errors"] == [
        {
            "field": "connector.connector_name",
            "issue": "Connector 'receipts-smtp' carries push messages, not e-mail.",
            "code": "INVALID_ENUM_VALUE",
        }
    ]


async def test_configured_connector_is_valid(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
) -> None:
    await add_connector(
        app, workspace, ConnectorInput("receipts-smtp", "CUSTOM_SMTP", host="smtp.example.com")
    )
    campaign_id = await create_campaign(client, workspace, DRAFT)
    assert await _validate(client, workspace, campaign_id) == {"valid": True, "errors": []}


async def test_a_connector_of_another_type_is_invalid_and_cannot_be_published(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
) -> None:
    # The draft asks for SMTP; the workspace's e-mail connector of that name is a webhook. The test
    # send (C8) refuses it, and so do validate and publish: the engine would not send through it.
    webhook = ConnectorInput("receipts-smtp", "CUSTOM_API", url="https://mail-api.example.com/in")
    await add_connector(app, workspace, webhook)
    campaign_id = await create_campaign(client, workspace, DRAFT)
    problem = {
        "field": "connector.connector_type",
        "issue": "Connector 'receipts-smtp' is of type CUSTOM_API, not CUSTOM_SMTP.",
        "code": "INVALID_ENUM_VALUE",
    }
    assert await _validate(client, workspace, campaign_id) == {"valid": False, "errors": [problem]}
    refused = await h.v1_patch(client, workspace, campaign_id)
    assert refused.status_code == 422, refused.text
    assert [(d["code"], d["target"]) for d in refused.json()["error"]["details"]] == [
        ("INVALID_ENUM_VALUE", "connector.connector_type")
    ]
    assert (await h.get(client, workspace, campaign_id))["status"] == "DRAFT"


def _localized(
    from_addresses: dict[tuple[str, str], str], default: str = "news@shop.example"
) -> dict[str, object]:
    """DRAFT with a default and an es-ES locale of two variations each, every message from
    `from_addresses[(locale, variation)]` (else `default`)."""
    content = {
        locale: {
            variation: {
                "email": {
                    **EMAIL_CONTENT,
                    "from_address": from_addresses.get((locale, variation), default),
                }
            }
            for variation in ("variation_1", "variation_2")
        }
        for locale in ("default", "es-ES")
    }
    split = {
        "distribution_type": "MANUAL",
        "no_of_variations": 2,
        "manual_distribution_percentage": {"variation_1": 50, "variation_2": 50},
    }
    return {
        **DRAFT,
        "campaign_content": {"locales": ["es-ES"], "variation_details": split, "content": content},
    }


SENDERS = ("news@shop.example", "@brand.example")


async def test_every_from_address_must_be_a_verified_sender_to_validate_and_publish(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
) -> None:
    smtp = ConnectorInput("receipts-smtp", "CUSTOM_SMTP", host="smtp.example.com", senders=SENDERS)
    await add_connector(app, workspace, smtp)
    draft = _localized({("es-ES", "variation_2"): "promo@elsewhere.example"})
    campaign_id = await create_campaign(client, workspace, draft)
    problem = {
        "field": "campaign_content.content.es-ES.variation_2.email.from_address",
        "issue": "'promo@elsewhere.example' is not a verified sender of the connector"
        " (news@shop.example, @brand.example).",
        "code": "INVALID_ENUM_VALUE",
    }
    assert await _validate(client, workspace, campaign_id) == {"valid": False, "errors": [problem]}
    refused = await h.v1_patch(client, workspace, campaign_id)
    assert refused.status_code == 422, refused.text
    assert [(d["code"], d["target"]) for d in refused.json()["error"]["details"]] == [
        ("INVALID_ENUM_VALUE", "campaign_content.content.es-ES.variation_2.email.from_address")
    ]
    assert (await h.get(client, workspace, campaign_id))["status"] == "DRAFT"


async def test_listed_senders_and_addresses_at_a_listed_domain_publish(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
) -> None:
    smtp = ConnectorInput("receipts-smtp", "CUSTOM_SMTP", host="smtp.example.com", senders=SENDERS)
    await add_connector(app, workspace, smtp)
    draft = _localized({("es-ES", "variation_1"): "Hola@Brand.example"})
    campaign_id = await create_campaign(client, workspace, draft)
    assert await _validate(client, workspace, campaign_id) == {"valid": True, "errors": []}
    await h.publish(client, workspace, campaign_id)


async def test_a_sandbox_sends_from_localhost_and_test_domains_as_its_users_have(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant
) -> None:
    # A from_address is held to the rule of the addresses Herald sends to: `localhost` and
    # `.test` domains were refused there while users, cc and reply-to addresses there were not.
    smtp = ConnectorInput("receipts-smtp", "CUSTOM_SMTP", host="smtp.example.com", senders=("@probe.test",))
    await add_connector(app, workspace, smtp)
    campaign_id = await create_campaign(client, workspace, _localized({}, default="news@probe.test"))
    assert await _validate(client, workspace, campaign_id) == {"valid": True, "errors": []}
    await h.publish(client, workspace, campaign_id)
