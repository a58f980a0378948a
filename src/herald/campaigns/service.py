"""Campaign draft use cases: create (C1), get (C2), update (C3), validate (C4).

Services never commit (the request's unit of work does) and take plain values, never HTTP objects.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, NoReturn, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from herald.audience.segmentation.audience import audience_problems, filter_problems
from herald.campaigns import repository
from herald.campaigns.editability import not_editable, run_not_editable
from herald.campaigns.lifecycle import begins_at, schedule_instants
from herald.campaigns.models import Campaign, StoredCampaign
from herald.campaigns.schemas.campaign import (
    CampaignCreate,
    CampaignDocument,
    CampaignUpdate,
    sent_components,
)
from herald.campaigns.schemas.common import CREATABLE_CHANNELS, CampaignStatus, Channel, DeliveryType
from herald.campaigns.validation import (
    SoundPart,
    Stage,
    UpdateModels,
    load_document,
    parse_create,
    parse_update,
    sound_part,
    unparsed_utm_params,
    validate_campaign,
)
from herald.campaigns.validation.salvage import concerns
from herald.delivery import connectors as delivery_connectors
from herald.delivery.engine import resumes
from herald.errors import (
    DuplicateRequestId,
    HeraldError,
    InvalidState,
    NotFound,
    PreconditionFailed,
    ValidationFailed,
)
from herald.ids import is_object_id, object_id
from herald.joined_writes import Answer, ClaimedRead, ClaimedStatement
from herald.personalization import check_template
from herald.personalization.personalize import custom_templates
from herald.problems import Problem, fields_at_fault
from herald.wake import wake_on_commit

# After a successful create, its request_id cannot be reused for this long (spec: Limits).
REQUEST_ID_HOLD = {Channel.PUSH: timedelta(hours=1), Channel.EMAIL: timedelta(days=1)}

Reserve = Callable[[], Awaitable[None]]
T = TypeVar("T")


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
    return {
        "name": name,
        "tags": tags,
        "start_at": start_at,
        "begins_at": begins_at(components),
        "expiry_at": expiry_at,
    }


def check_create(workspace: Workspace, raw: object) -> tuple[CampaignCreate, CampaignDocument]:
    """A C1 body read and judged by itself (400 with every problem, raised); nothing is read or
    written, so the guard may also ask it of a request refused for its head."""
    body, problems = parse_create(raw)
    if body is None:
        beyond = _create_rules_beyond(workspace, raw, problems)
        raise ValidationFailed([*problems, *beyond, *unparsed_utm_params(raw, problems)])
    document = CampaignDocument.from_create(body)
    problems = validate_campaign(document, Stage.DRAFT_CREATE, workspace.features, sent_components(body))
    if problems:
        raise ValidationFailed(problems)
    return body, document


async def create_campaign(
    session: AsyncSession,
    workspace: Workspace,
    raw: object,
    now: datetime,
    reserve_success: Reserve,
    answer: Answer[tuple[str, str]] | None = None,
    *,
    claimed: ClaimedStatement | None = None,
) -> tuple[str, str]:
    """A new draft from a C1 body: its id and status. `reserve_success` takes the success quota's
    slot (or refuses, 429) once the body has passed its checks: a create that fails them never
    holds one, so concurrent failures cannot crowd out a success (the slot is given back if the
    write then fails). `claimed`: the request's Idempotency-Key claim left to this write, claimed
    with it, once the body is parsed and validated (on SQLite the write lock is not held through
    that work): the claim, the hold, the row and the answer's record are written by themselves, in
    one statement on PostgreSQL, in a short transaction on the driver on SQLite."""
    body, document = check_create(workspace, raw)
    await reserve_success()

    campaign_id = object_id(now)
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
    joined = answer((campaign_id, status)) if answer is not None else None
    hold: dict[str, Any] | None = None
    if body.request_id is not None:
        hold = {
            "workspace_id": workspace.id,
            "request_id": body.request_id,
            "campaign_id": campaign_id,
            "expires_at": now + REQUEST_ID_HOLD[document.channel],
        }
    if claimed is not None:
        # By itself only where the create holds a request_id.
        if (
            hold is not None
            and claimed.by_itself
            and await repository.insert_claimed_held(claimed, hold, now, values, joined)
        ):
            claimed.written()
            return campaign_id, status
        await claimed.apart(session)  # the key answers (a replay, a 409), else it is ours
    if hold is not None:
        holder = await repository.insert_held(session, hold, now, values, joined)
        if holder is not None:
            raise _duplicate_request_id(holder)
        return campaign_id, status
    await repository.insert_new(session, values, joined)
    return campaign_id, status


def _duplicate_request_id(campaign_id: str) -> DuplicateRequestId:
    return DuplicateRequestId(
        f"This request_id was already used by campaign {campaign_id} in a successful create.",
        target="request_id",
    )


async def get_campaign(
    session: AsyncSession, workspace_id: str, campaign_id: str, *, for_update: bool = False
) -> Campaign:
    """The latest version of a campaign, by `campaign_id` (what C5 and L1 act on).

    A writer passes `for_update`: the row stays locked until its transaction ends (see
    `repository.get_latest`), so what it decides on is what it writes over.
    """

    async def latest(some_id: str) -> Campaign | None:
        return await repository.get_latest(session, workspace_id, some_id, for_update=for_update)

    return await requeued_latest(session, workspace_id, campaign_id, latest, for_update)


async def get_stored(
    session: AsyncSession,
    workspace_id: str,
    campaign_id: str,
    *,
    for_update: bool = False,
    read: ClaimedRead | None = None,
) -> StoredCampaign:
    """`get_campaign`, reading only what `StoredCampaign` holds, without an ORM instance (C3, C4,
    L1); `read` runs the first read (see `herald.joined_writes.ClaimedRead`)."""

    async def latest(some_id: str) -> StoredCampaign | None:
        return await repository.stored_latest(
            session, workspace_id, some_id, for_update=for_update, read=read
        )

    if read is not None and not is_object_id(campaign_id):
        await read(session, None, {})  # no row to read: the claim still answers first
    return await requeued_latest(session, workspace_id, campaign_id, latest, for_update)


async def requeued_latest(
    session: AsyncSession,
    workspace_id: str,
    campaign_id: str,
    latest: Callable[[str], Awaitable[T | None]],
    for_update: bool,
) -> T:
    """What `latest` reads of the campaign's latest version (given the campaign's id), read again
    while a publish replaced the version it queued for; `no_latest`'s error when there is none.
    The latest version's own `id` names its campaign too: C3 and C5 answer with it, and a client
    that chains calls on the `id` it was given must not be told it named an old snapshot."""
    row: T | None = None
    if is_object_id(campaign_id):
        row = await latest(campaign_id)
        # The version waited for stopped being the latest while we queued (a publish made a new
        # version): a new statement sees, and locks, the one that replaced it, which the next
        # publish queued ahead of us may replace in turn. Looked for again as long as the campaign
        # has a latest version at all (a bound against a loop, never reached by honest traffic).
        for _ in range(_REQUEUES):
            if (
                row is not None
                or not for_update
                or not await repository.has_latest(session, workspace_id, campaign_id)
            ):
                break
            row = await latest(campaign_id)
    if row is None:
        version = await _version_named(session, workspace_id, campaign_id)
        if version is not None and version.is_latest and version.campaign_id != campaign_id:
            return await requeued_latest(session, workspace_id, version.campaign_id, latest, for_update)
        _refuse_as_no_latest(campaign_id, version)
    return row


_REQUEUES = 1000


async def no_latest(session: AsyncSession, workspace_id: str, campaign_id: str) -> NoReturn:
    """The error for an id that names no latest version: a version's own id (an immutable
    snapshot) or nothing at all."""
    _refuse_as_no_latest(campaign_id, await _version_named(session, workspace_id, campaign_id))


async def _version_named(session: AsyncSession, workspace_id: str, some_id: str) -> Campaign | None:
    """The version document whose own `id` is `some_id`, if any."""
    return await repository.get_version(session, workspace_id, some_id) if is_object_id(some_id) else None


def _refuse_as_no_latest(campaign_id: str, snapshot: Campaign | None) -> NoReturn:
    if snapshot is not None:
        raise InvalidState(
            f"{campaign_id} is version {snapshot.version_number} of campaign {snapshot.campaign_id}, "
            "an immutable snapshot; address the campaign by its campaign_id.",
            target="campaign_id",
        )
    raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")


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
            row = await repository.get_latest_or_version(session, workspace_id, some_id)
    if row is None:
        raise NotFound("No campaign with this id exists in the workspace.", target="campaign_id")
    return row


@dataclass(frozen=True)
class CheckedUpdate:
    """An update that passed every check: the body, the campaign it makes and the stored
    components it was checked against."""

    body: CampaignUpdate
    merged: CampaignDocument
    stored_components: Mapping[str, Any]

    @cached_property
    def components(self) -> dict[str, Any]:
        """The merged campaign's components as stored; those not sent are kept as read."""
        return self.merged.components_json(self.stored_components, sent_components(self.body))


