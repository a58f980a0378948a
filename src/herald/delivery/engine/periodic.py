"""PERIODIC campaigns in the worker tick: each occurrence (`occurrences.py`) becomes one execution of
the campaign (`Execution.run` = the occurrence's number) and one child campaign (`parent_id` = the
campaign; C6 lists it with `include_child_campaigns`, C7 counts it in `total_child_campaigns`).

- A campaign runs while ACTIVE. At a tick, the latest occurrence at or before `now` is started
  unless it has an execution already; the unique index on (workspace, campaign, run) lets exactly
  one worker create it (with its child, in the same transaction), however many tick at once. An
  occurrence missed while no worker ran is started late (once); earlier ones are skipped, and so
  are those before the campaign was published (a start in the past runs from the next one).
- Each run resolves its audience when it starts, with the campaign's latest version (content
  changes apply from the next run, and to the messages a run has not yet sent), and the INSTANCE
  audience limit counts per run.
- PAUSE stops the run in flight (its unsent users stay unsent) and skips the occurrences while
  PAUSED; RESUME records the moment (`PeriodicResume`), and only occurrences from then on run:
  the next one after the resume, no catch-up burst.
- A change of an ACTIVE campaign's schedule records the same moment (`resumes`): its occurrences
  before the change never run. A run is for its moment (`scheduled_for`): an occurrence is
  started once, whatever the schedule became, and numbered after the last run (`number_of`).
- `no_of_occurences` is the number of runs ("total sends"), not of dates: a date skipped while
  PAUSED, or missed while no worker ran, does not use one up; the runs go on at the dates after.
- Once the schedule has no run left (`no_of_occurences` runs started, or no occurrence before
  `expiry_time`) and no run is in flight, the campaign is done: the worker moves it ACTIVE → SENT,
  as the lifecycle does at `expiry_time`.
- A child is SENDING while its run is, then SENT (DONE) or STOPPED (stopped, paused, or its
  audience could not be resolved).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign, CampaignTag
from herald.campaigns.schemas.common import CampaignStatus, Channel, DeliveryType
from herald.db import Database
from herald.delivery.engine.content import live_campaign
from herald.delivery.engine.models import Execution, PeriodicResume
from herald.delivery.engine.occurrences import (
    Occurrence,
    Recurrence,
    following,
    latest,
    occurrences,
    recurrence_of,
)
from herald.delivery.engine.pause import PAUSED
from herald.delivery.engine.resolve import ExecutionStatus, LiveCampaign, start_execution
from herald.delivery.engine.resumes import record_resume as record_resume  # publish, RESUME
from herald.ids import object_id

log = logging.getLogger("herald.delivery.engine")

LIVE = (ExecutionStatus.RESOLVING, ExecutionStatus.DISPATCHING, PAUSED)
CHILD_STATUS = {
    ExecutionStatus.DONE: CampaignStatus.SENT.value,
    ExecutionStatus.STOPPED: CampaignStatus.STOPPED.value,
    ExecutionStatus.FAILED: CampaignStatus.STOPPED.value,
}


@dataclass(frozen=True)
class PeriodicCampaign:
    campaign: LiveCampaign
    row: Campaign
    recurrence: Recurrence


async def active(database: Database, workspace_id: str) -> list[PeriodicCampaign]:
    """The workspace's ACTIVE periodic Push and Email campaigns (not their children)."""
    async with database.reader() as session:
        rows = (
            await session.scalars(
                select(Campaign)
                .where(
                    Campaign.workspace_id == workspace_id,
                    Campaign.is_latest,
                    Campaign.status == CampaignStatus.ACTIVE.value,
                    Campaign.delivery_type == DeliveryType.PERIODIC.value,
                    Campaign.parent_id.is_(None),
                    Campaign.channel.in_([Channel.EMAIL.value, Channel.PUSH.value]),
                )
                .order_by(Campaign.id)
            )
        ).all()
    found: list[PeriodicCampaign] = []
    for row in rows:
        campaign = live_campaign(row)
        details = campaign.document.scheduling_details if campaign is not None else None
        if campaign is None or details is None or row.start_at is None:
            continue
        recurrence = recurrence_of(details, row.start_at, row.expiry_at)
        if recurrence is None:
            log.error("campaign %s/%s has no periodic_details", workspace_id, row.campaign_id)
            continue
        found.append(PeriodicCampaign(campaign, row, recurrence))
    return found


async def _resumed_at(database: Database, workspace_id: str, campaign_id: str) -> datetime | None:
    async with database.reader() as session:
        found: datetime | None = await session.scalar(
            select(PeriodicResume.resumed_at).where(
                PeriodicResume.workspace_id == workspace_id, PeriodicResume.campaign_id == campaign_id
            )
        )
        return found


async def _runs(database: Database, workspace_id: str, campaign_id: str) -> dict[int, datetime | None]:
    """The occurrences of the campaign that were started: each run's number and the moment it was
    for."""
    async with database.reader() as session:
        found = await session.execute(
            select(Execution.run, Execution.scheduled_for).where(
                Execution.workspace_id == workspace_id,
                Execution.campaign_id == campaign_id,
                Execution.run.is_not(None),
            )
        )
        return {int(run): scheduled_for for run, scheduled_for in found.all()}


