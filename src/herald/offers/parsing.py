"""From a JSON object to typed offer values and the problems of what would not parse."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from herald.errors import ValidationFailed
from herald.offers.requests import OfferFields
from herald.problems import Problem, join_path
from herald.pydantic_errors import problems_from_validation_error

M = TypeVar("M", bound=BaseModel)
FIELD_NAMES = frozenset(OfferFields.model_fields)


@dataclass(frozen=True)
class Parsed:
    values: OfferFields  # the fields that parsed; failed ones are absent
    valid: dict[str, Any]  # their JSON, exactly as sent (strict types dump back to the input)
    problems: list[Problem]
    failed: frozenset[str]  # top-level names with a problem (unknown names included)


def as_object(body: Any) -> dict[str, Any]:
    """The body as a JSON object (`null`, a list or a scalar is refused: a route without a body
    passes `{}`).

    Python's JSON reader accepts NaN and Infinity, which are not JSON: stored, they would be
    refused by PostgreSQL (a 500) or written out as invalid JSON. They are refused here instead.
    """
    if not isinstance(body, dict):
        raise ValidationFailed([Problem("INVALID_TYPE", "body", "The body must be a JSON object.")])
    problems = [
        Problem("INVALID_TYPE", join_path(*path), "NaN and Infinity are not JSON numbers.")
        for path in _non_finite(body, ())
    ]
    if problems:
        raise ValidationFailed(problems)
    return body


def _non_finite(value: Any, path: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, (*path, index))


def parse(raw: dict[str, Any], model: type[OfferFields]) -> Parsed:
    """Validate `raw` against `model`; on failure keep every top-level field that is fine by itself.

    Rules then run on those fields, so one response can report a bad `priority` and a duplicate
    `name` together instead of one after the other.
    """
    try:
        values = model.model_validate(raw)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, raw)
        failed = frozenset(str(error["loc"][0]) for error in exc.errors() if error["loc"])
    else:
        return Parsed(values, _known(raw), [], frozenset())
    valid = {name: value for name, value in _known(raw).items() if name not in failed}
    # Each field passed on its own above, and OfferFields is the looser model, so this cannot fail.
    return Parsed(OfferFields.model_validate(valid), valid, problems, failed)


def _known(raw: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in raw.items() if name in FIELD_NAMES}


def parse_model(raw: dict[str, Any], model: type[M]) -> tuple[M | None, list[Problem]]:
    """A small body in one piece: the model, or the problems."""
    try:
        return model.model_validate(raw), []
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, raw)


def check_body(raw: Any, model: type[BaseModel]) -> None:
    """The faults an O2, O3 or O5 body shows by itself (its fields' types and shapes), raised:
    what the guard answers with a refused head (`Operation.body_check`). The rules that read the
    workspace's offers are the handler's."""
    body = as_object(raw)
    # O2 and O3 read field by field, as their handlers do.
    problems = parse(body, model).problems if issubclass(model, OfferFields) else parse_model(body, model)[1]
    if problems:
        raise ValidationFailed(problems)
