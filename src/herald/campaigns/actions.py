"""C5: STOP, PAUSE and RESUME a live campaign (contract §5), applied with a compare-and-set.

The rule is decided on the stored state (`lifecycle.apply_action`) and written with
`UPDATE ... WHERE status = <the state it was decided on>`. When a concurrent request (or the
worker) changed the status first, nothing is written and the action is decided again on the new
state, so every success moves the campaign from the state its rule saw. The row is also read
locked, like every campaign write, so concurrent writers of other kinds queue behind it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from typing import cast as typed

from pydantic import Field, ValidationError
from sqlalchemy import Row, Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import lifecycle, service
from herald.campaigns.lifecycle import Action
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.delivery.engine import periodic
from herald.errors import InvalidState, Unprocessable, ValidationFailed
from herald.ids import is_object_id
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


_CAMPAIGNS = typed(Table, Campaign.__table__)
# Built once, run as Core statements on the session's connection: what the rule decides on, not the
# whole row (its documents are what C5 needs least), and the compare-and-set that writes the move.
_STATE = select(
    *(_CAMPAIGNS.c[name] for name in ("id", "campaign_id", "status", "paused_from", "delivery_type")),
    _CAMPAIGNS.c.parent_id,
).where(
    _CAMPAIGNS.c.workspace_id == bindparam("workspace_id"),
    _CAMPAIGNS.c.campaign_id == bindparam("campaign_id"),
    _CAMPAIGNS.c.is_latest,
)
_STATE_LOCKED = _STATE.with_for_update()
# The SET clause: `status`, `paused_from`, `updated_at` from the parameters, and the revision.
_MOVE = (
    update(_CAMPAIGNS)
    .where(
        _CAMPAIGNS.c.workspace_id == bindparam("row_workspace_id"),
        _CAMPAIGNS.c.id == bindparam("row_id"),
        _CAMPAIGNS.c.is_latest,
        _CAMPAIGNS.c.status == bindparam("decided_on"),
    )
    .values(revision=_CAMPAIGNS.c.revision + 1)
)


async def _state(session: AsyncSession, workspace_id: str, campaign_id: str) -> Row[Any]:
    """The latest version's state, locked as every campaign write locks it (`repository.get_latest`);
    read again when the version waited for stopped being the latest while the request queued."""
    connection = await session.connection()
    key = {"workspace_id": workspace_id, "campaign_id": campaign_id}
    row = None
    if is_object_id(campaign_id):
        row = (await connection.execute(_STATE_LOCKED, key)).first()
        row = row or (await connection.execute(_STATE_LOCKED, key)).first()
    if row is None:
        await service.no_latest(session, workspace_id, campaign_id)
    return row


async def change_status(
    session: AsyncSession, workspace_id: str, campaign_id: str, raw: object, now: datetime
) -> tuple[str, Action]:
    """Apply the body's action: the id of the version row it moved, and the action."""
    body = parse_status_body(raw)
    row = await _state(session, workspace_id, campaign_id)
    if row.parent_id is not None:
        raise Unprocessable(
            f"{body.action.value} cannot be applied to a run of a periodic campaign; "
            f"apply it to the campaign {row.parent_id}.",
            target="action",
        )
    connection = await session.connection()
    for _ in range(_ATTEMPTS):
        current = CampaignStatus(row.status)
        paused_from = CampaignStatus(row.paused_from) if row.paused_from else None
        change = lifecycle.apply_action(body.action, DeliveryType(row.delivery_type), current, paused_from)
        if change is None:
            raise Unprocessable(
                lifecycle.refusal(body.action, row.delivery_type, current.value), target="action"
            )
        values = {
            "status": change.status.value,
            "paused_from": change.paused_from.value if change.paused_from else None,
            "updated_at": now,
        }
        key = {"row_workspace_id": workspace_id, "row_id": row.id, "decided_on": current.value}
        result = await connection.execute(_MOVE, {**values, **key})
        if result.rowcount == 1:
            if body.action is Action.RESUME and row.delivery_type == DeliveryType.PERIODIC.value:
                # Occurrences missed while paused are skipped: the next run is the next one after now.
                await periodic.record_resume(session, workspace_id, row.campaign_id, now)
            if current is not CampaignStatus.SCHEDULED:
                # The engine ends (or resumes) the execution now. A scheduled campaign has none yet:
                # waking every worker for it only cost them a tick over every workspace.
                await wake_on_commit(session, workspace_id)
            return row.id, body.action
        row = await _state(session, workspace_id, campaign_id)
    raise InvalidState("The campaign's status keeps changing under concurrent requests; retry.")
