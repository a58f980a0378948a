"""Top-level and basic_details rules, connectors, and what each stage demands."""

from __future__ import annotations

import pytest

from herald.campaigns.schemas.campaign import CampaignDocument
from herald.campaigns.validation import Stage, parse_create, validate_campaign

from .payloads import (
    ALL_FEATURES,
    EMAIL_BUSINESS_EVENT,
    EMAIL_EVENT_TRIGGERED,
    EMAIL_ONE_TIME_PROMOTIONAL,
    PUSH_BROADCAST_LIVE_ACTIVITY,
    PUSH_DEVICE_TRIGGERED,
    PUSH_LOCATION_TRIGGERED,
    PUSH_ONE_TIME,
    Case,
    check,
    codes,
    fails,
    passes,
    problems,
    variant,
)

C, P = Stage.DRAFT_CREATE, Stage.DRAFT_PATCH
GEO = "basic_details.geofences"
MINIMAL_PUSH = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}
MINIMAL_EMAIL = {**MINIMAL_PUSH, "channel": "EMAIL"}


@pytest.mark.parametrize(
    "case",
    [
        # spec "Delivery types": the channel x delivery-type matrix
        fails(
            "email-device",
            MINIMAL_EMAIL,
            ("INVALID_ENUM_VALUE", "campaign_delivery_type"),
            {"campaign_delivery_type": "DEVICE_TRIGGERED"},
            stage=C,
        ),
        fails(
            "email-location",
            MINIMAL_EMAIL,
            ("INVALID_ENUM_VALUE", "campaign_delivery_type"),
            {"campaign_delivery_type": "LOCATION_TRIGGERED"},
            stage=C,
        ),
        fails(
            "email-live-activity",
            MINIMAL_EMAIL,
            ("INVALID_ENUM_VALUE", "campaign_delivery_type"),
            {"campaign_delivery_type": "BROADCAST_LIVE_ACTIVITY"},
            stage=C,
        ),
        passes("push-device", MINIMAL_PUSH, {"campaign_delivery_type": "DEVICE_TRIGGERED"}, stage=C),
        passes(
            "email-business-event",
            MINIMAL_EMAIL,
            {"campaign_delivery_type": "BUSINESS_EVENT_TRIGGERED"},
            stage=C,
        ),
        # BROADCAST_LIVE_ACTIVITY only with platforms == ["IOS"]
        fails(
            "live-activity-android-too",
            PUSH_BROADCAST_LIVE_ACTIVITY,
            ("INVALID_ENUM_VALUE", "basic_details.platforms"),
            {"basic_details.platforms": ["IOS", "ANDROID"]},
            stage=C,
        ),
        fails(
            "live-activity-web",
            PUSH_BROADCAST_LIVE_ACTIVITY,
            ("INVALID_ENUM_VALUE", "basic_details.platforms"),
            {"basic_details.platforms": ["WEB"]},
        ),
        passes("live-activity-ios", PUSH_BROADCAST_LIVE_ACTIVITY, stage=C),
        passes(
            "one-time-any-platforms",
            PUSH_ONE_TIME,
            {
                "basic_details.platforms": ["IOS", "ANDROID", "WEB"],
                "campaign_content.content.push.web": {
                    "template_type": "BASIC",
                    "basic_details": {"title": "t", "message": "m"},
                },
            },
        ),
        # spec rule 4: business_event for BUSINESS_EVENT_TRIGGERED
        fails(
            "business-event-missing",
            EMAIL_BUSINESS_EVENT,
            ("REQUIRED_FIELD_MISSING", "basic_details.business_event"),
            drop=("basic_details.business_event",),
            stage=C,
        ),
        fails(
            "business-event-empty",
            EMAIL_BUSINESS_EVENT,
            ("OUT_OF_RANGE", "basic_details.business_event"),
            {"basic_details.business_event": ""},
            stage=C,
        ),
        # A name the business-event route refuses: the campaign could never start.
        fails(
            "business-event-blank",
            EMAIL_BUSINESS_EVENT,
            ("INVALID_TYPE", "basic_details.business_event"),
            {"basic_details.business_event": "   "},
            stage=C,
        ),
        fails(
            "business-event-control-character",
            EMAIL_BUSINESS_EVENT,
            ("INVALID_TYPE", "basic_details.business_event"),
            {"basic_details.business_event": "a\nb"},
            stage=C,
        ),
        fails(
            "business-event-too-long",
            EMAIL_BUSINESS_EVENT,
            ("OUT_OF_RANGE", "basic_details.business_event"),
            {"basic_details.business_event": "x" * 201},
            stage=C,
        ),
        passes(
            "business-event-longest",
            EMAIL_BUSINESS_EVENT,
            {"basic_details.business_event": "x" * 200},
            stage=C,
        ),
        fails(
            "business-event-no-basic-details",
            EMAIL_BUSINESS_EVENT,
            ("REQUIRED_FIELD_MISSING", "basic_details.business_event"),
            drop=("basic_details",),
        ),
        passes(
            "business-event-draft-without-basic-details",
            EMAIL_BUSINESS_EVENT,
            drop=("basic_details",),
            stage=C,
        ),
        fails(
            "push-business-event-missing",
            MINIMAL_PUSH,
            ("REQUIRED_FIELD_MISSING", "basic_details.business_event"),
            {
                "campaign_delivery_type": "BUSINESS_EVENT_TRIGGERED",
                "basic_details": {"platforms": ["ANDROID"]},
            },
            stage=C,
        ),
        # spec rule 4: geofences for LOCATION_TRIGGERED, and the geofence table
        fails(
            "geofences-missing",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", GEO),
            drop=(GEO,),
            stage=C,
        ),
        fails(
            "geofences-no-basic-details",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", GEO),
            drop=("basic_details",),
        ),
        fails(
            "dwell-without-value",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GEO}.0.dwell_time_value"),
            drop=(f"{GEO}.0.dwell_time_value",),
            stage=C,
        ),
        fails(
            "dwell-without-granularity",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GEO}.0.dwell_time_granularity"),
            drop=(f"{GEO}.0.dwell_time_granularity",),
            stage=C,
        ),
        passes(
            "entry-without-dwell",
            PUSH_LOCATION_TRIGGERED,
            {f"{GEO}.0.triggered_at": "EXIT"},
            drop=(f"{GEO}.0.dwell_time_value", f"{GEO}.0.dwell_time_granularity"),
        ),
        fails(
            "dwell-uppercase",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_ENUM_VALUE", f"{GEO}.0.triggered_at"),
            {f"{GEO}.0.triggered_at": "DWELL"},
            stage=C,
        ),
        fails(
            "no-response-time",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GEO}.1.response_time_value"),
            drop=(f"{GEO}.1.response_time_value",),
            stage=C,
        ),
        fails(
            "no-response-granularity",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GEO}.1.response_time_granularity"),
            drop=(f"{GEO}.1.response_time_granularity",),
            stage=C,
        ),
        fails(
            "no-name",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GEO}.1.name"),
            drop=(f"{GEO}.1.name",),
            stage=C,
        ),
        fails(
            "no-radius",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", f"{GEO}.1.radius"),
            drop=(f"{GEO}.1.radius",),
            stage=C,
        ),
        fails(
            "latitude-out-of-range",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GEO}.0.latitude"),
            {f"{GEO}.0.latitude": "95.1"},
            stage=C,
        ),
        fails(
            "longitude-out-of-range",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GEO}.0.longitude"),
            {f"{GEO}.0.longitude": "-181"},
            stage=C,
        ),
        fails(
            "radius-zero",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GEO}.0.radius"),
            {f"{GEO}.0.radius": "0"},
            stage=C,
        ),
        fails(
            "radius-infinite",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GEO}.0.radius"),
            {f"{GEO}.0.radius": "9" * 400},
            stage=C,
        ),
        fails(
            "geofences-empty",
            PUSH_LOCATION_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", GEO),
            {GEO: []},
            stage=C,
        ),
        fails(
            "latitude-not-a-number",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_TYPE", f"{GEO}.0.latitude"),
            {f"{GEO}.0.latitude": "north"},
            stage=C,
        ),
        fails(
            "latitude-as-number",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_TYPE", f"{GEO}.0.latitude"),
            {f"{GEO}.0.latitude": 12.9},
            stage=C,
        ),
        fails(
            "dwell-value-not-a-count",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_TYPE", f"{GEO}.0.dwell_time_value"),
            {f"{GEO}.0.dwell_time_value": "five"},
            stage=C,
        ),
        fails(
            "duplicate-names",
            PUSH_LOCATION_TRIGGERED,
            ("INVALID_TYPE", f"{GEO}.1.name"),
            {f"{GEO}.1.name": "MG Road store"},
            stage=C,
        ),
        passes(
            "single-geofence-object",
            PUSH_LOCATION_TRIGGERED,
            {GEO: PUSH_LOCATION_TRIGGERED["basic_details"]["geofences"][0]},
        ),
        # connectors (Email): present at publish, configured in the workspace
        fails(
            "email-no-connector",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("REQUIRED_FIELD_MISSING", "connector"),
            drop=("connector",),
        ),
        passes("email-no-connector-in-draft", EMAIL_ONE_TIME_PROMOTIONAL, drop=("connector",), stage=C),
        fails(
            "connector-not-configured",
            EMAIL_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", "connector.connector_name"),
            {"connector.connector_name": "somebody-elses-smtp"},
        ),
        fails(
            "connector-type-unknown",
            EMAIL_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", "connector.connector_type"),
            {"connector.connector_type": "PIGEON"},
            stage=C,
        ),
        passes(
            "connector-named-provider",
            EMAIL_EVENT_TRIGGERED,
            {"connector.connector_type": "SENDGRID", "connector.connector_name": "newsletters"},
        ),
        # The connector named is of another type than the one asked for (C8 refuses it too)
        fails(
            "connector-of-another-type",
            EMAIL_EVENT_TRIGGERED,
            ("INVALID_ENUM_VALUE", "connector.connector_type"),
            {"connector.connector_type": "SENDGRID"},
        ),
        # Durations: at most ten years (a moment computed from one stays on the calendar)
        fails(
            "response-time-too-long",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GEO}.0.response_time_value"),
            {f"{GEO}.0.response_time_value": "99999999999", f"{GEO}.0.response_time_granularity": "MINUTES"},
            stage=C,
        ),
        fails(
            "dwell-time-too-long",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", f"{GEO}.0.dwell_time_value"),
            {f"{GEO}.0.dwell_time_value": "3651", f"{GEO}.0.dwell_time_granularity": "DAYS"},
            stage=C,
        ),
        passes(
            "dwell-time-of-ten-years",
            PUSH_LOCATION_TRIGGERED,
            {f"{GEO}.0.dwell_time_value": "3650", f"{GEO}.0.dwell_time_granularity": "DAYS"},
        ),
        fails(
            "send-limit-period-too-long",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", "delivery_controls.send_limit_granularity_in_hours"),
            {"delivery_controls.send_limit_granularity_in_hours": "99999999999"},
            stage=C,
        ),
        fails(
            "send-limit-period-of-no-time",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", "delivery_controls.send_limit_granularity_in_hours"),
            {"delivery_controls.send_limit_granularity_in_hours": "0"},
            stage=C,
        ),
        fails(
            "send-limit-of-no-message",
            PUSH_LOCATION_TRIGGERED,
            ("OUT_OF_RANGE", "delivery_controls.send_limit_value"),
            {"delivery_controls.send_limit_value": "0"},
            stage=C,
        ),
        fails(
            "sync-data-expiry-too-long",
            PUSH_DEVICE_TRIGGERED,
            ("OUT_OF_RANGE", "delivery_controls.expiry_time_of_sync_data_in_hour"),
            {"delivery_controls.expiry_time_of_sync_data_in_hour": "87601"},
            stage=C,
        ),
        fails(
            "minimum-delay-too-long",
            EMAIL_EVENT_TRIGGERED,
            ("OUT_OF_RANGE", "delivery_controls.minimum_delay_between_two_notification_in_hour"),
            {"delivery_controls": {"minimum_delay_between_two_notification_in_hour": 99999999999}},
            stage=C,
        ),
        fails(
            "attribution-window-too-long",
            EMAIL_ONE_TIME_PROMOTIONAL,
            ("OUT_OF_RANGE", "conversion_goal_details.attribution_window_in_hours"),
            {"conversion_goal_details": {"attribution_window_in_hours": 99999999999}},
            stage=C,
        ),
        # Push needs platforms to publish
        fails(
            "push-without-basic-details",
            PUSH_DEVICE_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", "basic_details.platforms"),
            drop=("basic_details",),
        ),
        fails(
            "push-empty-platforms",
            PUSH_DEVICE_TRIGGERED,
            ("REQUIRED_FIELD_MISSING", "basic_details.platforms"),
            {"basic_details.platforms": []},
        ),
    ],
)
def test_campaign_rules(case: Case) -> None:
    check(case)