@dataclass(frozen=True)
class PreparedUpdate(CheckedUpdate):
    """A checked update of a loaded row, not yet written."""

    row: Campaign

    @property
    def changes_components(self) -> bool:
        return self.components != self.row.components


def check_update_body(raw: object) -> None:
    """A C3 body's faults that hold whatever the stored campaign's channel (its components are read
    as that channel's): those found reading it as each channel's update, raised (400). Nothing is
    read: the guard asks it of a request refused for its head (`Operation.body_check`)."""
    found = [parse_update(raw, stored_channel=channel)[1] for channel in sorted(CREATABLE_CHANNELS)]
    everywhere = set.intersection(*({(p.code, p.target) for p in problems} for problems in found))
    if problems := [problem for problem in found[0] if (problem.code, problem.target) in everywhere]:
        raise ValidationFailed(problems)


async def check_stored_update(
    session: AsyncSession,
    workspace: Workspace,
    campaign_id: str,
    raw: object,
    merged: Callable[[Mapping[str, Any], object], object] | None = None,
    models: UpdateModels | None = None,
) -> None:
    """A C3 body's faults (an L1 body's: `merged` over the stored components, read with `models`),
    as `check_update` finds them against the stored campaign (read, not locked), raised (400);
    when there is no such campaign, those `check_update_body` finds of a C3 body. For a request
    refused for its head (`Operation.stored_body_check`), so that the channel's own faults and the
    rules across components are named with the head's."""
    try:
        stored = await get_stored(session, workspace.id, campaign_id)
    except HeraldError:
        if merged is None:
            check_update_body(raw)
        return
    check_update(workspace, stored, merged(stored.components, raw) if merged else raw, models)


