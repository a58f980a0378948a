"""Raw JSON bodies into campaign models, with every problem as a Problem (never an exception).

The body's `channel` chooses the model, so a channel-specific component is read the way its
channel defines it: `advanced` on an EMAIL body is an unknown field at `advanced`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from herald.campaigns.schemas.campaign import (
    COMPONENT_NAMES,
    AnyChannelCreate,
    AnyChannelUpdate,
    CampaignCreate,
    CampaignDocument,
    CampaignUpdate,
    EmailCampaignCreate,
    EmailCampaignUpdate,
    PushCampaignCreate,
    PushCampaignUpdate,
)
from herald.campaigns.schemas.common import CREATABLE_CHANNELS, Channel, DeliveryType
from herald.campaigns.validation.context import invalid_value, required
from herald.campaigns.validation.salvage import salvage
from herald.problems import Problem, fields_at_fault
from herald.pydantic_errors import problems_from_validation_error

M = TypeVar("M", bound=BaseModel)

_CREATE: dict[str, type[PushCampaignCreate] | type[EmailCampaignCreate]] = {
    "PUSH": PushCampaignCreate,
    "EMAIL": EmailCampaignCreate,
}


@dataclass(frozen=True, slots=True)
class UpdateModels:
    """An API's update body models (L1 passes subclasses with its own fields): one per creatable
    channel, and the one that reads a body whose channel is not (its channel-free fields only)."""

    by_channel: Mapping[str, type[PushCampaignUpdate] | type[EmailCampaignUpdate]]
    any_channel: type[AnyChannelUpdate]


_UPDATE = UpdateModels(
    by_channel={"PUSH": PushCampaignUpdate, "EMAIL": EmailCampaignUpdate},
    any_channel=AnyChannelUpdate,
)
_NOT_AN_OBJECT = Problem("INVALID_TYPE", "", "The request body must be a JSON object.")


def _validate(model: type[M], raw: Mapping[str, object]) -> tuple[M | None, list[Problem]]:
    try:
        return model.model_validate(raw), []
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, raw)


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"


def _channel_value_problem(value: object) -> Problem:
    if not isinstance(value, str):  # named as JSON names it ('None' was Python's word for null)
        return invalid_value("channel", f"channel must be PUSH or EMAIL, not {_json_kind(value)}.")
    return invalid_value(
        "channel",
        f"channel must be PUSH or EMAIL; '{value}' campaigns cannot be created or updated through v5.",
    )


def parse_create(raw: object) -> tuple[CampaignCreate | None, list[Problem]]:
    """Read a Create body (contract §5 C1). Returns the model, or None and every problem found."""
    if not isinstance(raw, dict):
        return None, [_NOT_AN_OBJECT]
    channel = raw.get("channel")
    model = _CREATE.get(channel) if isinstance(channel, str) else None
    if model is None:
        problem = required("channel") if "channel" not in raw else _channel_value_problem(channel)
        _, others = _validate(AnyChannelCreate, raw)
        return None, [problem, *others]
    body, problems = _validate(model, raw)
    return body, problems


def parse_update(
    raw: object,
    *,
    stored_channel: Channel | None = None,
    stored_delivery_type: DeliveryType | None = None,
    models: UpdateModels | None = None,
) -> tuple[CampaignUpdate | None, list[Problem]]:
    """Read an Update body (contract §5 C3).

    `channel` may be left out of the body; the stored campaign's channel then decides how its
    components are read. When the stored values are given, a body that sends a different
    `channel` or `campaign_delivery_type` is rejected: neither can change.
    """
    if not isinstance(raw, dict):
        return None, [_NOT_AN_OBJECT]
    models = models or _UPDATE
    problems: list[Problem] = []
    if stored_channel is not None and stored_channel not in CREATABLE_CHANNELS:
        problems.append(_channel_value_problem(stored_channel.value))
        stored_channel = None
    channel: str | None = stored_channel.value if stored_channel else None
    if "channel" in raw:
        sent = raw["channel"]
        if not isinstance(sent, str) or sent not in models.by_channel:
            problems.append(_channel_value_problem(sent))
        elif stored_channel is not None and sent != stored_channel.value:
            problems.append(
                invalid_value("channel", f"The channel of a campaign cannot change from {channel}.")
            )
        else:
            channel = sent
    model = models.by_channel.get(channel) if channel else None
    if model is None:
        if not problems:
            # Without the body's channel or the stored one, components cannot be read.
            problems.append(required("channel", "'channel' is required to read the campaign's components."))
        _, others = _validate(models.any_channel, raw)
        return None, [*problems, *others]
    if raw.get("channel", channel) != channel:
        # The channel sent was refused above: read the rest as the stored channel's, without
        # reporting the same channel a second time as that model's mismatch.
        raw = {key: value for key, value in raw.items() if key != "channel"}
    body, errors = _validate(model, raw)
    problems += errors
    if (
        body is not None
        and stored_delivery_type is not None
        and body.campaign_delivery_type not in (None, stored_delivery_type)
    ):
        problems.append(
            invalid_value(
                "campaign_delivery_type",
                f"The delivery type of a campaign cannot change from {stored_delivery_type.value}.",
            )
        )
    return (body if not problems else None), problems


def load_document(
    channel: Channel, delivery_type: DeliveryType, components: Mapping[str, object]
) -> tuple[CampaignDocument | None, list[Problem]]:
    """A stored campaign (its components as JSON) as a CampaignDocument, for patch and publish."""
    body, problems = parse_update(
        dict(components), stored_channel=channel, stored_delivery_type=delivery_type
    )
    if body is None:
        return None, problems
    return CampaignDocument(channel=channel, delivery_type=delivery_type).merged(body), []


@dataclass(frozen=True, slots=True)
class SoundPart:
    """What `sound_part` read of a body that failed to parse."""

    body: CampaignUpdate
    # The faulty values left out of the components read without them (`salvage`): a rule's
    # problem about one of them is not reported (`salvage.concerns`).
    left_out: frozenset[str]
    # The components holding problems that could not be read at all.
    unread: frozenset[str]


def sound_part(
    raw: object, problems: Sequence[Problem], channel: Channel, *, clear_spoiled: bool = False
) -> SoundPart | None:
    """The components of a body that failed to parse, read as an update of `channel` (None when
    none can be, or they do not read together either): those holding none of its `problems` as
    sent, the others without their faulty values where each can be left out alone (`salvage`).
    Their own rules can still be checked, so that a client learns every violation in one answer
    (contract §3: all violations are collected in one response), not the rules' only after fixing
    the types. `clear_spoiled`: the components that cannot be read are read as sent null (cleared)
    rather than left out (a patch then keeps them as stored)."""
    model = _UPDATE.by_channel.get(channel.value)
    if model is None or not isinstance(raw, dict):  # v5 reads no component of another channel
        return None
    spoiled = fields_at_fault(problems)
    if "" in spoiled:
        return None
    part = {key: value for key, value in raw.items() if key in COMPONENT_NAMES and key not in spoiled}
    faulty = [key for key in raw if key in COMPONENT_NAMES and key in spoiled]
    left_out: dict[str, frozenset[str]] = {}
    for key in faulty:
        targets = [problem.target for problem in problems if problem.target.split(".", 1)[0] == key]
        found = salvage(raw[key], key, targets)
        if found is not None:
            part[key], left_out[key] = found
    body, errors = _validate(model, part) if part else (None, [])
    if errors:
        # A component read without its faults may fail on what those hid: then it is not read.
        failing = fields_at_fault(errors)
        if failing - set(left_out):
            return None
        for key in failing:
            del part[key], left_out[key]
        body, errors = _validate(model, part) if part else (None, [])
    if body is None or errors:
        return None
    unread = frozenset(key for key in faulty if key not in left_out)
    if clear_spoiled and unread:
        body, errors = _validate(model, part | dict.fromkeys(unread))
        if body is None or errors:
            return None
    return SoundPart(body, frozenset().union(*left_out.values()), unread)