def test_connector_check_is_skipped_without_the_workspace_list() -> None:
    raw = variant(EMAIL_EVENT_TRIGGERED, {"connector.connector_name": "anything"})
    assert problems(raw, configured_connectors=None) == []


# ---- stages --------------------------------------------------------------------------------------


@pytest.mark.parametrize("minimal", [MINIMAL_PUSH, MINIMAL_EMAIL], ids=["push", "email"])
def test_a_bare_draft_is_created_but_cannot_publish(minimal: dict[str, str]) -> None:
    assert problems(minimal, Stage.DRAFT_CREATE) == []
    assert problems(minimal, Stage.DRAFT_PATCH) == []
    found = codes(problems(minimal, Stage.DRAFT_PUBLISH))
    assert ("REQUIRED_FIELD_MISSING", "campaign_content") in found
    assert ("REQUIRED_FIELD_MISSING", "scheduling_details") in found
    assert ("REQUIRED_FIELD_MISSING", "segmentation_details") in found


def test_create_validates_only_the_components_sent() -> None:
    body, _ = parse_create(
        variant(PUSH_ONE_TIME, {"control_group_details.campaign_control_group_percentage": None})
    )
    assert body is not None
    document = CampaignDocument.from_create(body)
    target = ("REQUIRED_FIELD_MISSING", "control_group_details.campaign_control_group_percentage")
    assert codes(validate_campaign(document, C, ALL_FEATURES, frozenset({"control_group_details"}))) == {
        target
    }
    assert validate_campaign(document, C, ALL_FEATURES, frozenset({"utm_params"})) == []
    # Publish ignores `sent`: the whole campaign is checked.
    assert target in codes(validate_campaign(document, Stage.DRAFT_PUBLISH, ALL_FEATURES, frozenset()))


def test_patch_checks_across_components_on_the_merged_draft() -> None:
    # basic_details stored wrong (say, before a rule existed); a patch of anything reports it.
    body, _ = parse_create(variant(PUSH_BROADCAST_LIVE_ACTIVITY, {"basic_details.platforms": ["IOS", "WEB"]}))
    assert body is not None
    document = CampaignDocument.from_create(body)
    found = validate_campaign(document, P, ALL_FEATURES, frozenset({"utm_params"}))
    assert codes(found) == {("INVALID_ENUM_VALUE", "basic_details.platforms")}


def test_problems_are_reported_once_each() -> None:
    found = problems(variant(EMAIL_BUSINESS_EVENT, drop=("basic_details.business_event",)))
    targets = [(p.code, p.target) for p in found]
    assert targets.count(("REQUIRED_FIELD_MISSING", "basic_details.business_event")) == 1
