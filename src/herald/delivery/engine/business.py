"""Business events (a Herald extension): a named event raised for the whole workspace, e.g.
`price_drop` with `{"product": "Boots"}`. Raising one starts a run of every ACTIVE
BUSINESS_EVENT_TRIGGERED campaign whose `basic_details.business_event` names it: an execution of
its own (`run` one more than the campaign's last), RESOLVING, holding the event's attributes for
every user's personalization (`event.*`). The worker resolves and dispatches it like a one-time run
(`engine.tick`), woken at the commit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, ValidationError
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience.attributes import normalise_attributes
from herald.audience.schemas import ActionName, Attributes
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.delivery.engine.models import Execution
from herald.delivery.engine.resolve import ExecutionStatus
from herald.delivery.engine.triggers import BUSINESS
from herald.errors import ValidationFailed
from herald.problems import Problem
from herald.pydantic_errors import problems_from_validation_error
from herald.schemas import APIModel, ResponseModel
from herald.wake import wake_on_commit


class BusinessEventObject(APIModel):
    """A business event: its name (what campaigns' `basic_details.business_event` name) and the
    attributes personalization sees as `event.*`."""

    name: ActionName
    attributes: Attributes = Field(default_factory=dict)


class StartedRun(ResponseModel):
    campaign_id: str
    execution_id: str
    run: int


class BusinessEventResult(ResponseModel):
    name: str
    campaigns_started: int = Field(description="ACTIVE campaigns waiting for this event: one run each.")
    runs: list[StartedRun]


class BusinessEventResponse(ResponseModel):
    response_id: str
    type: Literal["business_event"]
    data: BusinessEventResult


def parse(raw: Any) -> tuple[str, dict[str, Any]]:
    """The event's name and normalised attributes; ValidationFailed with every problem's path."""
    if not isinstance(raw, dict):
        raise ValidationFailed([Problem("INVALID_TYPE", "", "Expected a JSON object.")])
    try:
        body = BusinessEventObject.model_validate(raw)
    except ValidationError as exc:
        raise ValidationFailed(problems_from_validation_error(exc, raw, ())) from None
    attributes, problems = normalise_attributes(body.attributes, ("attributes",))
    if problems:
        raise ValidationFailed(problems)
    return body.name, {k: v for k, v in attributes.items() if v is not None}


async def raise_event(
    session: AsyncSession, workspace_id: str, name: str, attributes: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Start a run of every ACTIVE campaign waiting for `name`, not past its `expiry_time` (the
    caller commits)."""
    rows = (
        await session.execute(
            select(Campaign.id, Campaign.campaign_id, Campaign.components)
            .where(
                Campaign.workspace_id == workspace_id,
                Campaign.is_latest,
                Campaign.status == CampaignStatus.ACTIVE.value,
                Campaign.delivery_type == DeliveryType.BUSINESS_EVENT_TRIGGERED.value,
                # Past its expiry a campaign waits for nothing, ACTIVE until the worker's next
                # tick marks it SENT: a raise then would start a run the worker stops at once.
                or_(Campaign.expiry_at.is_(None), Campaign.expiry_at > now),
            )
            .order_by(Campaign.id)
            # Two raises at once number their runs one after the other.
            .with_for_update()
        )
    ).all()
    runs: list[dict[str, Any]] = []
    for _, campaign_id, components in rows:
        details = (components or {}).get("basic_details")
        if not isinstance(details, dict) or details.get("business_event") != name:
            continue
        last = await session.scalar(
            select(func.max(Execution.run)).where(
                Execution.workspace_id == workspace_id, Execution.campaign_id == campaign_id
            )
        )
        execution = Execution.starting(
            workspace_id,
            campaign_id,
            int(last or 0) + 1,
            ExecutionStatus.RESOLVING,
            now,
            trigger=BUSINESS,
            event=attributes,
        )
        session.add(execution)
        runs.append({"campaign_id": campaign_id, "execution_id": execution.id, "run": execution.run})
    if runs:
        await session.flush()
        await wake_on_commit(session, workspace_id)
    return {"name": name, "campaigns_started": len(runs), "runs": runs}
