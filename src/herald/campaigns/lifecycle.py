"""The campaign lifecycle as pure rules: what a status action, a publish and the passing of time do.

No I/O and no clock: callers pass the stored state and `now`, and apply the answer with a
compare-and-set on the status column, so a rule decided on stale state is never written.

- Status actions (C5, contract §5): STOP a ONE_TIME campaign that is ACTIVE, SCHEDULED, PAUSED or
  SENDING → STOPPED; PAUSE a PERIODIC or EVENT_TRIGGERED campaign that is ACTIVE, SCHEDULED or
  SENDING → PAUSED (the state is remembered); RESUME such a campaign from PAUSED → the remembered
  state (ACTIVE or SCHEDULED). Everything else, DRAFT included, is refused.
- Publish (L1): a draft goes SCHEDULED when it starts in the future, else ACTIVE; a ONE_TIME ASAP
  campaign is ACTIVE at once.
- Time (the worker): SCHEDULED → ACTIVE at the start for every type but ONE_TIME; a ONE_TIME
  campaign goes SENDING at its start (or at once when published ASAP) and SENT at a later tick;
  at `expiry_time` an ACTIVE, PAUSED or SENDING campaign is done: SENT (STOPPED is kept for a stop
  someone asked for).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from herald.campaigns.schemas.common import CampaignStatus, DeliveryType, resolve_datetime
from herald.timezones import zone_named

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

_S = CampaignStatus
_DT = DeliveryType


class Action(StrEnum):
    STOP = "STOP"
    PAUSE = "PAUSE"
    RESUME = "RESUME"


# Publishing changes to a campaign in these states changes what is live (a new version, with
# versioning on). The editability table treats them the same way.
LIVE: frozenset[CampaignStatus] = frozenset({_S.SCHEDULED, _S.ACTIVE, _S.PAUSED, _S.SENDING})

# Action -> (delivery types it applies to, states it applies from). Contract §5 C5.
ACTION_RULES: dict[Action, tuple[frozenset[DeliveryType], frozenset[CampaignStatus]]] = {
    Action.STOP: (frozenset({_DT.ONE_TIME}), frozenset({_S.ACTIVE, _S.SCHEDULED, _S.PAUSED, _S.SENDING})),
    Action.PAUSE: (
        frozenset({_DT.PERIODIC, _DT.EVENT_TRIGGERED}),
        frozenset({_S.ACTIVE, _S.SCHEDULED, _S.SENDING}),
    ),
    Action.RESUME: (frozenset({_DT.PERIODIC, _DT.EVENT_TRIGGERED}), frozenset({_S.PAUSED})),
}


@dataclass(frozen=True, slots=True)
class Change:
    """The state a campaign moves to: its status and, when PAUSED, the status it resumes to."""

    status: CampaignStatus
    paused_from: CampaignStatus | None = None


def apply_action(
    action: Action, delivery_type: DeliveryType, status: CampaignStatus, paused_from: CampaignStatus | None
) -> Change | None:
    """The change `action` makes, or None when the matrix does not allow it."""
    types, states = ACTION_RULES[action]
    if delivery_type not in types or status not in states:
        return None
    if action is Action.STOP:
        return Change(_S.STOPPED)
    if action is Action.PAUSE:
        # A campaign paused mid-send resumes as ACTIVE: the interrupted run is not replayed.
        return Change(_S.PAUSED, paused_from=_S.SCHEDULED if status is _S.SCHEDULED else _S.ACTIVE)
    return Change(_S.SCHEDULED if paused_from is _S.SCHEDULED else _S.ACTIVE)


def refusal(action: Action, delivery_type: str, status: str) -> str:
    """Why an action is refused, naming the action, the delivery type and the state."""
    types, states = ACTION_RULES[action]
    allowed = f"{' and '.join(sorted(types))} campaigns in {', '.join(sorted(states))}"
    return (
        f"{action.value} cannot be applied to a {delivery_type} campaign in state {status}; "
        f"{action.value} applies to {allowed}."
    )


def publish_status(
    delivery_type: DeliveryType, scheduling_type: str | None, begins_at: datetime | None, now: datetime
) -> CampaignStatus:
    """The status a draft takes when it is published at `now` (`begins_at`: see `begins_at`)."""
    if delivery_type is _DT.ONE_TIME and scheduling_type == "ASAP":
        return _S.ACTIVE
    if begins_at is not None and begins_at > now:
        return _S.SCHEDULED
    return _S.ACTIVE


@dataclass(frozen=True, slots=True)
class Timing:
    """What the passing of time depends on, as stored on a campaign row."""

    delivery_type: str
    status: CampaignStatus
    begins_at: datetime | None  # `begins_at`: the start, or earlier in each user's timezone
    expiry_at: datetime | None
    sent_time: datetime | None


def _next_by_time(timing: Timing, status: CampaignStatus, now: datetime) -> CampaignStatus | None:
    one_time = timing.delivery_type == _DT.ONE_TIME
    expired = timing.expiry_at is not None and timing.expiry_at <= now
    if status in (_S.ACTIVE, _S.PAUSED, _S.SENDING) and expired:
        return _S.SENT
    if status is _S.SCHEDULED and timing.begins_at is not None and timing.begins_at <= now:
        return _S.SENDING if one_time else _S.ACTIVE
    if status is _S.ACTIVE and one_time:
        return _S.SENDING
    # A one-time send is complete when the delivery engine has settled every user of its execution
    # (`delivery.engine`; the worker then marks it SENT), never by the clock. A periodic run that
    # was sending goes back to waiting.
    if status is _S.SENDING and not one_time and (timing.sent_time is None or timing.sent_time < now):
        return _S.ACTIVE
    return None


def due_steps(timing: Timing, now: datetime) -> list[CampaignStatus]:
    """The statuses the campaign passes through by `now`, in order; empty when nothing is due.

    A campaign that starts sending stops there for this tick: its send completes at a later one.
    """
    steps: list[CampaignStatus] = []
    status = timing.status
    while (following := _next_by_time(timing, status, now)) is not None:
        steps.append(following)
        if following is _S.SENDING:
            break
        status = following
    return steps


def instant(value: object, timezone: object) -> datetime | None:
    """The instant a stored date-time of `scheduling_details` names, read in its `timezone` when it
    has no zone (contract §3); None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return resolve_datetime(value, timezone if isinstance(timezone, str) else None)
    except (ValueError, KeyError):  # not a date-time, or an unknown zone in imported data
        return None


