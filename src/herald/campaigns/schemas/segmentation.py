"""`segmentation_details`: who the campaign is sent to."""

from __future__ import annotations

from herald.campaigns.schemas.common import Flag
from herald.campaigns.schemas.filters import FilterGroup
from herald.schemas import APIModel


class SegmentationDetails(APIModel):
    included_filters: FilterGroup | None = None
    excluded_filters: FilterGroup | None = None
    is_all_user_campaign: Flag | None = None
    send_campaign_to_opt_out_users: Flag | None = None

    def has_minimum_audience(self) -> bool:
        """Spec: all users, or at least one filter in `included_filters`."""
        if self.is_all_user_campaign:
            return True
        return self.included_filters is not None and len(self.included_filters.filters) > 0