def check_update(
    workspace: Workspace,
    stored: StoredCampaign,
    raw: object,
    models: UpdateModels | None = None,
) -> CheckedUpdate:
    """Parse and check an update of `stored` (contract §5 C3) without writing; raises on any problem.

    `models` picks the body models per channel (L1 reads its own body with the same components).
    What a live campaign must keep is checked against the workspace next (`keep_publishable`).
    """
    channel, delivery_type = Channel(stored.channel), DeliveryType(stored.delivery_type)
    body, problems = parse_update(
        raw, stored_channel=channel, stored_delivery_type=delivery_type, models=models
    )
    if body is None:
        beyond = _patch_rules_beyond(workspace, stored, raw, problems)
        raise ValidationFailed([*problems, *beyond, *unparsed_utm_params(raw, problems)])
    sent = sent_components(body)
    sent_json = {name: _component_json(body, name) for name in sent}

    if stored.parent_id is not None:
        # A run's child campaign is the record of what the run sends: its content was fixed when
        # it started, and a change of the campaign applies from its next run (README, "Periodic").
        raise InvalidState(
            f"The campaign is a run of the periodic campaign {stored.parent_id}; change that campaign "
            "instead (a change applies from its next run).",
            details=run_not_editable(stored.components, sent_json),
        )
    blocked = not_editable(CampaignStatus(stored.status), stored.components, sent_json)
    if blocked:
        raise InvalidState(_state_message(stored.status), details=blocked)

    current, stored_problems = load_document(channel, delivery_type, stored.components)
    if current is None:
        raise ValidationFailed(stored_problems, "The stored campaign cannot be read; resend every component.")
    merged = current.merged(body)
    problems = validate_campaign(merged, Stage.DRAFT_PATCH, workspace.features, sent, previous=current)
    if problems:
        raise ValidationFailed(problems)
    return CheckedUpdate(body=body, merged=merged, stored_components=stored.components)


