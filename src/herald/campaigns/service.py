"""Campaign draft use cases: create (C1), get (C2), update (C3), validate (C4).

Services never commit (the request's unit of work does) and take plain values, never HTTP objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from herald.campaigns import repository
from herald.campaigns.editability import not_editable
from herald.campaigns.lifecycle import schedule_instants
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.campaign import CampaignDocument, CampaignUpdate, sent_components
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType
from herald.campaigns.validation import (
    Stage,
    UpdateModels,
    load_document,
    parse_create,
    parse_update,
    validate_campaign,
)
from herald.delivery import connectors as delivery_connectors
from herald.errors import DuplicateRequestId, InvalidState, NotFound, PreconditionFailed, ValidationFailed
from herald.ids import is_object_id, object_id
from herald.personalization import check_template
from herald.problems import Problem

# After a successful create, its request_id cannot be reused for this long (spec: Limits).
REQUEST_ID_HOLD = {Channel.PUSH: timedelta(hours=1), Channel.EMAIL: timedelta(days=1)}

Reserve = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Workspace:
    id: str
    features: frozenset[str]


def _name_and_tags(components: dict[str, Any]) -> tuple[str | None, list[str]]:
    basic = components.get("basic_details") or {}
    name = basic.get("name") if isinstance(basic.get("name"), str) else None
    tags = [tag for tag in basic.get("tags") or [] if isinstance(tag, str)]
    return name, tags


def derived_columns(components: dict[str, Any]) -> dict[str, Any]:
    """The searchable columns a row keeps in step with its components."""
    name, tags = _name_and_tags(components)
    start_at, expiry_at = schedule_instants(components)
    return {"name": name, "tags": tags, "start_at": start_at, "expiry_at": expiry_at}


async def create_campaign(
    session: AsyncSession, workspace: Workspace, raw: object, now: datetime, reserve_success: Reserve
) -> tuple[str, str]:
    """A new draft from a C1 body: its id and status."""
    body, problems = parse_create(raw)
    if body is None:
        raise ValidationFailed(problems)
    document = CampaignDocument.from_create(body)
    problems = validate_campaign(document, Stage.DRAFT_CREATE, workspace.features, sent_components(body))
    if problems:
        raise ValidationFailed(problems)

    campaign_id = object_id(now)
    if body.request_id is not None:
        holder = await repository.held_request_id(session, workspace.id, body.request_id, now)
        if holder is not None:
            raise _duplicate_request_id(holder)
    await reserve_success()

    components = document.components_json()
    status = CampaignStatus.DRAFT.value
    values = {
        "workspace_id": workspace.id,
        "id": campaign_id,
        "campaign_id": campaign_id,
        "version_number": 1,
        "is_latest": True,
        "revision": 1,
        "channel": document.channel.value,
        "delivery_type": document.delivery_type.value,
        "status": status,
        "created_by": body.created_by,
        "created_at": now,
        "updated_at": now,
        "request_id": body.request_id,
        "components": components,
        **derived_columns(components),
    }
    hold = None
    if body.request_id is not None:
        hold = {
            "workspace_id": workspace.id,
            "request_id": body.request_id,
            "campaign_id": campaign_id,
            "expires_at": now + REQUEST_ID_HOLD[document.channel],
        }
    try:
        await repository.insert_new(session, values, hold)
    except IntegrityError:
        # A concurrent create with the same request_id committed first.
        raise _duplicate_request_id(None) from None
    return campaign_id, status


def _duplicate_request_id(campaign_id: str | None) -> DuplicateRequestId:
    owner = f" by campaign {campaign_id}" if campaign_id else ""
    return DuplicateRequestId(
        f"This request_id was already used{owner} in a successful create.", target="request_id"
    )


async def get_campaign(
    session: AsyncSession, workspace_id: str, campaign_id: str, *, for_update: bool = False
) -> Campaign:
    """The latest version of a campaign, by `campaign_id` (what C3, C4, C5 and L1 act on).

    A writer passes `for_update`: the row stays locked until its transaction ends (see
    `repository.get_latest`), so what it decides on is what it writes over.
    """
    row: Campaign | None = None
    if is_object_id(campaign_id):
        row = await repository.get_latest(session, workspace_id, campaign_id, for_update=for_update)
        if row is None and for_update:
            # The version waited for stopped being the latest while we queued (a publish made a new
            # version): a new statement sees, and locks, the one that replaced it.
            row = await repository.get_latest(session, workspace_id, campaign_id, for_update=True)
    if row is None:
        snapshot = (
            await repository.get_version(session, workspace_id, campaign_id)
            if is_object_id(campaign_id)
            else None
        )
        if snapshot is not None:
            raise InvalidState(
                f"{campaign_id} is version {snapshot.version_number} of campaign {snapshot.campaign_id}, "
                "an immutable snapshot; address the campaign by its campaign_id.",
                target="campaign_id",
            )
        raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")
    return row


async def get_campaign_or_version(
    session: AsyncSession, workspace_id: str, some_id: str, version_number: int | None = None
) -> Campaign:
    """C2: a `campaign_id` names the latest version, or version `version_number` when given; the
    `id` of a later version document names that version."""
    row: Campaign | None = None
    if is_object_id(some_id):
        if version_number is not None:
            row = await repository.get_numbered_version(session, workspace_id, some_id, version_number)
        else:
            row = await repository.get_latest(session, workspace_id, some_id)
            row = row or await repository.get_version(session, workspace_id, some_id)
    if row is None:
        raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")
    return row


@dataclass(frozen=True)
class PreparedUpdate:
    """An update that passed every check, not yet written: the stored row and the merged campaign."""

    row: Campaign
    body: CampaignUpdate
    merged: CampaignDocument

    @property
    def components(self) -> dict[str, Any]:
        return self.merged.components_json()

    @property
    def changes_components(self) -> bool:
        return self.components != self.row.components


def prepare_update(
    workspace: Workspace, row: Campaign, raw: object, models: UpdateModels | None = None
) -> PreparedUpdate:
    """Parse and check an update of `row` (contract §5 C3) without writing; raises on any problem.

    `models` picks the body models per channel (L1 reads its own body with the same components).
    """
    channel, delivery_type = Channel(row.channel), DeliveryType(row.delivery_type)
    body, problems = parse_update(
        raw, stored_channel=channel, stored_delivery_type=delivery_type, models=models
    )
    if body is None:
        raise ValidationFailed(problems)
    sent = sent_components(body)
    sent_json = {name: _component_json(body, name) for name in sent}

    blocked = not_editable(CampaignStatus(row.status), row.components, sent_json)
    if blocked:
        raise InvalidState(_state_message(row.status), details=blocked)

    stored, stored_problems = load_document(channel, delivery_type, row.components)
    if stored is None:
        raise ValidationFailed(stored_problems, "The stored campaign cannot be read; resend every component.")
    merged = stored.merged(body)
    problems = validate_campaign(merged, Stage.DRAFT_PATCH, workspace.features, sent, previous=stored)
    if problems:
        raise ValidationFailed(problems)
    return PreparedUpdate(row=row, body=body, merged=merged)


async def apply_update(session: AsyncSession, prepared: PreparedUpdate, now: datetime) -> Campaign:
    """Write a prepared update onto its row, in place."""
    row = prepared.row
    components = prepared.components
    row.components = components
    for name, value in derived_columns(components).items():
        setattr(row, name, value)
    if prepared.body.updated_by is not None:
        row.updated_by = prepared.body.updated_by
    row.updated_at = now
    row.revision += 1
    await flush(session)
    await repository.replace_tags(session, row, row.tags)
    await session.flush()
    return row


def stale() -> InvalidState:
    return InvalidState("The campaign was changed by a concurrent request; read it again and retry.")


async def flush(session: AsyncSession) -> None:
    """Write the pending changes of loaded campaign rows, each with a compare-and-set on `revision`.

    Rows are loaded locked before they are changed, so a stale row is not expected; should one
    slip through, the compare-and-set on `revision` refuses it instead of losing the other write.
    """
    try:
        await session.flush()
    except StaleDataError:
        raise stale() from None


async def update_campaign(
    session: AsyncSession,
    workspace: Workspace,
    campaign_id: str,
    raw: object,
    now: datetime,
    if_match: str | None,
    current_etag: Callable[[Campaign], str],
) -> Campaign:
    row = await get_campaign(session, workspace.id, campaign_id, for_update=True)
    if if_match is not None and if_match.strip() not in ("*", current_etag(row)):
        raise PreconditionFailed(target="If-Match")
    return await apply_update(session, prepare_update(workspace, row, raw), now)


def _component_json(body: Any, name: str) -> Any:
    value = getattr(body, name)
    return value.model_dump(mode="json", exclude_unset=True) if value is not None else None


def _state_message(status: str) -> str:
    return f"The campaign is {status}; the request changes fields this state does not allow."


async def validate_stored(session: AsyncSession, workspace: Workspace, campaign_id: str) -> list[Problem]:
    """DRAFT_PUBLISH on the saved campaign, read-only."""
    row = await get_campaign(session, workspace.id, campaign_id)
    channel, delivery_type = Channel(row.channel), DeliveryType(row.delivery_type)
    document, problems = load_document(channel, delivery_type, row.components)
    if document is None:
        return problems
    return await publish_problems(session, workspace, document)


async def publish_problems(
    session: AsyncSession, workspace: Workspace, document: CampaignDocument
) -> list[Problem]:
    """DRAFT_PUBLISH with the workspace's connectors: what C4 reports and what L1 refuses to publish.
    An Email campaign must name one of its e-mail connectors; a Push campaign needs a push
    connector the engine can choose (the one named, or the only one)."""
    return validate_campaign(
        document,
        Stage.DRAFT_PUBLISH,
        workspace.features,
        configured_connectors=await delivery_connectors.configured_names(session, workspace.id),
        push_connectors=await delivery_connectors.configured_names(session, workspace.id, Channel.PUSH),
        check_template=check_template,
    )
