"""How many users a campaign can reach now: its audience on its channel, counted in the database.

The audience is the campaign's stored `segmentation_details` (none, as triggered campaigns may have:
every user) minus opt-outs (unless the campaign sends to them) and users unsubscribed from a
PROMOTIONAL e-mail's category, counting only users with an address on the channel: exactly the users
the delivery engine's execution would materialise (`segmentation.audience.reach_of`). Caching the figure (C7 serves it for
24 hours) is the caller's business.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.segmentation.audience import count_audience, reach_of
from herald.campaigns.models import Campaign
from herald.errors import NotFound


async def reachability_count(
    session: AsyncSession, workspace_id: str, campaign: Campaign, now: datetime
) -> int:
    """Users of `workspace_id` the campaign reaches. Raises ValidationFailed (400) when its filters
    cannot be evaluated (e.g. a custom segment it names no longer exists)."""
    if campaign.workspace_id != workspace_id:
        raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")
    components = campaign.components or {}
    return await count_audience(
        session,
        workspace_id,
        campaign.channel,
        components.get("segmentation_details"),
        now,
        reachable_only=True,
        reach=reach_of(campaign.channel, components),
    )
