"""C5: STOP, PAUSE and RESUME a live campaign (contract §5), applied with a compare-and-set.

The rule is decided on the stored state (`lifecycle.apply_action`) and written with
`UPDATE ... WHERE status = <the state it was decided on>`, so every success moves the campaign from
the state its rule saw. The row is read locked, like every campaign write, so concurrent writers (the
worker's transitions too) queue behind it: the compare-and-set cannot then find another state, and
if it ever did, the request fails (409, retry) and writes nothing.

On PostgreSQL the request's Idempotency-Key is claimed in the statement that reads the row, and its
record is written in the statement that moves it (`herald.joined_writes`): four round trips, BEGIN
and COMMIT included.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from typing import cast as typed

from pydantic import Field, ValidationError
from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import lifecycle, repository, service
from herald.campaigns.lifecycle import Action
from herald.campaigns.models import Campaign
from herald.campaigns.repository import LATEST_BY_CAMPAIGN_ID
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType
from herald.delivery.engine import abandoned, periodic
from herald.errors import InvalidState, Unprocessable, ValidationFailed
from herald.ids import is_object_id
from herald.joined_writes import Answer, ClaimedRead, execute_with
from herald.pydantic_errors import problems_from_validation_error
from herald.schemas import APIModel
from herald.wake import wake_on_commit


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
).where(*LATEST_BY_CAMPAIGN_ID)
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


async def _state(
    session: AsyncSession, workspace_id: str, campaign_id: str, read: ClaimedRead
) -> dict[str, Any]:
    """The latest version's state, locked as every campaign write locks it (`repository.get_latest`),
    read by `read` (the first time with the request's claim); read again when the version waited for
    stopped being the latest while the request queued."""
    key = {"workspace_id": workspace_id, "campaign_id": campaign_id}
    if not is_object_id(campaign_id):
        await read(session, None, key)  # no row to read: the claim still answers first
        await service.no_latest(session, workspace_id, campaign_id)

    async def latest(some_id: str) -> dict[str, Any] | None:
        return await read(session, _STATE_LOCKED, {**key, "campaign_id": some_id})

    # Read again as C3 and L1 read, as long as publishes queued ahead replace the version it waited
    # for: two publishes in a row used to make a PAUSE by campaign_id answer that it named an old
    # version.
    return await service.requeued_latest(session, workspace_id, campaign_id, latest, for_update=True)


async def change_status(
    session: AsyncSession,
    workspace_id: str,
    campaign_id: str,
    body: StatusBody | None,
    now: datetime,
    answer: Answer[tuple[str, Action]] | None,
    read: ClaimedRead,
) -> tuple[str, Action]:
    """Apply `body`'s action (None: `read` raises the body's refusal once the key is claimed): the id
    of the version row it moved, and the action. `answer` is called with them just before the move,
    which writes what it returns (`herald.joined_writes`)."""
    row = await _state(session, workspace_id, campaign_id, read)
    assert body is not None  # a refused body was raised by the read
    if row["parent_id"] is not None:
        raise Unprocessable(
            f"{body.action.value} cannot be applied to a run of a periodic campaign; "
            f"apply it to the campaign {row['parent_id']}.",
            target="action",
        )
    current = CampaignStatus(row["status"])
    paused_from = CampaignStatus(row["paused_from"]) if row["paused_from"] else None
    change = lifecycle.apply_action(body.action, DeliveryType(row["delivery_type"]), current, paused_from)
    if change is None:
        raise Unprocessable(
            lifecycle.refusal(body.action, row["delivery_type"], current.value), target="action"
        )
    values = {
        "status": change.status.value,
        "paused_from": change.paused_from.value if change.paused_from else None,
        "updated_at": now,
    }
    key = {"row_workspace_id": workspace_id, "row_id": row["id"], "decided_on": current.value}
    joined = answer((row["id"], body.action)) if answer is not None else None
    moved = await execute_with(await session.connection(), _MOVE, _CAMPAIGNS, {**values, **key}, joined)
    if moved != 1:  # the row's lock makes this unreachable; never write over another state
        raise InvalidState("The campaign's status changed under a concurrent request; retry.")
    await repository.align_earlier_versions(session, workspace_id, row["id"], values)
    if body.action is Action.PAUSE and row["delivery_type"] == DeliveryType.PERIODIC.value:
        await abandoned.end_runs_of(session, workspace_id, row["campaign_id"], now)
    if body.action is Action.RESUME and row["delivery_type"] == DeliveryType.PERIODIC.value:
        # Occurrences missed while paused are skipped: the next run is the next one after now.
        await periodic.record_resume(session, workspace_id, row["campaign_id"], now)
    if current is not CampaignStatus.SCHEDULED:
        # The engine ends (or resumes) the execution now. A scheduled campaign has none yet: waking
        # every worker for it only cost them a tick over every workspace.
        await wake_on_commit(session, workspace_id)
    return row["id"], body.action
