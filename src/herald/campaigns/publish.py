"""L1, the earlier API's update-and-publish (contract §5 L1), and versioning of live campaigns.

The body is C3's (same components, same rules) plus `request_id` and `updated_by`, both required,
and an optional `status: "PUBLISH"`. Unlike C3, a component carries only the fields that change: it
is merged into the stored one first (`v1_merge`), then the merged campaign meets C3's rules.

- without `status`, the components are applied in place, as C3 does;
- a DRAFT that passes DRAFT_PUBLISH (else 422 with every failure) becomes SCHEDULED or ACTIVE
  (`lifecycle.publish_status`) and loses its rejection comment;
- publishing changes to a live campaign (SCHEDULED, ACTIVE, PAUSED, SENDING) checks DRAFT_PUBLISH
  too; with the workspace's `versioning` flag it inserts a new version document (`version_number`
  + 1, same `campaign_id`, new `id`, same status) and the old one stays as an immutable snapshot;
  without the flag, or when nothing changes, the campaign is changed in place.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns import lifecycle, repository, service, v1_merge
from herald.campaigns.models import Campaign
from herald.campaigns.schemas.campaign import (
    AnyChannelUpdate,
    EmailCampaignUpdate,
    PushCampaignUpdate,
    RequestId,
)
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType, Feature
from herald.campaigns.validation import UpdateModels
from herald.delivery.engine import periodic, resumes
from herald.email_address import EmailAddress
from herald.errors import Unprocessable
from herald.ids import object_id
from herald.joined_writes import Answer, ClaimedRead
from herald.problems import Problem
from herald.wake import wake_on_commit

PUBLISH = "PUBLISH"


class V1Status(StrEnum):
    PUBLISH = PUBLISH


class PushCampaignV1Update(PushCampaignUpdate):
    request_id: RequestId
    updated_by: EmailAddress
    status: V1Status | None = None


class EmailCampaignV1Update(EmailCampaignUpdate):
    request_id: RequestId
    updated_by: EmailAddress
    status: V1Status | None = None


class AnyChannelV1Update(AnyChannelUpdate):
    """An L1 body on a campaign of a channel v5 cannot update: its L1 fields are still L1's."""

    request_id: RequestId
    updated_by: EmailAddress
    status: V1Status | None = None


V1_MODELS = UpdateModels(
    by_channel={"PUSH": PushCampaignV1Update, "EMAIL": EmailCampaignV1Update},
    any_channel=AnyChannelV1Update,
)


def asks_to_publish(raw: object) -> bool:
    return isinstance(raw, dict) and raw.get("status") == PUBLISH


async def update_and_publish(
    session: AsyncSession,
    workspace: service.Workspace,
    campaign_id: str,
    raw: object,
    now: datetime,
    answer: Answer[tuple[str, int]] | None = None,
    read: ClaimedRead | None = None,
) -> None:
    """Apply an L1 body to the campaign. An update without `status` is written as C3 writes
    (Core statements; `answer` and `read` as `service.update_campaign` takes them); a publish
    works on the loaded row."""
    stored = await service.get_stored(session, workspace.id, campaign_id, for_update=True, read=read)
    publishing = asks_to_publish(raw)
    status = CampaignStatus(stored.status)
    if publishing and status is not CampaignStatus.DRAFT and status not in lifecycle.LIVE:
        raise Unprocessable(f"A {status.value} campaign cannot be published.", target="status")
    body = v1_merge.merged_body(stored.components, raw)
    if not publishing:
        checked = service.check_update(workspace, stored, body, V1_MODELS)
        await service.keep_publishable(session, workspace, stored, checked, now)
        await service.write_update(session, workspace.id, stored, checked, now, answer)
        return
    # The row is locked already (read above): loading it whole costs a statement, on publishes only.
    row = await service.get_campaign(session, workspace.id, campaign_id, for_update=True)
    prepared = service.prepare_update(workspace, row, body, V1_MODELS)
    problems = await service.publish_problems(session, workspace, prepared.merged, now)
    if problems:
        raise Unprocessable(_publish_message(problems), details=problems)
    await wake_on_commit(
        session, workspace.id
    )  # an ASAP campaign starts sending at the next tick: make it now
    if status is CampaignStatus.DRAFT:
        await _publish_draft(session, prepared, now)
    elif Feature.VERSIONING.value in workspace.features and prepared.changes_components:
        await _new_version(session, prepared, now)
    else:
        await service.apply_update(session, prepared, now)


def _publish_message(problems: list[Problem]) -> str:
    count = len(problems)
    return f"The campaign cannot be published: {count} problem{'s' if count != 1 else ''} found."


async def _publish_draft(session: AsyncSession, prepared: service.PreparedUpdate, now: datetime) -> Campaign:
    row = await service.apply_update(session, prepared, now)
    target = lifecycle.publish_status(
        DeliveryType(row.delivery_type), lifecycle.scheduling_type(row.components), row.begins_at, now
    )
    # Compare-and-set: of two publishes racing on one draft, the second finds it no longer DRAFT.
    result = await session.execute(
        update(Campaign)
        .where(
            Campaign.workspace_id == row.workspace_id,
            Campaign.id == row.id,
            Campaign.status == CampaignStatus.DRAFT.value,
        )
        .values(status=target.value, rejection_comment=None, published_at=now)
        .execution_options(synchronize_session="fetch")
    )
    if getattr(result, "rowcount", 0) != 1:
        raise service.stale()
    if row.delivery_type == DeliveryType.PERIODIC.value:
        # Its occurrences before the publish predate the campaign: none is run late (a start
        # months back ran the latest one at once, to everyone), as none is after a RESUME.
        await periodic.record_resume(session, row.workspace_id, row.campaign_id, now)
    return row


async def _new_version(session: AsyncSession, prepared: service.PreparedUpdate, now: datetime) -> Campaign:
    old = prepared.row
    # Compare-and-set on the revision read: a concurrent change to the live version wins, not both.
    result = await session.execute(
        update(Campaign)
        .where(
            Campaign.workspace_id == old.workspace_id,
            Campaign.id == old.id,
            Campaign.is_latest,
            Campaign.revision == old.revision,
        )
        .values(is_latest=False)
        .execution_options(synchronize_session="fetch")
    )
    if getattr(result, "rowcount", 0) != 1:
        raise service.stale()
    components = prepared.components
    await resumes.record_schedule_change(
        session, old.workspace_id, old.id, old.delivery_type, old.status, old.components, components, now
    )
    row = Campaign(
        workspace_id=old.workspace_id,
        id=object_id(now),
        campaign_id=old.campaign_id,
        version_number=old.version_number + 1,
        is_latest=True,
        revision=1,
        channel=old.channel,
        delivery_type=old.delivery_type,
        status=old.status,
        paused_from=old.paused_from,
        # The campaign was created then, by them; this version is an update of it.
        created_by=old.created_by,
        created_at=old.created_at,
        updated_by=prepared.body.updated_by or old.updated_by,
        updated_at=now,
        sent_time=old.sent_time,
        published_at=old.published_at,
        flow_id=old.flow_id,
        flow_name=old.flow_name,
        parent_id=old.parent_id,
        sender_name=old.sender_name,
        components=components,
        **service.derived_columns(components),
    )
    session.add(row)
    await session.flush()
    repository.add_tags(session, row, row.tags)
    await session.flush()
    # Any earlier version a status move had to leave (its row was held) takes the status now.
    columns = {name: getattr(row, name) for name in repository.LIFECYCLE_COLUMNS}
    await repository.align_earlier_versions(session, row.workspace_id, row.id, columns)
    return row