async def keep_publishable(
    session: AsyncSession, workspace: Workspace, stored: StoredCampaign, checked: CheckedUpdate, now: datetime
) -> None:
    """A draft may be anything a draft may be (it is checked for publishing when it is published),
    but a campaign past DRAFT was published and keeps what publishing needs, with the workspace's
    connectors, senders and segments: an update is refused (400 at each field) where the campaign
    would fail a publish check it passed before. Whatever component was sent: a platform added in
    `basic_details` without its message in `campaign_content` is as unsendable as a message
    removed. Otherwise a live campaign could be changed into one publishing refuses, and its
    messages sent as they were. A problem the campaign had already (a connector removed since)
    does not block other changes."""
    if stored.status == CampaignStatus.DRAFT:
        return
    after = await publish_problems(session, workspace, checked.merged, now)
    if not after:
        return
    current, _ = load_document(Channel(stored.channel), DeliveryType(stored.delivery_type), stored.components)
    before = await publish_problems(session, workspace, current, now) if current is not None else []
    known = {(problem.code, problem.target) for problem in before}
    if new := [problem for problem in after if (problem.code, problem.target) not in known]:
        raise ValidationFailed(new)


def _rules_beyond(
    workspace: Workspace,
    base: CampaignDocument,
    part: SoundPart | None,
    stage: Stage,
    problems: list[Problem],
    previous: CampaignDocument | None,
) -> list[Problem]:
    """The rules' problems of the components that parsed (`parse.sound_part`) in a body that did
    not, merged over `base`, each not already among `problems` nor about a value left out."""
    if part is None:
        return []
    found = validate_campaign(
        base.merged(part.body), stage, workspace.features, sent_components(part.body), previous=previous
    )
    known = {(problem.code, problem.target) for problem in problems}
    return [
        problem
        for problem in found
        if (problem.code, problem.target) not in known
        # A feature gate holds whatever the values left out were: the component was sent.
        and (problem.code == "FEATURE_NOT_ENABLED" or not concerns(problem.target, part.left_out))
    ]


def _create_rules_beyond(workspace: Workspace, raw: object, problems: list[Problem]) -> list[Problem]:
    """C1: the rules of a failed create's sound components, each read alone as at create, when its
    channel and delivery type were read."""
    spoiled = fields_at_fault(problems)
    if not isinstance(raw, dict) or spoiled & {"", "channel", "campaign_delivery_type"}:
        return []
    try:
        channel = Channel(str(raw.get("channel")))
        delivery_type = DeliveryType(str(raw.get("campaign_delivery_type")))
    except ValueError:
        return []
    part = sound_part(raw, problems, channel)
    base = CampaignDocument(channel, delivery_type)
    return _rules_beyond(workspace, base, part, Stage.DRAFT_CREATE, problems, previous=None)


