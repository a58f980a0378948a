"""Pydantic validation errors as Problems: a dot path from the body root and a contract detail code.

Shared by every surface (FastAPI request errors included). Two things make the translation more than a join:

- Pydantic puts the name of a union member into `loc` (a discriminator tag such as
  `user_attributes`, or a member label such as `str` or `function-after[...]`). Those are not
  fields. We tell them apart by walking the *input* along `loc`: a part that is a key (or index)
  of the input is a field and is kept; a part that is not is a member label and is dropped —
  except as the last part of a `missing` error, where the absent key is the point.
- Codes: a custom error raised as `PydanticCustomError("MUTUALLY_EXCLUSIVE", ...)` (an UPPER_CASE
  type) is used verbatim; Pydantic's own types map onto the contract's detail codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from herald.problems import Problem, join_path

_RANGE_TYPES = frozenset(
    {
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "too_long",
        "too_short",
        "string_too_long",
        "string_too_short",
        "finite_number",
    }
)
_OBJECT_TYPES = frozenset({"model_type", "model_attributes_type", "dataclass_type"})
_ENUM_TYPES = frozenset({"enum", "literal_error", "union_tag_invalid"})
_CUSTOM_CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_QUOTED_NAME = re.compile(r"^'([A-Za-z_][A-Za-z0-9_]*)'$")


def detail_code(error_type: str) -> str:
    """The contract detail code for a Pydantic error type."""
    if _CUSTOM_CODE.fullmatch(error_type):
        return error_type
    if error_type in ("missing", "union_tag_not_found"):
        return "REQUIRED_FIELD_MISSING"
    if error_type == "extra_forbidden":
        return "UNKNOWN_FIELD"
    if error_type in _ENUM_TYPES:
        return "INVALID_ENUM_VALUE"
    if error_type in _RANGE_TYPES:
        return "OUT_OF_RANGE"
    return "INVALID_TYPE"  # *_type, *_parsing, value_error and anything unforeseen


def _is_key(container: object, part: int | str) -> bool:
    if isinstance(container, Mapping):
        return isinstance(part, str) and part in container
    if isinstance(container, list):
        return isinstance(part, int) and 0 <= part < len(container)
    return False


def field_path(loc: Sequence[int | str], data: object, *, missing: bool = False) -> list[int | str]:
    """The parts of `loc` that name fields or indexes of `data` (union member labels dropped)."""
    parts: list[int | str] = []
    current: object = data
    last = len(loc) - 1
    for position, part in enumerate(loc):
        if _is_key(current, part):
            parts.append(part)
            current = current[part]  # type: ignore[index]
        elif position == last and missing and isinstance(part, str) and isinstance(current, Mapping):
            parts.append(part)  # the absent key of an object, which a `missing` error is about
        # anything else is the label of a union member: not part of the path
    return parts


def _discriminator_name(error: ErrorDetails) -> str | None:
    # For a tag-based union the discriminator is a field; point at it, not at the whole object.
    ctx = error.get("ctx") or {}
    match = _QUOTED_NAME.fullmatch(str(ctx.get("discriminator", "")))
    return match.group(1) if match else None


def _message(code: str, field: str, error: ErrorDetails) -> str:
    if code == "REQUIRED_FIELD_MISSING":
        return f"'{field}' is required."
    if code == "UNKNOWN_FIELD":
        return f"'{field}' is not a recognised field here."
    if str(error.get("type", "")) in _OBJECT_TYPES:
        return "Expected an object."  # Pydantic's message names the model's Python class
    text = str(error.get("msg", "Invalid value."))
    text = text.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return text if text.endswith(".") else f"{text}."


def problems_from_errors(
    errors: Iterable[ErrorDetails], data: object, prefix: Sequence[int | str] = ()
) -> list[Problem]:
    """Translate Pydantic errors for `data` (the validated input) into Problems, without duplicates.

    `prefix` is prepended to every path, for input validated below the body root.
    """
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for error in errors:
        error_type = str(error.get("type", ""))
        code = detail_code(error_type)
        loc = tuple(error.get("loc", ()))
        parts = field_path(loc, data, missing=error_type == "missing")
        if error_type in ("union_tag_not_found", "union_tag_invalid"):
            name = _discriminator_name(error)
            if name is not None:
                parts.append(name)
        target = join_path(*prefix, *parts)
        if (code, target) in seen:
            continue  # a value rejected by every member of a union is reported once
        seen.add((code, target))
        field = str(parts[-1]) if parts else "body"
        problems.append(Problem(code, target, _message(code, field, error)))
    return problems


def problems_from_validation_error(
    exc: ValidationError, data: object, prefix: Sequence[int | str] = ()
) -> list[Problem]:
    return problems_from_errors(exc.errors(include_url=False), data, prefix)


def problems_from_request(errors: Iterable[ErrorDetails], body: object) -> list[Problem]:
    """FastAPI's request errors: body errors get dot paths from the body root; a query, path or
    header error is targeted at the parameter's name."""
    body_errors: list[ErrorDetails] = []
    problems: list[Problem] = []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if loc and loc[0] == "body":
            body_errors.append({**error, "loc": loc[1:]})
            continue
        name = str(loc[1]) if len(loc) > 1 else "request"
        code = detail_code(str(error.get("type", "")))
        problems.append(Problem(code, name, _message(code, name, error)))
    return problems + problems_from_errors(body_errors, body)
