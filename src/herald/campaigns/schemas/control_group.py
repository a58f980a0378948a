"""`control_group_details`: users held back from the campaign to measure its effect."""

from __future__ import annotations

from herald.campaigns.schemas.common import Flag, Percentage
from herald.schemas import APIModel


class ControlGroupDetails(APIModel):
    is_campaign_control_group_enabled: Flag | None = None
    campaign_control_group_percentage: Percentage | None = None
    is_global_control_group_enabled: Flag | None = None
