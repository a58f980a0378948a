"""Success bodies of the campaign operations (C1-C8), for the OpenAPI description only.

The routes build their answers as plain JSON (`campaigns.views`, `campaigns.meta`, the test sends);
these models say what those answers are, component by component with the request models, so that
generated clients get typed objects. A test validates real answers against the served document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from herald.campaigns.lifecycle import Action
from herald.campaigns.schemas.advanced import Advanced
from herald.campaigns.schemas.audience_limit import CampaignAudienceLimit
from herald.campaigns.schemas.basic_details import EmailBasicDetails, PushBasicDetails
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType, Platform
from herald.campaigns.schemas.connector import Connector
from herald.campaigns.schemas.content import EmailCampaignContent, PushCampaignContent
from herald.campaigns.schemas.control_group import ControlGroupDetails
from herald.campaigns.schemas.delivery_controls import EmailDeliveryControls, PushDeliveryControls
from herald.campaigns.schemas.goals import ConversionGoalDetails
from herald.campaigns.schemas.scheduling import SchedulingDetails
from herald.campaigns.schemas.segmentation import SegmentationDetails
from herald.campaigns.schemas.trigger import TriggerCondition
from herald.campaigns.schemas.utm import UtmParams
from herald.timefmt import CAMPAIGN_TIMESTAMP_PATTERN, META_TIMESTAMP_PATTERN

# Contract §3's answer timestamps (`timefmt.campaign_timestamp`, `timefmt.meta_timestamp`).
Timestamp = Annotated[
    str,
    Field(
        description="UTC, `YYYY-MM-DD HH:MM:SS.ffffff` (no zone).",
        json_schema_extra={"pattern": CAMPAIGN_TIMESTAMP_PATTERN},
    ),
]
MetaTime = Annotated[
    str,
    Field(description="UTC, `YYYY-MM-DDTHH:MM:SS`.", json_schema_extra={"pattern": META_TIMESTAMP_PATTERN}),
]


class _CampaignIdentity(BaseModel):
    id: str = Field(description="24-hex id of this version document.")
    campaign_id: str = Field(description="Stable id of the campaign, across versions.")
    version_number: int | None = Field(None, description="Present when the workspace has versioning on.")
    status: CampaignStatus
    campaign_delivery_type: DeliveryType
    created_by: str
    updated_by: str | None = None
    created_at: Timestamp
    updated_at: Timestamp
    sent_time: Timestamp | None = None
    flow_id: str | None = None
    flow_name: str | None = None
    parent_id: str | None = None


class _SharedComponentsView(_CampaignIdentity):
    trigger_condition: TriggerCondition | None = None
    segmentation_details: SegmentationDetails | None = None
    scheduling_details: SchedulingDetails | None = None
    conversion_goal_details: ConversionGoalDetails | None = None
    control_group_details: ControlGroupDetails | None = None
    utm_params: UtmParams | None = None
    campaign_audience_limit: CampaignAudienceLimit | None = None


class PushCampaignView(_SharedComponentsView):
    """A stored Push campaign: its identity and every stored component."""

    channel: Literal["PUSH"]
    basic_details: PushBasicDetails | None = None
    campaign_content: PushCampaignContent | None = None
    delivery_controls: PushDeliveryControls | None = None
    advanced: Advanced | None = None


class EmailCampaignView(_SharedComponentsView):
    """A stored Email campaign: its identity and every stored component."""

    channel: Literal["EMAIL"]
    basic_details: EmailBasicDetails | None = None
    campaign_content: EmailCampaignContent | None = None
    delivery_controls: EmailDeliveryControls | None = None
    connector: Connector | None = None


_Component = dict[str, Any] | None


class OtherChannelCampaignView(_CampaignIdentity):
    """A campaign of a channel v5 cannot create (imported): components are stored as given."""

    channel: Literal["SMS", "WHATSAPP", "FACEBOOK", "GOOGLE ADS", "CONNECTORS"]
    sender_name: str | None = Field(None, description="SMS campaigns.")
    basic_details: _Component = None
    campaign_content: _Component = None
    connector: _Component = None
    trigger_condition: _Component = None
    segmentation_details: _Component = None
    scheduling_details: _Component = None
    delivery_controls: _Component = None
    conversion_goal_details: _Component = None
    control_group_details: _Component = None
    utm_params: _Component = None
    campaign_audience_limit: _Component = None
    advanced: _Component = None


CampaignView = Annotated[
    PushCampaignView | EmailCampaignView | OtherChannelCampaignView, Field(discriminator="channel")
]


class _Envelope(BaseModel):
    response_id: str = Field(description="`resp_` followed by the request id.")
    type: Literal["campaign"]


class CampaignCreated(BaseModel):
    id: str
    status: Literal["DRAFT"]


class CampaignCreatedResponse(_Envelope):
    data: CampaignCreated


class CampaignResponse(_Envelope):
    data: CampaignView


class CampaignUpdated(BaseModel):
    id: str


class CampaignUpdatedResponse(_Envelope):
    data: CampaignUpdated


class ValidationIssue(BaseModel):
    field: str = Field(description="Dot path of the field.")
    issue: str
    code: str


class CampaignValidation(BaseModel):
    valid: bool
    errors: list[ValidationIssue]


class CampaignValidationResponse(_Envelope):
    data: CampaignValidation


class CampaignStatusChanged(BaseModel):
    id: str
    action: Action


class CampaignStatusResponse(_Envelope):
    data: CampaignStatusChanged


class CampaignList(BaseModel):
    campaigns: list[CampaignView]


class CampaignSearchResponse(_Envelope):
    data: CampaignList


class Reachability(BaseModel):
    count: int
    last_updated_time: MetaTime


class CampaignMetaRow(BaseModel):
    campaign_id: str
    version_number: int | None = Field(None, description="Present when the workspace has versioning on.")
    channel: Channel
    platform: list[Platform] = Field(
        description="The campaign's `basic_details.platforms` for Push; `[]` for every other channel."
    )
    created_by: str
    campaign_delivery_type: DeliveryType
    campaign_name: str | None
    campaign_team: str | None
    campaign_tags: list[str]
    campaign_status: CampaignStatus
    campaign_start_time: MetaTime | None
    parent_campaign_id: str | None = None
    total_child_campaigns: int | None = None
    rejection_comment: str | None = None
    reachability_details: Reachability | None = Field(
        description="Only for scheduled one-time, business-event and event-triggered campaigns."
    )


class CampaignMetaList(BaseModel):
    campaigns: list[CampaignMetaRow]


class CampaignMetaResponse(_Envelope):
    data: CampaignMetaList


class TestSendResult(BaseModel):
    status: Literal["SENT", "FAILED"]
    failure_reason: str | None = None


class TestSendResults(BaseModel):
    data: dict[str, TestSendResult] = Field(
        description="One entry per send, keyed `<PLATFORM>_<locale>_<variation>` (e.g. `EMAIL_default_variation_1`)."
    )
    message: str


class CampaignTestResponse(_Envelope):
    data: TestSendResults


class ExecutionHeldOut(BaseModel):
    control_group: int = Field(description="The campaign control group.")
    global_control: int = Field(description="The workspace's global control group.")


class BroadcastStats(BaseModel):
    id: str = Field(description="The message's outbox id, also the webhook's `id` (stable across attempts).")
    status: Literal["PENDING", "SENT", "FAILED"]
    failure_reason: str | None
    attempts: int


class ConversionFigures(BaseModel):
    users: int = Field(
        description="Users with an attribution window: sent (or, for the control, held out) while the campaign had goals."
    )
    converted_users: int = Field(description="Of them, users with at least one conversion.")
    conversions: int = Field(description="Conversions: at most one per (user, goal).")
    revenue: float = Field(
        description="Sum of the conversions' revenue: the goal's `revenue_attribute` of the converting event, when a number."
    )
    conversion_rate: float | None = Field(description="converted_users / users; null when users is 0.")


_UPLIFT = (
    "(conversion_rate - control.conversion_rate) / control.conversion_rate; null when there is no "
    "control user or the control group's conversion rate is 0."
)


class VariationConversions(ConversionFigures):
    variation: str = Field(description="The variation of the users' messages, e.g. `variation_1`.")
    uplift: float | None = Field(description=_UPLIFT)


class SentConversions(ConversionFigures):
    uplift: float | None = Field(description=_UPLIFT)


class ExecutionConversions(BaseModel):
    """Conversions of an execution: a user's goal event within the attribution window after the
    message was sent to them or, for control users, after they were held out."""

    attribution_window_in_hours: int
    goals: list[str] = Field(description="The goals' names, in the campaign's order.")
    sent: SentConversions = Field(description="Every user sent to, all variations together.")
    control: ConversionFigures = Field(
        description="Users held out: the campaign control group and the global control group."
    )
    variations: list[VariationConversions] = Field(description="Users sent to, per variation, by name.")


class FailureCount(BaseModel):
    reason: str
    users: int


class ExecutionStats(BaseModel):
    """One execution (run) of a campaign, as `GET /v5/campaigns/{campaign_id}/stats` counts it."""

    id: str
    run: int
    status: str = Field(
        description="RESOLVING, DISPATCHING, DONE, STOPPED, FAILED, or PAUSED while its connector kept failing."
    )
    reason: str | None = Field(description="Why the execution FAILED or is PAUSED.")
    trigger: str | None = Field(
        description=(
            "null for a one-time or periodic run; EVENT: a triggered campaign's one long-lived execution "
            "(event-, device- and location-triggered), a user row per firing; BUSINESS: one raise of a "
            "business event."
        )
    )
    scheduled_for: str | None = Field(
        description="The occurrence a periodic run is for (a one-time campaign's start_time); null for ASAP."
    )
    child_campaign_id: str | None = Field(description="A periodic run's child campaign; null otherwise.")
    started_at: str
    updated_at: str
    audience: int = Field(description="Users the segmentation selected, before the channel's suppressions.")
    held_out: ExecutionHeldOut
    suppressed: dict[str, int] = Field(
        description=(
            "Users (firings, for a triggered campaign) not sent to, by reason: opted_out, unsubscribed, "
            "no_address, audience_limit, no_user, frequency_cap, dnd (quiet hours last past the "
            "campaign's expiry, or a firing not queued), minimum_delay (likewise), expired (the user's "
            "own send time is after the expiry), timezone_passed, bts_not_available, bts_outside_window "
            "(send time rules), trigger_time (a BEFORE delay's anchor missing or past), send_limit, "
            "left_geofence, outside_time_limit (location rules)."
        )
    )
    pending: int
    progress: float = Field(
        description=(
            "Of the users to send to (after hold-outs and suppressions), the percentage settled: sent, "
            "failed or unsent; one decimal, 100.0 when none is pending, 0.0 while the audience is "
            "still being resolved and none of it is known."
        )
    )
    retrying: int = Field(
        description=(
            "Of the pending users, those decided on whose messages wait for their next attempt: after a"
            " transient failure, or not yet made when a pause or the connector's error threshold halted"
            " their window."
        )
    )
    deferred: int = Field(
        description="Of the pending users, those deferred by quiet hours or the minimum delay."
    )
    sent: int
    failed: int
    failures: list[FailureCount] = Field(
        description=(
            "Why the failed users failed: each reason (the last attempt's, as `herald outbox list` shows"
            " it per message) with its users, the most users first, ten reasons at most."
        )
    )
    unsent: int = Field(
        description=(
            "Users never sent to because the execution was STOPPED before their turn: the campaign was "
            "stopped or reached its expiry_time, or (periodic) was paused; also a user with tokens on two "
            "platforms one of whose messages went out before the stop halted the other. 0 unless STOPPED, whose "
            "retrying and deferred are 0 and whose pending are only the users still in a worker's "
            "hands (their messages perhaps on the wire) until their end is recorded."
        )
    )
    broadcast: BroadcastStats | None = Field(
        description="A BROADCAST_LIVE_ACTIVITY campaign's one message per execution; null for other campaigns."
    )
    conversions: ExecutionConversions | None = Field(
        description="Null when the campaign has no conversion goals (`conversion_goal_details.goals`)."
    )


class CampaignStats(BaseModel):
    campaign_id: str
    status: str
    executions: list[ExecutionStats]


class CampaignStatsResponse(_Envelope):
    data: CampaignStats
