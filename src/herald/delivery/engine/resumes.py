"""The moment from which a PERIODIC campaign's occurrences may run (`PeriodicResume`): its publish,
its last RESUME, or the last change of its schedule while it was live. Occurrences before it are
never run (`periodic.due_runs`): none from before the campaign was live, none missed while PAUSED,
and none that a changed schedule puts in the past (its changes apply from the next run). Kept apart
from the engine so that the API's writes of campaigns import only this."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.delivery.engine.models import PeriodicResume


async def record_resume(session: AsyncSession, workspace_id: str, campaign_id: str, now: datetime) -> None:
    """A publish, a RESUME or a change of the schedule of a periodic campaign at `now`: occurrences
    before it are never run (the caller commits, with the change)."""
    found = await session.get(PeriodicResume, (workspace_id, campaign_id))
    if found is None:
        session.add(PeriodicResume(workspace_id=workspace_id, campaign_id=campaign_id, resumed_at=now))
    else:
        found.resumed_at = now


def _recurrence(components: Mapping[str, Any]) -> object:
    """What of a campaign's components decides its occurrences' moments: `scheduling_details` but
    its `expiry_time` (an expiry moved later adds no occurrence before it)."""
    details = components.get("scheduling_details")
    if not isinstance(details, dict):
        return details
    return {key: value for key, value in details.items() if key != "expiry_time"}


async def record_schedule_change(
    session: AsyncSession,
    workspace_id: str,
    row_id: str,
    delivery_type: str,
    status: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    now: datetime,
) -> None:
    """A write of the campaign row `row_id` from the components `before` to `after`, at `now`: an
    ACTIVE periodic campaign whose schedule it changes runs the changed schedule from the next
    occurrence after `now`. A date the new schedule adds before now (a weekday added on a later
    day of the week) is not run late at the next tick, as an occurrence missed while PAUSED is not.
    A SCHEDULED or PAUSED campaign needs nothing: its publish or RESUME is the moment."""
    if (
        delivery_type != DeliveryType.PERIODIC.value
        or status != CampaignStatus.ACTIVE.value
        or _recurrence(before) == _recurrence(after)
    ):
        return
    campaign_id = await session.scalar(
        select(Campaign.campaign_id).where(Campaign.workspace_id == workspace_id, Campaign.id == row_id)
    )
    if campaign_id is not None:
        await record_resume(session, workspace_id, campaign_id, now)
