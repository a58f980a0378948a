"""The lifecycle rules as tables: status actions, the status a publish gives, and time-driven steps."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from herald.campaigns.lifecycle import (
    Action,
    Change,
    Timing,
    apply_action,
    due_steps,
    publish_status,
    refusal,
    schedule_instants,
)
from herald.campaigns.schemas.common import CampaignStatus, DeliveryType

S = CampaignStatus
DT = DeliveryType
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

# The contract's matrix, written out: (action, delivery type, state) -> resulting state.
ALLOWED: dict[tuple[Action, DeliveryType, CampaignStatus], CampaignStatus] = {
    **{
        (Action.STOP, DT.ONE_TIME, state): S.STOPPED for state in (S.ACTIVE, S.SCHEDULED, S.PAUSED, S.SENDING)
    },
    **{
        (Action.PAUSE, kind, state): S.PAUSED
        for kind in (DT.PERIODIC, DT.EVENT_TRIGGERED)
        for state in (S.ACTIVE, S.SCHEDULED, S.SENDING)
    },
    **{(Action.RESUME, kind, S.PAUSED): S.ACTIVE for kind in (DT.PERIODIC, DT.EVENT_TRIGGERED)},
}
EVERY_CASE = list(itertools.product(Action, DeliveryType, CampaignStatus))


@pytest.mark.parametrize(("action", "kind", "state"), EVERY_CASE, ids=lambda v: str(v))
def test_every_action_type_state_combination(
    action: Action, kind: DeliveryType, state: CampaignStatus
) -> None:
    change = apply_action(action, kind, state, paused_from=None)
    expected = ALLOWED.get((action, kind, state))
    assert (change.status if change else None) == expected


def test_draft_is_never_changed_by_an_action() -> None:
    assert all(apply_action(a, k, S.DRAFT, None) is None for a in Action for k in DeliveryType)


@pytest.mark.parametrize(
    ("state", "remembered"), [(S.ACTIVE, S.ACTIVE), (S.SCHEDULED, S.SCHEDULED), (S.SENDING, S.ACTIVE)]
)
def test_pause_remembers_the_state_resume_returns_to(
    state: CampaignStatus, remembered: CampaignStatus
) -> None:
    assert apply_action(Action.PAUSE, DT.PERIODIC, state, None) == Change(S.PAUSED, remembered)
    assert apply_action(Action.RESUME, DT.PERIODIC, S.PAUSED, remembered) == Change(remembered)


def test_refusal_names_action_type_and_state() -> None:
    message = refusal(Action.STOP, "PERIODIC", "ACTIVE")
    assert "STOP" in message
    assert "PERIODIC" in message
    assert "ACTIVE" in message


@pytest.mark.parametrize(
    ("kind", "scheduling", "start", "expected"),
    [
        (DT.ONE_TIME, "ASAP", None, S.ACTIVE),
        (DT.ONE_TIME, "ASAP", NOW + timedelta(days=1), S.ACTIVE),
        (DT.ONE_TIME, "AT_FIXED_TIME", NOW + timedelta(minutes=1), S.SCHEDULED),
        (DT.ONE_TIME, "AT_FIXED_TIME", NOW, S.ACTIVE),
        (DT.PERIODIC, "AT_FIXED_TIME", NOW + timedelta(days=3), S.SCHEDULED),
        (DT.PERIODIC, "AT_FIXED_TIME", NOW - timedelta(days=3), S.ACTIVE),
        (DT.EVENT_TRIGGERED, "ASAP", None, S.ACTIVE),
        (DT.EVENT_TRIGGERED, "ASAP", NOW + timedelta(days=1), S.SCHEDULED),
        (DT.DEVICE_TRIGGERED, None, None, S.ACTIVE),
        (DT.BUSINESS_EVENT_TRIGGERED, None, NOW + timedelta(hours=1), S.SCHEDULED),
    ],
)
def test_publish_status(
    kind: DeliveryType, scheduling: str | None, start: datetime | None, expected: CampaignStatus
) -> None:
    assert publish_status(kind, scheduling, start, NOW) is expected


def _timing(
    kind: str,
    state: CampaignStatus,
    start: int | None = None,
    expiry: int | None = None,
    sent: int | None = None,
) -> Timing:
    def at(minutes: int | None) -> datetime | None:
        return None if minutes is None else NOW + timedelta(minutes=minutes)

    return Timing(kind, state, at(start), at(expiry), at(sent))


@pytest.mark.parametrize(
    ("timing", "steps"),
    [
        (_timing("PERIODIC", S.SCHEDULED, start=1), []),
        (_timing("PERIODIC", S.SCHEDULED, start=0), [S.ACTIVE]),
        (_timing("EVENT_TRIGGERED", S.SCHEDULED, start=-5), [S.ACTIVE]),
        (_timing("EVENT_TRIGGERED", S.SCHEDULED, start=-5, expiry=-1), [S.ACTIVE, S.SENT]),
        (_timing("EVENT_TRIGGERED", S.ACTIVE, expiry=1), []),
        (_timing("EVENT_TRIGGERED", S.ACTIVE, expiry=0), [S.SENT]),
        (_timing("PERIODIC", S.PAUSED, expiry=-1), [S.SENT]),
        (_timing("EVENT_TRIGGERED", S.ACTIVE), []),
        (_timing("ONE_TIME", S.SCHEDULED, start=0), [S.SENDING]),
        (_timing("ONE_TIME", S.SCHEDULED, start=-1, expiry=5), [S.SENDING]),
        (_timing("ONE_TIME", S.SCHEDULED), []),
        (_timing("ONE_TIME", S.ACTIVE), [S.SENDING]),
        # A one-time send ends when the delivery engine has settled its audience, not by the clock;
        # only its expiry ends it by time.
        (_timing("ONE_TIME", S.SENDING, sent=0), []),
        (_timing("ONE_TIME", S.SENDING, sent=-1), []),
        (_timing("ONE_TIME", S.SENDING), []),
        (_timing("ONE_TIME", S.SENDING, sent=-1, expiry=0), [S.SENT]),
        (_timing("PERIODIC", S.SENDING, sent=-1), [S.ACTIVE]),
        (_timing("ONE_TIME", S.STOPPED, start=-1, expiry=-1), []),
        (_timing("PERIODIC", S.DRAFT, start=-1, expiry=-1), []),
        (_timing("ONE_TIME", S.SENT, expiry=-1), []),
    ],
)
def test_due_steps(timing: Timing, steps: list[CampaignStatus]) -> None:
    assert due_steps(timing, NOW) == steps


@pytest.mark.parametrize(
    ("scheduling", "start", "expiry"),
    [
        ({"start_time": "2026-02-01T10:00:00Z"}, datetime(2026, 2, 1, 10, tzinfo=UTC), None),
        (
            {
                "start_time": "2026-02-01T10:00:00",
                "timezone": "Asia/Kolkata",
                "expiry_time": "2026-02-02T10:00:00+00:00",
            },
            datetime(2026, 2, 1, 4, 30, tzinfo=UTC),
            datetime(2026, 2, 2, 10, tzinfo=UTC),
        ),
        ({"start_time": "2026-02-01T10:00:00"}, datetime(2026, 2, 1, 10, tzinfo=UTC), None),
        ({"start_time": "soon", "timezone": "Nowhere/City"}, None, None),
        ({}, None, None),
    ],
)
def test_schedule_instants(
    scheduling: dict[str, str], start: datetime | None, expiry: datetime | None
) -> None:
    assert schedule_instants({"scheduling_details": scheduling}) == (start, expiry)
