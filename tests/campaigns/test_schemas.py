"""Parsing campaign bodies: models per channel, strict scalars, open shapes, and error translation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from herald.campaigns.schemas.advanced import InterruptionLevel
from herald.campaigns.schemas.campaign import (
    CampaignCreateBody,
    CampaignDocument,
    CampaignUpdateBody,
    EmailCampaignCreate,
    PushCampaignCreate,
    sent_components,
)
from herald.campaigns.schemas.common import Channel, DeliveryType, resolve_datetime
from herald.campaigns.schemas.trigger import TriggerCondition
from herald.campaigns.validation import load_document, parse_create, parse_update

from .payloads import (
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_LOCATION_TRIGGERED,
    PUSH_MULTI_LOCALE_AB,
    PUSH_ONE_TIME,
    codes,
    variant,
)

MINIMAL_PUSH = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}
MINIMAL_EMAIL = {"channel": "EMAIL", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}
_FILTER = "segmentation_details.included_filters.filters.0"


def parse_codes(raw: Any) -> set[tuple[str, str]]:
    body, found = parse_create(raw)
    assert (body is None) == bool(found)
    return codes(found)


# ---- create bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([1, 2], ("INVALID_TYPE", "")),
        (
            {"campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"},
            ("REQUIRED_FIELD_MISSING", "channel"),
        ),
        ({**MINIMAL_PUSH, "channel": "SMS"}, ("INVALID_ENUM_VALUE", "channel")),
        ({**MINIMAL_PUSH, "channel": "push"}, ("INVALID_ENUM_VALUE", "channel")),
        ({**MINIMAL_PUSH, "channel": 3}, ("INVALID_ENUM_VALUE", "channel")),
        (
            {**MINIMAL_PUSH, "campaign_delivery_type": "SOMETIMES"},
            ("INVALID_ENUM_VALUE", "campaign_delivery_type"),
        ),
        (variant(MINIMAL_PUSH, drop=("created_by",)), ("REQUIRED_FIELD_MISSING", "created_by")),
        ({**MINIMAL_PUSH, "created_by": "not-an-email"}, ("INVALID_TYPE", "created_by")),
        ({**MINIMAL_PUSH, "updated_by": "a@example.com"}, ("UNKNOWN_FIELD", "updated_by")),
        ({**MINIMAL_PUSH, "colour": "red"}, ("UNKNOWN_FIELD", "colour")),
        ({**MINIMAL_PUSH, "request_id": ""}, ("OUT_OF_RANGE", "request_id")),
        ({**MINIMAL_EMAIL, "advanced": {}}, ("UNKNOWN_FIELD", "advanced")),
        (
            {**MINIMAL_PUSH, "connector": {"connector_type": "CUSTOM_SMTP", "connector_name": "x"}},
            ("UNKNOWN_FIELD", "connector"),
        ),
        (
            {**MINIMAL_EMAIL, "basic_details": {"platforms": "ANDROID", "content_type": "ADS"}},
            ("INVALID_ENUM_VALUE", "basic_details.content_type"),
        ),
        (
            {**MINIMAL_EMAIL, "delivery_controls": {"send_limit_value": "2"}},
            ("UNKNOWN_FIELD", "delivery_controls.send_limit_value"),
        ),
        # a channel that cannot be created still has its other problems reported
        (
            {"channel": "SMS", "campaign_delivery_type": "ONE_TIME", "created_by": "x"},
            ("INVALID_TYPE", "created_by"),
        ),
    ],
)
def test_create_body_problems(raw: Any, expected: tuple[str, str]) -> None:
    assert expected in parse_codes(raw)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # strict scalars: what is stored is what was sent
        (
            "delivery_controls.campaign_throttle_rpm",
            "5000",
            ("INVALID_TYPE", "delivery_controls.campaign_throttle_rpm"),
        ),
        ("delivery_controls.bypass_dnd", 1, ("INVALID_TYPE", "delivery_controls.bypass_dnd")),
        (
            "delivery_controls.campaign_throttle_rpm",
            True,
            ("INVALID_TYPE", "delivery_controls.campaign_throttle_rpm"),
        ),
        (
            "delivery_controls.campaign_throttle_rpm",
            0,
            ("OUT_OF_RANGE", "delivery_controls.campaign_throttle_rpm"),
        ),
        (
            "basic_details.platforms",
            ["ANDROID", "BLACKBERRY"],
            ("INVALID_ENUM_VALUE", "basic_details.platforms.1"),
        ),
        ("basic_details.name", 7, ("INVALID_TYPE", "basic_details.name")),
        (f"{_FILTER}.colour", "red", ("UNKNOWN_FIELD", f"{_FILTER}.colour")),
        (f"{_FILTER}.data_type", "STRING", ("INVALID_ENUM_VALUE", f"{_FILTER}.data_type")),
        (f"{_FILTER}.operator", "like", ("INVALID_ENUM_VALUE", f"{_FILTER}.operator")),
        (f"{_FILTER}.filter_type", "events", ("INVALID_ENUM_VALUE", f"{_FILTER}.filter_type")),
        (
            "segmentation_details.included_filters.filter_operator",
            "AND",
            ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filter_operator"),
        ),
        (
            "segmentation_details.included_filters.filters.1.execution.type",
            "atLeast",
            ("INVALID_ENUM_VALUE", "segmentation_details.included_filters.filters.1.execution.type"),
        ),
        (
            "segmentation_details.included_filters.filters.1.attributes.filters.0.name",
            "",
            ("OUT_OF_RANGE", "segmentation_details.included_filters.filters.1.attributes.filters.0.name"),
        ),
        (
            "segmentation_details.excluded_filters.filters.0",
            {"filter_type": "custom_segments", "name": "x"},
            ("REQUIRED_FIELD_MISSING", "segmentation_details.excluded_filters.filters.0.id"),
        ),
        (
            "campaign_content.content.push.android.basic_details.title",
            ["x"],
            ("INVALID_TYPE", "campaign_content.content.push.android.basic_details.title"),
        ),
        (
            "campaign_content.content.push.android.buttons",
            "x",
            ("INVALID_TYPE", "campaign_content.content.push.android.buttons"),
        ),
        (
            "campaign_content.content.push.windows",
            {},
            ("UNKNOWN_FIELD", "campaign_content.content.push.windows"),
        ),
        ("campaign_content.content.email", {}, ("UNKNOWN_FIELD", "campaign_content.content.email")),
        ("campaign_content.flavour", 1, ("UNKNOWN_FIELD", "campaign_content.flavour")),
        (
            "conversion_goal_details.goals.0.goal_event_attribute.data_type",
            "string",
            ("INVALID_ENUM_VALUE", "conversion_goal_details.goals.0.goal_event_attribute.data_type"),
        ),
        (
            "conversion_goal_details.goals.1",
            {"goal_event_name": "x"},
            ("REQUIRED_FIELD_MISSING", "conversion_goal_details.goals.1.goal_name"),
        ),
        ("scheduling_details.start_time", 1700000000, ("INVALID_TYPE", "scheduling_details.start_time")),
    ],
)
def test_component_shape_problems(path: str, value: Any, expected: tuple[str, str]) -> None:
    assert expected in parse_codes(variant(PUSH_ONE_TIME, {path: value}))


@pytest.mark.parametrize("radius", ["\u0662\u0660\u0660", "200\n", "2e3", " 200"])
def test_numbers_written_as_strings_are_ascii_digits_only(radius: str) -> None:
    # `float` reads Arabic-Indic digits and a trailing newline; the field takes "200" only.
    path = "basic_details.geofences.0.radius"
    assert ("INVALID_TYPE", path) in parse_codes(variant(PUSH_LOCATION_TRIGGERED, {path: radius}))


def test_keyed_content_paths_carry_no_union_tags() -> None:
    raw = variant(
        PUSH_MULTI_LOCALE_AB,
        {"campaign_content.content.es-ES.variation_2.push.android.template_type": "CAROUSEL"},
    )
    assert parse_codes(raw) == {
        ("INVALID_ENUM_VALUE", "campaign_content.content.es-ES.variation_2.push.android.template_type")
    }
    flat = variant(PUSH_ONE_TIME, {"campaign_content.content.push.ios.template_type": "TIMER"})
    assert parse_codes(flat) == {("INVALID_ENUM_VALUE", "campaign_content.content.push.ios.template_type")}


def test_content_keyed_form_needs_channel_objects() -> None:
    raw = variant(PUSH_MULTI_LOCALE_AB, {"campaign_content.content.default.variation_1": {"sms": {}}})
    assert parse_codes(raw) == {
        ("REQUIRED_FIELD_MISSING", "campaign_content.content.default.variation_1.push"),
        ("UNKNOWN_FIELD", "campaign_content.content.default.variation_1.sms"),
    }


def test_content_is_required_in_campaign_content() -> None:
    assert parse_codes({**MINIMAL_PUSH, "campaign_content": {"locales": []}}) == {
        ("REQUIRED_FIELD_MISSING", "campaign_content.content")
    }


def test_open_shapes_keep_unknown_keys_verbatim() -> None:
    raw = variant(
        EMAIL_ONE_TIME_PROMOTIONAL,
        {
            "basic_details.audience_note": {"any": ["shape", 1, None]},
            "campaign_content.content.email.dynamic_blocks": [{"id": 1}],
        },
    )
    body, found = parse_create(raw)
    assert found == []
    assert body is not None
    assert body.model_dump(mode="json", exclude_unset=True) == raw


def test_channel_chooses_the_models() -> None:
    push, _ = parse_create(PUSH_ONE_TIME)
    email, _ = parse_create(EMAIL_EVENT_TRIGGERED)
    assert isinstance(push, PushCampaignCreate)
    assert isinstance(email, EmailCampaignCreate)


@pytest.mark.parametrize(
    ("channel", "message"),
    [
        (None, "channel must be PUSH or EMAIL, not null."),
        (7, "channel must be PUSH or EMAIL, not a number."),
        ("SMS", "channel must be PUSH or EMAIL; 'SMS' campaigns cannot be created or updated through v5."),
    ],
)
def test_a_channel_that_is_not_push_or_email_is_named_as_sent(channel: object, message: str) -> None:
    _, found = parse_create({**PUSH_ONE_TIME, "channel": channel})
    assert [(p.code, p.target, p.message) for p in found if p.target == "channel"] == [
        ("INVALID_ENUM_VALUE", "channel", message)
    ]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("Time sensitive", True),
        ("TIME_SENSITIVE", True),
        ("Passive", True),
        ("PASSIVE", True),
        ("Critical", True),
        ("CRITICAL", True),
        ("Active", True),
        ("ACTIVE", True),
        ("time sensitive", False),
        ("URGENT", False),
    ],
)
def test_interruption_level_forms(value: str, ok: bool) -> None:
    raw = variant(
        PUSH_ONE_TIME, {"advanced.platform_level_priority.ios_specific_priority.interruption_level": value}
    )
    target = "advanced.platform_level_priority.ios_specific_priority.interruption_level"
    assert parse_codes(raw) == (set() if ok else {("INVALID_ENUM_VALUE", target)})


def test_interruption_level_canonical_spelling() -> None:
    assert InterruptionLevel("TIME_SENSITIVE").canonical is InterruptionLevel.TIME_SENSITIVE
    assert InterruptionLevel("Passive").canonical is InterruptionLevel.PASSIVE


@pytest.mark.parametrize(
    ("value", "name"),
    [({"name": "renewal_date"}, "renewal_date"), ("renewal_date", "renewal_date"), ({}, None)],
)
def test_trigger_attr_object_or_label(value: Any, name: str | None) -> None:
    trigger = TriggerCondition.model_validate({"trigger_attr": value})
    assert trigger.trigger_attr_name() == name
    assert trigger.model_dump(mode="json", exclude_unset=True) == {"trigger_attr": value}


def test_trigger_attr_bad_shape_has_a_clean_path() -> None:
    raw = variant(PUSH_ONE_TIME, {"trigger_condition": {"trigger_attr": {"name": 5}}})
    assert parse_codes(raw) == {("INVALID_TYPE", "trigger_condition.trigger_attr.name")}


def test_geofences_as_single_object_round_trips() -> None:
    fence = PUSH_LOCATION_TRIGGERED["basic_details"]["geofences"][1]
    raw = variant(PUSH_LOCATION_TRIGGERED, {"basic_details.geofences": fence})
    body, found = parse_create(raw)
    assert found == []
    assert body is not None
    assert body.model_dump(mode="json", exclude_unset=True) == raw


def test_openapi_schemas_build() -> None:
    for body in (CampaignCreateBody, CampaignUpdateBody):
        schema = TypeAdapter(body).json_schema()
        assert "PushCampaignCreate" in str(schema) or "PushCampaignUpdate" in str(schema)


# ---- update bodies and documents --------------------------------------------------------------


def test_update_reads_components_by_the_stored_channel() -> None:
    raw = {"updated_by": "b@example.com", "advanced": {}}
    body, found = parse_update(raw, stored_channel=Channel.PUSH)
    assert found == []
    assert body is not None
    assert sent_components(body) == {"advanced"}
    _, found = parse_update(raw, stored_channel=Channel.EMAIL)
    assert codes(found) == {("UNKNOWN_FIELD", "advanced")}


@pytest.mark.parametrize(
    ("raw", "kwargs", "expected"),
    [
        ({"channel": "EMAIL"}, {"stored_channel": Channel.PUSH}, ("INVALID_ENUM_VALUE", "channel")),
        ({"channel": "SMS"}, {}, ("INVALID_ENUM_VALUE", "channel")),
        ({"channel": None, "utm_params": {"utm_source": 1}}, {}, ("INVALID_TYPE", "utm_params.utm_source")),
        (
            {"campaign_delivery_type": "PERIODIC"},
            {"stored_channel": Channel.PUSH, "stored_delivery_type": DeliveryType.ONE_TIME},
            ("INVALID_ENUM_VALUE", "campaign_delivery_type"),
        ),
        ({"basic_details": {}}, {}, ("REQUIRED_FIELD_MISSING", "channel")),
        ({"utm_params": {}}, {"stored_channel": Channel.SMS}, ("INVALID_ENUM_VALUE", "channel")),
        ({"created_by": "a@example.com"}, {"stored_channel": Channel.PUSH}, ("UNKNOWN_FIELD", "created_by")),
        ({"updated_by": "nobody"}, {"stored_channel": Channel.EMAIL}, ("INVALID_TYPE", "updated_by")),
        ("[]", {}, ("INVALID_TYPE", "")),
        ({"request_id": "r-1"}, {}, ("REQUIRED_FIELD_MISSING", "channel")),
    ],
)
def test_update_body_problems(raw: Any, kwargs: dict[str, Any], expected: tuple[str, str]) -> None:
    body, found = parse_update(raw, **kwargs)
    assert body is None
    assert expected in codes(found)


@pytest.mark.parametrize(
    ("raw", "kwargs"),
    [
        ({"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "updated_by": "b@example.com"}, {}),
        (
            {"channel": "PUSH"},
            {"stored_channel": Channel.PUSH, "stored_delivery_type": DeliveryType.ONE_TIME},
        ),
        ({"utm_params": None}, {"stored_channel": Channel.EMAIL}),
        ({"request_id": "r-1"}, {"stored_channel": Channel.PUSH}),
    ],
)
def test_update_body_accepted(raw: dict[str, Any], kwargs: dict[str, Any]) -> None:
    body, found = parse_update(raw, **kwargs)
    assert found == []
    assert body is not None


def test_update_replaces_and_clears_components() -> None:
    created, _ = parse_create(PUSH_ONE_TIME)
    assert created is not None
    stored = CampaignDocument.from_create(created)
    update, _ = parse_update(
        {"utm_params": None, "control_group_details": {"is_campaign_control_group_enabled": False}},
        stored_channel=Channel.PUSH,
    )
    assert update is not None
    merged = stored.merged(update)
    assert merged.utm_params is None
    assert merged.control_group_details is not None
    assert merged.control_group_details.campaign_control_group_percentage is None
    assert merged.segmentation_details == stored.segmentation_details


def test_load_document_reports_bad_stored_data() -> None:
    document, found = load_document(Channel.EMAIL, DeliveryType.ONE_TIME, {"advanced": {}})
    assert document is None
    assert codes(found) == {("UNKNOWN_FIELD", "advanced")}


# ---- date-times --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "timezone", "expected"),
    [
        ("2030-01-01T10:00:00Z", None, datetime(2030, 1, 1, 10, tzinfo=UTC)),
        ("2030-01-01T10:00:00", None, datetime(2030, 1, 1, 10, tzinfo=UTC)),
        ("2030-01-01T10:00:00", "Asia/Kolkata", datetime(2030, 1, 1, 4, 30, tzinfo=UTC)),
        ("2030-01-01 10:00:00+02:00", "Asia/Kolkata", datetime(2030, 1, 1, 8, tzinfo=UTC)),
        ("2030-07-01T10:00:00.250", "America/New_York", datetime(2030, 7, 1, 14, 0, 0, 250000, tzinfo=UTC)),
    ],
)
def test_resolve_datetime(value: str, timezone: str | None, expected: datetime) -> None:
    resolved = resolve_datetime(value, timezone)
    assert resolved == expected
    assert resolved.utcoffset() is not None


def test_resolve_datetime_rejects_text() -> None:
    with pytest.raises(ValueError, match="ISO 8601"):
        resolve_datetime("next tuesday")
    assert timedelta(0) == resolve_datetime("2030-01-01T00:00:00Z").utcoffset()
