"""The realistic payloads parse, pass every stage, and round-trip losslessly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from herald.campaigns.schemas.campaign import COMPONENT_NAMES, CampaignDocument, sent_components
from herald.campaigns.validation import Stage, load_document, parse_create, parse_update, validate_campaign

from .payloads import ALL_FEATURES, CONNECTORS, PAYLOADS, problems

NAMES = sorted(PAYLOADS)


@pytest.mark.parametrize("name", NAMES)
def test_payload_parses(name: str) -> None:
    body, found = parse_create(PAYLOADS[name])
    assert found == []
    assert body is not None


@pytest.mark.parametrize("stage", list(Stage))
@pytest.mark.parametrize("name", NAMES)
def test_payload_passes_every_stage(name: str, stage: Stage) -> None:
    assert problems(PAYLOADS[name], stage) == []


@pytest.mark.parametrize("name", NAMES)
def test_payload_round_trips_losslessly(name: str) -> None:
    raw = PAYLOADS[name]
    body, _ = parse_create(raw)
    assert body is not None
    dumped = body.model_dump(mode="json", exclude_unset=True)
    assert dumped == raw
    # Same JSON text too: 1 stays 1 and 0.5 stays 0.5.
    assert json.dumps(dumped, sort_keys=True) == json.dumps(raw, sort_keys=True)
    for component in COMPONENT_NAMES:
        value = getattr(body, component, None)
        if value is not None:
            assert value.model_dump(mode="json", exclude_unset=True) == raw[component]


@pytest.mark.parametrize("name", NAMES)
def test_payload_survives_storage_and_patch(name: str) -> None:
    raw = PAYLOADS[name]
    body, _ = parse_create(raw)
    assert body is not None
    created = CampaignDocument.from_create(body)
    stored: dict[str, Any] = created.components_json()
    assert stored == {key: raw[key] for key in COMPONENT_NAMES if key in raw}

    loaded, found = load_document(created.channel, created.delivery_type, stored)
    assert found == []
    assert loaded is not None
    assert loaded.components_json() == stored

    # Re-sending every component as a PATCH on an empty draft yields the same campaign.
    update, found = parse_update(
        stored, stored_channel=created.channel, stored_delivery_type=created.delivery_type
    )
    assert found == []
    assert update is not None
    empty = CampaignDocument(channel=created.channel, delivery_type=created.delivery_type)
    merged = empty.merged(update)
    assert merged.components_json() == stored
    assert (
        validate_campaign(merged, Stage.DRAFT_PATCH, ALL_FEATURES, sent_components(update), previous=empty)
        == []
    )
    assert (
        validate_campaign(merged, Stage.DRAFT_PUBLISH, ALL_FEATURES, configured_connectors=CONNECTORS) == []
    )