def _patch_rules_beyond(
    workspace: Workspace, stored: StoredCampaign, raw: object, problems: list[Problem]
) -> list[Problem]:
    """C3: the rules of a failed patch's sound components, merged over the stored campaign as a
    patch is checked. A component that cannot be read was sent all the same: a rule across
    components judged with it as stored could report what the client did not send, so a problem
    is kept only when it also holds with those components cleared, and only in a component read."""
    channel, delivery_type = Channel(stored.channel), DeliveryType(stored.delivery_type)
    part = sound_part(raw, problems, channel)
    current, _ = load_document(channel, delivery_type, stored.components) if part else (None, [])
    if current is None:
        return []
    found = _rules_beyond(workspace, current, part, Stage.DRAFT_PATCH, problems, previous=current)
    unread = part.unread if part is not None else frozenset()
    if not found or not unread:
        return found
    cleared = sound_part(raw, problems, channel, clear_spoiled=True)
    holding = _rules_beyond(workspace, current, cleared, Stage.DRAFT_PATCH, problems, previous=current)
    also = {(problem.code, problem.target) for problem in holding}
    return [
        problem
        for problem in found
        if (problem.code, problem.target) in also and not fields_at_fault([problem]) & unread
    ]


def prepare_update(
    workspace: Workspace,
    row: Campaign,
    raw: object,
    models: UpdateModels | None = None,
) -> PreparedUpdate:
    """`check_update` of a loaded row, kept with it for `apply_update`."""
    checked = check_update(workspace, StoredCampaign.of(row), raw, models)
    return PreparedUpdate(
        body=checked.body, merged=checked.merged, stored_components=checked.stored_components, row=row
    )


def _written_columns(checked: CheckedUpdate, now: datetime) -> dict[str, Any]:
    """What a write of `checked` sets, the revision aside."""
    components = checked.components
    columns = {"components": components, **derived_columns(components), "updated_at": now}
    if checked.body.updated_by is not None:
        columns["updated_by"] = checked.body.updated_by
    return columns


async def apply_update(session: AsyncSession, prepared: PreparedUpdate, now: datetime) -> Campaign:
    """Write a prepared update onto its row, in place."""
    row = prepared.row
    previous_tags = set(row.tags)
    await resumes.record_schedule_change(
        session,
        row.workspace_id,
        row.id,
        row.delivery_type,
        row.status,
        row.components,
        prepared.components,
        now,
    )
    for name, value in _written_columns(prepared, now).items():
        setattr(row, name, value)
    row.revision += 1
    await flush(session)
    if set(row.tags) != previous_tags:
        await repository.replace_tags(session, row.workspace_id, row.id, row.tags)
    return row


async def write_update(
    session: AsyncSession,
    workspace_id: str,
    stored: StoredCampaign,
    checked: CheckedUpdate,
    now: datetime,
    answer: Answer[tuple[str, int]] | None = None,
) -> int:
    """Write a checked update onto the row read as `stored` (Core statements): its new revision.
    `answer` is called with the row's id and new revision just before the write."""
    columns = _written_columns(checked, now)
    revision = stored.revision + 1
    joined = answer((stored.id, revision)) if answer is not None else None
    values = {**columns, "revision": revision}
    if not await repository.write_stored(session, workspace_id, stored, values, joined):
        raise stale()
    await resumes.record_schedule_change(
        session,
        workspace_id,
        stored.id,
        stored.delivery_type,
        stored.status,
        stored.components,
        columns["components"],
        now,
    )
    if set(columns["tags"]) != set(stored.tags):
        await repository.replace_tags(session, workspace_id, stored.id, columns["tags"])
    if stored.status == CampaignStatus.SENDING.value:
        # A one-time campaign's change applies to the messages not handed over yet: the dispatch
        # under way reads the campaign again before its next request (`engine.halting`).
        await wake_on_commit(session, workspace_id, new_work=False)
    return revision


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
    current_etag: Callable[[str, int], str],
    answer: Answer[tuple[str, int]] | None = None,
    read: ClaimedRead | None = None,
) -> tuple[str, int]:
    """C3: the row's id and its new revision (`answer`: see `write_update`; `read`: see
    `herald.joined_writes.ClaimedRead`)."""
    stored = await get_stored(session, workspace.id, campaign_id, for_update=True, read=read)
    if if_match is not None and not if_match_holds(if_match, current_etag(stored.id, stored.revision)):
        raise PreconditionFailed(target="If-Match")
    checked = check_update(workspace, stored, raw)
    await keep_publishable(session, workspace, stored, checked, now)
    return stored.id, await write_update(session, workspace.id, stored, checked, now, answer)


