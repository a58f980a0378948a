"""Review outcomes: a rejected campaign stays in DRAFT with the reviewer's comment.

The comment is shown by campaign meta (C7) while the campaign is in DRAFT, and cleared when the
campaign is published (it leaves DRAFT).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import service
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus
from herald.errors import InvalidState, ValidationFailed
from herald.problems import Problem

MAX_COMMENT = 2000


async def reject(
    session: AsyncSession, workspace_id: str, campaign_id: str, comment: str, now: datetime
) -> Campaign:
    text = comment.strip()
    if not text or len(text) > MAX_COMMENT:
        raise ValidationFailed(
            [Problem("OUT_OF_RANGE", "comment", f"The comment must have 1 to {MAX_COMMENT} characters.")]
        )
    row = await service.get_campaign(session, workspace_id, campaign_id, for_update=True)
    if row.status != CampaignStatus.DRAFT.value:
        raise InvalidState(f"Only a DRAFT campaign can be rejected; {campaign_id} is {row.status}.")
    row.rejection_comment = text
    row.updated_at = now
    row.revision += 1
    await service.flush(session)
    return row
