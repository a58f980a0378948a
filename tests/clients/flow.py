"""A client's first session with Herald, written against the Python client generated from its
`/openapi.json` (openapi-python-client, default config) and type-checked with `mypy --strict`.

Run by `test_generated_clients.py` against a served Herald: HERALD_URL, HERALD_WORKSPACE, HERALD_SECRET,
HERALD_CONNECTOR (a CUSTOM_SMTP connector of the workspace) and HERALD_RECIPIENT (an e-mail address of a
user of the workspace, whose first name is HERALD_FIRST_NAME). Exits non-zero at the first surprise.
"""

from __future__ import annotations

import base64
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from herald_offer_listing_and_campaign_draft_api_client import AuthenticatedClient
from herald_offer_listing_and_campaign_draft_api_client.api.campaigns import (
    create_campaign,
    get_campaign,
    get_campaign_meta,
    search_campaigns,
    test_campaign,
    update_campaign,
    validate_campaign,
)
from herald_offer_listing_and_campaign_draft_api_client.api.offers import create_offer, list_offers
from herald_offer_listing_and_campaign_draft_api_client.api.personalization import preview_personalization
from herald_offer_listing_and_campaign_draft_api_client.models import (
    CampaignCreatedResponse,
    CampaignMetaResponse,
    CampaignResponse,
    CampaignSearchResponse,
    CampaignTestDoc,
    CampaignTestResponse,
    CampaignUpdatedResponse,
    CampaignValidationResponse,
    EmailCampaignCreate,
    EmailCampaignUpdate,
    EmailCampaignView,
    EmailPreview,
    GetCampaignMetaMetaBody,
    OfferCreate,
    OfferCreatedResponse,
    OfferListResponse,
    PreviewResponse,
    SearchCampaignsSearchBody,
)
from herald_offer_listing_and_campaign_draft_api_client.types import Unset

URL = os.environ["HERALD_URL"]
WORKSPACE = os.environ["HERALD_WORKSPACE"]
CONNECTOR = os.environ["HERALD_CONNECTOR"]
RECIPIENT = os.environ["HERALD_RECIPIENT"]
FIRST_NAME = os.environ["HERALD_FIRST_NAME"]
CREATOR = "flow@example.com"


def key() -> str:
    return str(uuid.uuid4())


T = TypeVar("T")


def expect(answer: object, kind: type[T]) -> T:
    """The typed success answer, or stop with what came instead (an error envelope, a gateway body)."""
    if not isinstance(answer, kind):
        raise SystemExit(f"expected {kind.__name__}, got {answer!r}")
    return answer