# An entity-tag of an `If-Match` list: a weak one (`W/"..."`) never matches (RFC 9110 §13.1.1).
_ENTITY_TAG = re.compile(r'\s*(W/)?("[^"]*")\s*(?:,|$)')


def if_match_holds(header: str, etag: str) -> bool:
    """Whether `If-Match` holds for the current `etag`: `*`, or a list of entity-tags one of which
    is it (compared strongly)."""
    if header.strip() == "*":
        return True
    return any(match.group(1) is None and match.group(2) == etag for match in _ENTITY_TAG.finditer(header))


def _component_json(body: Any, name: str) -> Any:
    value = getattr(body, name)
    return value.model_dump(mode="json", exclude_unset=True) if value is not None else None


def _state_message(status: str) -> str:
    return f"The campaign is {status}; the request changes fields this state does not allow."


async def validate_stored(
    session: AsyncSession, workspace: Workspace, campaign_id: str, now: datetime
) -> list[Problem]:
    """DRAFT_PUBLISH on the saved campaign, read-only; the `id` of an earlier version validates
    that version (C4 answers 200 for every campaign C2 reads: contract §5)."""
    try:
        stored = await get_stored(session, workspace.id, campaign_id)
        channel, delivery_type = Channel(stored.channel), DeliveryType(stored.delivery_type)
        components = stored.components
    except InvalidState:  # a version's own id: an immutable snapshot, still a campaign to check
        row = await get_campaign_or_version(session, workspace.id, campaign_id)
        channel, delivery_type = Channel(row.channel), DeliveryType(row.delivery_type)
        components = row.components
    document, problems = load_document(channel, delivery_type, components)
    if document is None:
        return problems
    return await publish_problems(session, workspace, document, now)


_SEGMENTATION, _TRIGGER, _CONTENT = "segmentation_details", "trigger_condition", "campaign_content"


async def publish_problems(
    session: AsyncSession, workspace: Workspace, document: CampaignDocument, now: datetime
) -> list[Problem]:
    """DRAFT_PUBLISH with the workspace's connectors: what C4 reports and what L1 refuses to publish.
    An Email campaign must name one of its e-mail connectors, and send from one of that connector's
    verified senders; a Push campaign needs a push connector the engine can choose (the one named,
    or the only one). Its audience's filters must be ones the engine can evaluate in the workspace
    (the custom segments they name exist), and the custom templates its content names must exist:
    else the campaign would fail when it starts."""
    connectors = await delivery_connectors.configured(session, workspace.id)
    content = document.campaign_content
    templates, template_problems = (
        await custom_templates(
            session, workspace.id, document.channel.value, content.model_dump(mode="json", exclude_none=True)
        )
        if content is not None
        else ({}, [])
    )
    problems = validate_campaign(
        document,
        Stage.DRAFT_PUBLISH,
        workspace.features,
        configured_connectors=connectors.names.get(Channel.EMAIL, {}),
        push_connectors=frozenset(connectors.names.get(Channel.PUSH, ())),
        connector_senders=connectors.senders,
        check_template=check_template,
        custom_templates=templates,
    )
    at_fault = fields_at_fault(problems)
    if document.segmentation_details is not None and not at_fault & {"", _SEGMENTATION}:
        problems += await audience_problems(
            session, workspace.id, document.channel.value, document.segmentation_details, now
        )
    if content is not None and not at_fault & {"", _CONTENT}:
        problems += template_problems
    trigger = document.trigger_condition
    if trigger is not None and not at_fault & {"", _TRIGGER}:
        groups = [
            (group, (_TRIGGER, name))
            for name in ("included_filters", "secondary_included_filters")
            if (group := getattr(trigger, name)) is not None
        ]
        problems += await filter_problems(session, workspace.id, groups, now)
    return problems
