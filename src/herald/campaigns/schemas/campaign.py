"""The campaign request bodies (Create, Update) and `CampaignDocument`, the typed view rules read.

The channel decides how `basic_details`, `campaign_content`, `delivery_controls`, `advanced` and
`connector` are read, so each body exists once per creatable channel; `parse_create` and
`parse_update` (validation.parse) pick the model from the body's `channel`. `CampaignCreateBody`
is the same choice expressed as a discriminated union, for the OpenAPI description.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from herald.campaigns.schemas.advanced import Advanced
from herald.campaigns.schemas.audience_limit import CampaignAudienceLimit
from herald.campaigns.schemas.basic_details import BasicDetails, EmailBasicDetails, PushBasicDetails
from herald.campaigns.schemas.common import Channel, DeliveryType
from herald.campaigns.schemas.connector import Connector
from herald.campaigns.schemas.content import CampaignContent, EmailCampaignContent, PushCampaignContent
from herald.campaigns.schemas.control_group import ControlGroupDetails
from herald.campaigns.schemas.delivery_controls import (
    DeliveryControls,
    EmailDeliveryControls,
    PushDeliveryControls,
)
from herald.campaigns.schemas.goals import ConversionGoalDetails
from herald.campaigns.schemas.scheduling import SchedulingDetails
from herald.campaigns.schemas.segmentation import SegmentationDetails
from herald.campaigns.schemas.trigger import EmailTriggerCondition, TriggerCondition
from herald.campaigns.schemas.utm import UtmParams
from herald.email_address import EmailAddress
from herald.schemas import APIModel

# Every component a body may carry, in the order problems are reported.
COMPONENT_NAMES: tuple[str, ...] = (
    "basic_details",
    "campaign_content",
    "connector",
    "trigger_condition",
    "segmentation_details",
    "scheduling_details",
    "delivery_controls",
    "conversion_goal_details",
    "control_group_details",
    "utm_params",
    "campaign_audience_limit",
    "advanced",
)
# Components whose model depends on the channel (a Push `advanced` has no Email counterpart).
CHANNEL_SPECIFIC_COMPONENTS: frozenset[str] = frozenset(
    {"basic_details", "campaign_content", "delivery_controls", "advanced", "connector"}
)

RequestId = Annotated[str, Field(strict=True, min_length=1, max_length=128)]


class _SharedComponents(APIModel):
    request_id: RequestId | None = None
    trigger_condition: TriggerCondition | None = None
    segmentation_details: SegmentationDetails | None = None
    scheduling_details: SchedulingDetails | None = None
    conversion_goal_details: ConversionGoalDetails | None = None
    control_group_details: ControlGroupDetails | None = None
    utm_params: UtmParams | None = None
    campaign_audience_limit: CampaignAudienceLimit | None = None


class _PushComponents(_SharedComponents):
    basic_details: PushBasicDetails | None = None
    campaign_content: PushCampaignContent | None = None
    delivery_controls: PushDeliveryControls | None = None
    advanced: Advanced | None = None


class _EmailComponents(_SharedComponents):
    trigger_condition: EmailTriggerCondition | None = None
    basic_details: EmailBasicDetails | None = None
    campaign_content: EmailCampaignContent | None = None
    delivery_controls: EmailDeliveryControls | None = None
    connector: Connector | None = None


class PushCampaignCreate(_PushComponents):
    channel: Literal["PUSH"]
    campaign_delivery_type: DeliveryType
    created_by: EmailAddress


class EmailCampaignCreate(_EmailComponents):
    channel: Literal["EMAIL"]
    campaign_delivery_type: DeliveryType
    created_by: EmailAddress


class PushCampaignUpdate(_PushComponents):
    channel: Literal["PUSH"] | None = None
    campaign_delivery_type: DeliveryType | None = None
    updated_by: EmailAddress | None = None


class EmailCampaignUpdate(_EmailComponents):
    channel: Literal["EMAIL"] | None = None
    campaign_delivery_type: DeliveryType | None = None
    updated_by: EmailAddress | None = None


class _AnyChannelComponents(_SharedComponents):
    """A body whose channel is missing or not creatable: read what does not depend on the channel,
    so that its other problems are reported too."""

    channel: Any = None
    basic_details: Any = None
    campaign_content: Any = None
    delivery_controls: Any = None
    advanced: Any = None
    connector: Any = None


class AnyChannelCreate(_AnyChannelComponents):
    campaign_delivery_type: DeliveryType
    created_by: EmailAddress


class AnyChannelUpdate(_AnyChannelComponents):
    campaign_delivery_type: DeliveryType | None = None
    updated_by: EmailAddress | None = None


CampaignCreate = PushCampaignCreate | EmailCampaignCreate
CampaignUpdate = PushCampaignUpdate | EmailCampaignUpdate
CampaignCreateBody = Annotated[CampaignCreate, Field(discriminator="channel")]
# `channel` is optional on update, so no discriminator: the stored channel decides (parse_update).
CampaignUpdateBody = CampaignUpdate


def sent_components(body: BaseModel) -> frozenset[str]:
    """The component names present in a parsed body (an explicit null counts: it clears)."""
    return frozenset(name for name in COMPONENT_NAMES if name in body.model_fields_set)


@dataclass(frozen=True, slots=True)
class CampaignDocument:
    """A campaign as validation sees it: channel, delivery type and the parsed components."""

    channel: Channel
    delivery_type: DeliveryType
    basic_details: BasicDetails | None = None
    campaign_content: CampaignContent | None = None
    connector: Connector | None = None
    trigger_condition: TriggerCondition | None = None
    segmentation_details: SegmentationDetails | None = None
    scheduling_details: SchedulingDetails | None = None
    delivery_controls: DeliveryControls | None = None
    conversion_goal_details: ConversionGoalDetails | None = None
    control_group_details: ControlGroupDetails | None = None
    utm_params: UtmParams | None = None
    campaign_audience_limit: CampaignAudienceLimit | None = None
    advanced: Advanced | None = None

    @classmethod
    def from_create(cls, body: CampaignCreate) -> CampaignDocument:
        return cls(
            channel=Channel(body.channel),
            delivery_type=body.campaign_delivery_type,
            **{name: getattr(body, name, None) for name in sent_components(body)},
        )

    def merged(self, body: CampaignUpdate) -> CampaignDocument:
        """This campaign with every component the update sent replaced whole (contract §5 C3)."""
        changes: dict[str, Any] = {name: getattr(body, name, None) for name in sent_components(body)}
        return replace(self, **changes)

    def component(self, name: str) -> BaseModel | None:
        value: BaseModel | None = getattr(self, name)
        return value

    def components_json(
        self, stored: Mapping[str, Any] | None = None, sent: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """The present components as JSON, as sent (unset fields stay absent), for storage.

        With `stored` (the components this document was read from, then merged with an update
        that sent `sent`), a component not sent is taken as stored: it is what dumping its parsed
        model gives (the stored JSON is itself such a dump), without the dump (~90 µs a campaign)."""
        out: dict[str, Any] = {}
        for name in COMPONENT_NAMES:
            value = self.component(name)
            if value is None:
                continue
            kept = stored.get(name) if stored is not None and name not in sent else None
            out[name] = kept if kept is not None else value.model_dump(mode="json", exclude_unset=True)
        return out