def number_of(recurrence: Recurrence, occurrence: Occurrence, runs: dict[int, datetime | None]) -> int | None:
    """The run number `occurrence` takes, or None when it must not run: it was started already (a
    run is for its moment), or it is not after the last run started (never started late behind it).

    The number is the occurrence's date's (`Occurrence.run`) while the schedule stays as it was.
    After a change of the schedule (a live campaign's `periodic_details` may change) the dates are
    counted anew, so the numbers go on from the last run: the last run's number plus the
    occurrences of the schedule now after it, up to this one. Either way the number follows from
    what was started, so two workers starting the same occurrence take the same number (the unique
    index on the run lets one of them write it)."""
    if not runs:
        return occurrence.run
    if occurrence.at in runs.values():
        return None
    last = max(runs)
    after = runs[last]
    if after is None:
        return last + 1
    if occurrence.at <= after:
        return None
    between = sum(1 for each in occurrences(recurrence, occurrence.at) if each.at > after)
    return last + between


def _child_writer(
    parent: Campaign, occurrence: Occurrence, now: datetime
) -> Callable[[AsyncSession, Execution], Awaitable[None]]:
    # The run's name, on its row (search, meta) and in its components (C2) alike, within the
    # 500 characters a name may have.
    suffix = f" #{occurrence.run}"
    name = (parent.name or "Run")[: 500 - len(suffix)] + suffix
    components = dict(parent.components or {})
    components["basic_details"] = {**(components.get("basic_details") or {}), "name": name}

    async def write(session: AsyncSession, execution: Execution) -> None:
        child_id = object_id(now)
        session.add(
            Campaign(
                workspace_id=parent.workspace_id,
                id=child_id,
                campaign_id=child_id,
                version_number=1,
                is_latest=True,
                revision=1,
                channel=parent.channel,
                delivery_type=parent.delivery_type,
                status=CampaignStatus.SENDING.value,
                name=name,
                tags=list(parent.tags or []),
                created_by=parent.created_by,
                created_at=now,
                updated_at=now,
                sent_time=now,
                parent_id=parent.campaign_id,
                components=components,
                start_at=occurrence.at,
            )
        )
        await session.flush()
        session.add_all(
            CampaignTag(workspace_id=parent.workspace_id, tag=tag, campaign_row_id=child_id)
            for tag in dict.fromkeys(parent.tags or [])
        )
        execution.child_campaign_id = child_id

    return write


async def due_runs(database: Database, periodic: PeriodicCampaign, now: datetime) -> None:
    """Start the occurrence due at `now`, unless it ran (or was started) already or was missed
    while the campaign was paused (or came before a change of its schedule)."""
    occurrence = latest(periodic.recurrence, now)
    if occurrence is None:
        return
    campaign = periodic.campaign
    runs = await _runs(database, campaign.workspace_id, campaign.campaign_id)
    if _all_run(periodic.recurrence, runs):
        return
    number = number_of(periodic.recurrence, occurrence, runs)
    if number is None:
        return
    resumed = await _resumed_at(database, campaign.workspace_id, campaign.campaign_id)
    if resumed is not None and occurrence.at < resumed:
        return  # missed while PAUSED: skipped
    occurrence = Occurrence(number, occurrence.at)
    # Logged by `start_execution` when this worker is the one that starts it.
    await start_execution(
        database, campaign, now, occurrence.run, occurrence.at, _child_writer(periodic.row, occurrence, now)
    )


async def live_runs(database: Database, workspace_id: str, campaign_id: str) -> list[Execution]:
    """The campaign's runs not yet ended (paused ones included), oldest first."""
    async with database.reader() as session:
        return list(
            (
                await session.scalars(
                    select(Execution)
                    .where(
                        Execution.workspace_id == workspace_id,
                        Execution.campaign_id == campaign_id,
                        Execution.status.in_(LIVE),
                    )
                    .order_by(Execution.run)
                )
            ).all()
        )


def _all_run(recurrence: Recurrence, runs: Collection[int]) -> bool:
    return recurrence.count is not None and len(runs) >= recurrence.count


async def schedule_over(database: Database, periodic: PeriodicCampaign, now: datetime) -> bool:
    """No run is left after `now`: `no_of_occurences` runs were started, or no occurrence is left
    (before the expiry, or at all: the pattern names no date after it)."""
    recurrence = periodic.recurrence
    if following(recurrence, now) is None:
        return True
    if recurrence.count is None:
        return False
    campaign = periodic.campaign
    return _all_run(recurrence, await _runs(database, campaign.workspace_id, campaign.campaign_id))


async def settle_children(session: AsyncSession, workspace_id: str, execution_ids: list[str]) -> None:
    """Children of these runs, once ended, take their run's end (SENDING → SENT or STOPPED)."""
    if not execution_ids:
        return
    ended = (
        await session.execute(
            select(Execution.child_campaign_id, Execution.status).where(
                Execution.workspace_id == workspace_id,
                Execution.id.in_(execution_ids),
                Execution.child_campaign_id.is_not(None),
                Execution.status.in_(list(CHILD_STATUS)),
            )
        )
    ).all()
    for child_id, status in ended:
        await session.execute(
            update(Campaign)
            .where(
                Campaign.workspace_id == workspace_id,
                Campaign.campaign_id == child_id,
                Campaign.is_latest,
                Campaign.status == CampaignStatus.SENDING.value,
            )
            .values(status=CHILD_STATUS[status], revision=Campaign.revision + 1)
            .execution_options(synchronize_session=False)
        )