def offer_body(name: str) -> OfferCreate:
    start = datetime.now(UTC) + timedelta(days=1)
    return OfferCreate.from_dict(
        {
            "name": name,
            "priority": 10,
            "delivery": "scheduled",
            "created_by": CREATOR,
            "scheduling": {
                "start_datetime": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "expiry_datetime": (start + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "segment_info": {"filters": {}},
            "offer_content": {"content_1": {"type": "json", "value": '{"headline": "Spring"}'}},
            "variation_meta": {
                "type": "SMV",
                "variantsPerLocale": ["variant_1"],
                "smv_distribution": {"split": {"variant_1": 100}},
            },
        }
    )


def offers(client: AuthenticatedClient) -> None:
    created = set()
    for index in range(3):
        answer = create_offer.sync(
            client=client, body=offer_body(f"flow_offer_{index}"), idempotency_key=key()
        )
        created.add(expect(answer, OfferCreatedResponse).data.id)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = expect(list_offers.sync(client=client, limit=1, cursor=cursor or Unset()), OfferListResponse)
        seen += [item.id for item in page.data if isinstance(item.id, str)]
        next_cursor = page.pagination.next_cursor
        if not page.pagination.has_more or not isinstance(next_cursor, str):
            break
        cursor = next_cursor
    assert created <= set(seen), (created, seen)
    assert len(seen) == len(set(seen)), "a cursor walk saw an offering twice"


def campaigns(client: AuthenticatedClient) -> str:
    draft = EmailCampaignCreate.from_dict(
        {
            "channel": "EMAIL",
            "campaign_delivery_type": "ONE_TIME",
            "created_by": CREATOR,
            "request_id": key(),
            "basic_details": {"name": "Flow spring sale", "content_type": "PROMOTIONAL"},
        }
    )
    created = create_campaign.sync(client=client, body=draft, idempotency_key=key(), svc_appkey=WORKSPACE)
    campaign_id = expect(created, CampaignCreatedResponse).data.id
    patch = EmailCampaignUpdate.from_dict(
        {
            "campaign_content": {
                "content": {
                    "email": {
                        "subject": "Spring sale",
                        "sender_name": "Shop",
                        "from_address": "news@shop.example",
                        "html_content": "<p>Hello {{UserAttribute['first_name']}}</p>",
                    }
                }
            },
            "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": CONNECTOR},
        }
    )
    updated = update_campaign.sync(
        campaign_id, client=client, body=patch, idempotency_key=key(), svc_appkey=WORKSPACE
    )
    assert expect(updated, CampaignUpdatedResponse).data.id == campaign_id

    stored = expect(
        get_campaign.sync(campaign_id, client=client, svc_appkey=WORKSPACE), CampaignResponse
    ).data
    assert isinstance(stored, EmailCampaignView), stored
    assert stored.campaign_id == campaign_id

    validation = validate_campaign.sync(campaign_id, client=client, svc_appkey=WORKSPACE)
    outcome = expect(validation, CampaignValidationResponse).data
    assert outcome.valid is (not outcome.errors)

    search_body = SearchCampaignsSearchBody.from_dict(
        {"limit": 15, "page": 1, "campaign_fields": {"ids": [campaign_id], "status": ["DRAFT"]}}
    )
    found = search_campaigns.sync(
        client=client, body=search_body, idempotency_key=key(), svc_appkey=WORKSPACE
    )
    rows = expect(found, CampaignSearchResponse).data.campaigns
    assert [row.campaign_id for row in rows] == [campaign_id], rows

    meta_body = GetCampaignMetaMetaBody.from_dict(
        {"limit": 15, "page": 1, "campaign_fields": {"id": campaign_id, "status": ["DRAFT"]}}
    )
    meta = get_campaign_meta.sync(client=client, body=meta_body, idempotency_key=key(), svc_appkey=WORKSPACE)
    [row] = expect(meta, CampaignMetaResponse).data.campaigns
    assert row.campaign_id == campaign_id

    test_body = CampaignTestDoc.from_dict(
        {
            "draft_id": campaign_id,
            "test_campaign_meta": {"identifier": "EMAIL", "identifier_values": [RECIPIENT]},
        }
    )
    sent = expect(
        test_campaign.sync(client=client, body=test_body, idempotency_key=key(), svc_appkey=WORKSPACE),
        CampaignTestResponse,
    )
    statuses = {name: result.status for name, result in sent.data.data.additional_properties.items()}
    assert statuses == {"EMAIL_default_variation_1": "SENT"}, statuses
    return campaign_id


def preview(client: AuthenticatedClient) -> None:
    body = EmailPreview.from_dict(
        {
            "request_id": key(),
            "channel": "EMAIL",
            "user_identification": {"type": "EMAIL", "value": RECIPIENT},
            "campaign_content": {
                "content": {
                    "email": {"subject": "Hi {{UserAttribute['first_name']}}", "html_content": "<p>Hello</p>"}
                }
            },
        }
    )
    answer = preview_personalization.sync(client=client, body=body, svc_appkey=WORKSPACE)
    rendered = expect(answer, PreviewResponse).data.personalized_content.to_dict()
    assert rendered["content"]["email"]["subject"] == f"Hi {FIRST_NAME}", rendered


def main() -> None:
    credentials = base64.b64encode(f"{WORKSPACE}:{os.environ['HERALD_SECRET']}".encode()).decode()
    client = AuthenticatedClient(
        base_url=URL, token=credentials, prefix="Basic", raise_on_unexpected_status=True
    )
    with client:
        offers(client)
        campaigns(client)
        preview(client)
    print(
        "flow: offers walked, campaign drafted, patched, validated, found, summarized, test-sent, previewed"
    )


if __name__ == "__main__":
    main()
