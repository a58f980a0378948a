"""Raw ingestion bodies (and import lines) into writes, with every problem at its dot path.

Pure: no database, time comes in as `now`. The same functions read the HTTP bodies and the lines of
`herald audience import`, so both accept exactly the same data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from herald.audience.attributes import (
    beyond_the_calendar,
    normalise_attributes,
    normalise_customer_attributes,
    parse_datetime_text,
    utc_text,
)
from herald.audience.schemas import MAX_ELEMENTS, CustomerObject, EventObject, ImportEvent
from herald.problems import Problem, join_path
from herald.pydantic_errors import problems_from_validation_error

# Events may carry a time slightly ahead of ours (client clocks drift); beyond that they are refused.
FUTURE_TOLERANCE = timedelta(minutes=5)
_LATEST_EPOCH = 253_402_300_799  # 9999-12-31T23:59:59Z
_EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)  # epoch seconds 0

M = TypeVar("M", bound=BaseModel)
Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class CustomerWrite:
    customer_id: str
    columns: dict[str, Any]  # standard attributes sent (None clears a column)
    patch: dict[str, Any]  # custom attributes sent (None removes the key)
    update_existing_only: bool = False


@dataclass(frozen=True, slots=True)
class EventWrite:
    customer_id: str
    action: str
    attributes: dict[str, Any]
    occurred_at: datetime
    platform: str | None = None
    app_version: str | None = None


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The actions of one event object: all for one customer."""

    customer_id: str
    events: list[EventWrite]


Element = CustomerWrite | EventBatch


def _not_an_object(path: Path) -> Problem:
    return Problem("INVALID_TYPE", join_path(*path), "Expected a JSON object.")


def _validate(model: type[M], raw: Mapping[str, Any], path: Path) -> tuple[M | None, list[Problem]]:
    try:
        return model.model_validate(raw), []
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, raw, path)


