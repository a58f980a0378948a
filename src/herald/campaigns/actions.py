"""C5: STOP, PAUSE and RESUME a live campaign (contract §5), applied with a compare-and-set.

The rule is decided on the stored state (`lifecycle.apply_action`) and written with
`UPDATE ... WHERE status = <the state it was decided on>`. When a concurrent request (or the
worker) changed the status first, nothing is written and the action is decided again on the new
state, so every success moves the campaign from the state its rule saw. The row is also read
locked, like every campaign write, so concurrent writers of other kinds queue behind it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import lifecycle, service
from herald.campaigns.lifecycle import Action
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.delivery.engine import periodic
from herald.errors import InvalidState, NotFound, Unprocessable, ValidationFailed
from herald.pydantic_errors import problems_from_validation_error
from herald.schemas import APIModel
from herald.wake import wake_on_commit

_ATTEMPTS = 5


class StatusBody(APIModel):
    action: Action
    request_id: Annotated[str, Field(strict=True, min_length=1, max_length=128)] | None = None


def parse_status_body(raw: object) -> StatusBody:
    try:
        return StatusBody.model_validate(raw)
    except ValidationError as exc:
        raise ValidationFailed(problems_from_validation_error(exc, raw)) from None


async def _reload(session: AsyncSession, row: Campaign) -> Campaign:
    """The campaign's latest version as committed now (a concurrent publish may have made a new one)."""
    query = (
        select(Campaign)
        .where(
            Campaign.workspace_id == row.workspace_id,
            Campaign.campaign_id == row.campaign_id,
            Campaign.is_latest,
        )
        .execution_options(populate_existing=True)
    )
    found = (await session.scalars(query)).first()
    if found is None:
        raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")
    return found


async def change_status(
    session: AsyncSession, workspace_id: str, campaign_id: str, raw: object, now: datetime
) -> tuple[Campaign, Action]:
    body = parse_status_body(raw)
    row = await service.get_campaign(session, workspace_id, campaign_id, for_update=True)
    if row.parent_id is not None:
        raise Unprocessable(
            f"{body.action.value} cannot be applied to a run of a periodic campaign; "
            f"apply it to the campaign {row.parent_id}.",
            target="action",
        )
    for _ in range(_ATTEMPTS):
        current = CampaignStatus(row.status)
        paused_from = CampaignStatus(row.paused_from) if row.paused_from else None
        change = lifecycle.apply_action(body.action, DeliveryType(row.delivery_type), current, paused_from)
        if change is None:
            raise Unprocessable(
                lifecycle.refusal(body.action, row.delivery_type, current.value), target="action"
            )
        result = await session.execute(
            update(Campaign)
            .where(
                Campaign.workspace_id == workspace_id,
                Campaign.id == row.id,
                Campaign.is_latest,
                Campaign.status == current.value,
            )
            .values(
                status=change.status.value,
                paused_from=change.paused_from.value if change.paused_from else None,
                updated_at=now,
                revision=Campaign.revision + 1,
            )
            .execution_options(synchronize_session=False)
        )
        if getattr(result, "rowcount", 0) == 1:
            if body.action is Action.RESUME and row.delivery_type == DeliveryType.PERIODIC.value:
                # Occurrences missed while paused are skipped: the next run is the next one after now.
                await periodic.record_resume(session, workspace_id, row.campaign_id, now)
            await wake_on_commit(session)  # e.g. a STOP: the engine ends its execution now
            return await _reload(session, row), body.action
        row = await _reload(session, row)
    raise InvalidState("The campaign's status keeps changing under concurrent requests; retry.")
