"""`delivery_controls`: DND, throttling, frequency capping and queuing, per channel."""

from __future__ import annotations

from herald.campaigns.schemas.common import (
    DeliveryType,
    Flag,
    Integer,
    NonNegativeInt,
    NumericString,
    PositiveInt,
)
from herald.schemas import APIModel

_E, _D, _L = DeliveryType.EVENT_TRIGGERED, DeliveryType.DEVICE_TRIGGERED, DeliveryType.LOCATION_TRIGGERED


class EmailDeliveryControls(APIModel):
    bypass_dnd: Flag | None = None
    campaign_throttle_rpm: PositiveInt | None = None
    count_for_frequency_capping: Flag | None = None
    ignore_frequency_capping: Flag | None = None
    minimum_delay_between_two_notification_in_hour: NonNegativeInt | None = None


class PushDeliveryControls(EmailDeliveryControls):
    max_time_to_show_message_of_same_camapign: NumericString | None = None  # misspelt as in the spec
    expiry_time_of_sync_data_in_hour: NumericString | None = None
    send_message_in_offline_mode: Flag | None = None
    send_limit_value: NumericString | None = None
    send_limit_granularity_in_hours: NumericString | None = None
    ignore_global_minimum_delay: Flag | None = None
    # Feature-gated (`queuing`); the > 0 rule applies only when queuing is on, so no bound here.
    queuing_enabled: Flag | None = None
    queue_duration: Integer | None = None


# Spec table "delivery_controls" (Push): the delivery types a field applies to. Fields not listed
# apply to every Push delivery type.
PUSH_FIELD_DELIVERY_TYPES: dict[str, frozenset[DeliveryType]] = {
    "campaign_throttle_rpm": frozenset(DeliveryType) - {_E, _D, _L},
    "minimum_delay_between_two_notification_in_hour": frozenset({_E, _D}),
    "max_time_to_show_message_of_same_camapign": frozenset({_D}),
    "expiry_time_of_sync_data_in_hour": frozenset({_D}),
    "send_message_in_offline_mode": frozenset({_D}),
    "send_limit_value": frozenset({_L}),
    "send_limit_granularity_in_hours": frozenset({_L}),
    "ignore_global_minimum_delay": frozenset({_E}),
}

QUEUING_FIELDS: tuple[str, ...] = ("queuing_enabled", "queue_duration")

DeliveryControls = PushDeliveryControls | EmailDeliveryControls