def parse_time(value: Any, path: Path) -> tuple[datetime | None, list[Problem]]:
    """Epoch seconds or an ISO 8601 date-time (no zone = UTC) as an aware UTC datetime."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not 0 <= value <= _LATEST_EPOCH:
            return None, [
                Problem("OUT_OF_RANGE", join_path(*path), "Epoch seconds must be between 0 and 253402300799.")
            ]
        return datetime.fromtimestamp(value, UTC), []
    if isinstance(value, str):
        parsed = parse_datetime_text(value)
        # One range for both spellings: the epoch seconds' (a date-time of year 1 was taken while
        # its epoch seconds, negative, were refused), an offset past either end of the calendar too.
        beyond = beyond_the_calendar(value) if parsed is None else None
        if (parsed is not None and parsed < _EARLIEST_TIME) or beyond == "start":
            message = "A date-time must be at or after 1970-01-01T00:00:00Z (epoch seconds 0)."
            return None, [Problem("OUT_OF_RANGE", join_path(*path), message)]
        if parsed is not None:
            return parsed, []
        if beyond == "end":
            message = "A date-time must be at or before 9999-12-31T23:59:59Z (epoch seconds 253402300799)."
            return None, [Problem("OUT_OF_RANGE", join_path(*path), message)]
    return None, [
        Problem(
            "INVALID_TYPE",
            join_path(*path),
            "Expected epoch seconds or an ISO 8601 date-time such as 2026-03-01T09:30:00Z.",
        )
    ]


def parse_event_time(value: Any, path: Path, now: datetime) -> tuple[datetime | None, list[Problem]]:
    """When an event happened: the value sent, else `now`; later than now + 5 minutes is refused."""
    if value is None:
        return now, []
    at, problems = parse_time(value, path)
    if at is not None and at > now + FUTURE_TOLERANCE:
        return None, [
            Problem(
                "OUT_OF_RANGE",
                join_path(*path),
                f"The event time {utc_text(at)} is in the future; "
                "events may be at most 5 minutes ahead of the server's clock.",
            )
        ]
    return at, problems


def parse_customer(raw: Any, path: Path = ()) -> tuple[CustomerWrite | None, list[Problem]]:
    if not isinstance(raw, dict):
        return None, [_not_an_object(path)]
    body, problems = _validate(CustomerObject, raw, path)
    if body is None:
        return None, problems
    normalised, problems = normalise_customer_attributes(body.attributes, (*path, "attributes"))
    if problems:
        return None, problems
    return CustomerWrite(
        customer_id=body.customer_id,
        columns=normalised.columns,
        patch=normalised.patch,
        update_existing_only=body.update_existing_only,
    ), []


def parse_event(raw: Any, now: datetime, path: Path = ()) -> tuple[EventBatch | None, list[Problem]]:
    if not isinstance(raw, dict):
        return None, [_not_an_object(path)]
    body, problems = _validate(EventObject, raw, path)
    if body is None:
        return None, problems
    events: list[EventWrite] = []
    for index, action in enumerate(body.actions):
        action_path = (*path, "actions", index)
        attributes, found = normalise_attributes(action.attributes, (*action_path, "attributes"))
        occurred_at, time_problems = parse_event_time(
            action.current_time, (*action_path, "current_time"), now
        )
        found += time_problems
        if action.user_time is not None:
            found += parse_time(action.user_time, (*action_path, "user_time"))[1]
        problems += found
        if not found and occurred_at is not None:
            events.append(
                EventWrite(
                    customer_id=body.customer_id,
                    action=action.action,
                    attributes=_without_nulls(attributes),
                    occurred_at=occurred_at,
                    platform=action.platform,
                    app_version=action.app_version,
                )
            )
    if problems:
        return None, problems
    return EventBatch(customer_id=body.customer_id, events=events), []


def parse_transition(raw: Any, now: datetime) -> tuple[list[Element], list[Problem]]:
    """Every element of a transition, or every problem of all of them (the request is all or nothing)."""
    if not isinstance(raw, dict):
        return [], [_not_an_object(())]
    problems: list[Problem] = []
    kind = raw.get("type")
    if "type" not in raw:
        problems.append(Problem("REQUIRED_FIELD_MISSING", "type", "'type' is required."))
    elif kind != "transition":
        problems.append(Problem("INVALID_ENUM_VALUE", "type", "'type' must be 'transition' here."))
    problems += [
        Problem("UNKNOWN_FIELD", key, f"'{key}' is not a recognised field here.")
        for key in raw
        if key not in ("type", "elements")
    ]
    elements = raw.get("elements")
    if "elements" not in raw:
        return [], [*problems, Problem("REQUIRED_FIELD_MISSING", "elements", "'elements' is required.")]
    if not isinstance(elements, list):
        return [], [*problems, Problem("INVALID_TYPE", "elements", "'elements' must be an array.")]
    if not 1 <= len(elements) <= MAX_ELEMENTS:
        return [], [
            *problems,
            Problem(
                "OUT_OF_RANGE",
                "elements",
                f"A transition carries 1 to {MAX_ELEMENTS} elements; this one has {len(elements)}.",
            ),
        ]
    parsed: list[Element] = []
    for index, element in enumerate(elements):
        found, element_problems = _parse_element(element, ("elements", index), now)
        problems += element_problems
        if found is not None:
            parsed.append(found)
    return ([], problems) if problems else (parsed, [])


def _parse_element(raw: Any, path: Path, now: datetime) -> tuple[Element | None, list[Problem]]:
    if not isinstance(raw, dict):
        return None, [_not_an_object(path)]
    kind = raw.get("type")
    if kind == "customer":
        return parse_customer(raw, path)
    if kind == "event":
        return parse_event(raw, now, path)
    if "type" not in raw:
        return None, [Problem("REQUIRED_FIELD_MISSING", join_path(*path, "type"), "'type' is required.")]
    return None, [
        Problem("INVALID_ENUM_VALUE", join_path(*path, "type"), "'type' must be 'customer' or 'event'.")
    ]


def parse_import_event(raw: Any, now: datetime) -> tuple[EventWrite | None, list[Problem]]:
    """One line of an events file: `{customer_id, action, attributes?, occurred_at, platform?, app_version?}`."""
    if not isinstance(raw, dict):
        return None, [_not_an_object(())]
    body, problems = _validate(ImportEvent, raw, ())
    if body is None:
        return None, problems
    attributes, problems = normalise_attributes(body.attributes, ("attributes",))
    if body.occurred_at is None:
        problems.append(Problem("REQUIRED_FIELD_MISSING", "occurred_at", "'occurred_at' is required."))
        occurred_at = None
    else:
        occurred_at, time_problems = parse_event_time(body.occurred_at, ("occurred_at",), now)
        problems += time_problems
    if problems or occurred_at is None:
        return None, problems
    return EventWrite(
        customer_id=body.customer_id,
        action=body.action,
        attributes=_without_nulls(attributes),
        occurred_at=occurred_at,
        platform=body.platform,
        app_version=body.app_version,
    ), []


def _without_nulls(attributes: dict[str, Any]) -> dict[str, Any]:
    # An event is a record of what happened: an attribute sent as null was simply not there.
    if None not in attributes.values():
        return attributes
    return {name: value for name, value in attributes.items() if value is not None}