def schedule_instants(components: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    """The start and expiry instants `scheduling_details` names (contract §3: a time without zone
    is read in the component's `timezone`, else UTC); None where absent or unreadable."""
    details = components.get("scheduling_details")
    if not isinstance(details, Mapping):
        return None, None
    timezone = details.get("timezone")
    return instant(details.get("start_time"), timezone), instant(details.get("expiry_time"), timezone)


def scheduling_type(components: Mapping[str, Any]) -> str | None:
    details = components.get("scheduling_details")
    value = details.get("delivery_type") if isinstance(details, Mapping) else None
    return value if isinstance(value, str) else None


# The first place to reach a wall-clock time: UTC+14 (the Line Islands).
_EARLIEST_OFFSET = timedelta(hours=14)


def first_local_moment(start: datetime, zone: ZoneInfo) -> datetime:
    """The first instant at which it is somewhere `start`'s wall clock in `zone`: a campaign sent
    at that wall clock in each user's timezone begins there (and the users east of its own
    timezone get it at their own hour, not after it passed)."""
    wall = start.astimezone(zone).replace(tzinfo=None)
    return (wall - _EARLIEST_OFFSET).replace(tzinfo=UTC)


def begins_at(components: Mapping[str, Any]) -> datetime | None:
    """When the campaign's sending begins: its `start_time`, but for SEND_IN_USER_TIMEZONE the
    first instant the start's wall clock comes anywhere (`first_local_moment`)."""
    start = schedule_instants(components)[0]
    if start is None or scheduling_type(components) != "SEND_IN_USER_TIMEZONE":
        return start
    details = components.get("scheduling_details")
    return first_local_moment(
        start, zone_named(details.get("timezone") if isinstance(details, Mapping) else None)
    )
