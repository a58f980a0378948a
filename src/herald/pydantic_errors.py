"""Pydantic validation errors as Problems: dot paths from the body root and the contract's codes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from herald.problems import Problem

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
_ENUM_TYPES = frozenset({"enum", "literal_error", "union_tag_invalid"})
_REQUEST_PARTS = frozenset({"body", "query", "path", "header", "cookie"})
# Path parts that name a union member or a validator wrapper, not a field.
_NOT_A_FIELD = re.compile(r"^(?:[A-Z][A-Za-z0-9]*|@.*|.*\[.*\].*)$")


def detail_code(error_type: str) -> str:
    if error_type.isupper():  # PydanticCustomError("MUTUALLY_EXCLUSIVE", ...) names its own code
        return error_type
    if error_type == "missing":
        return "REQUIRED_FIELD_MISSING"
    if error_type == "extra_forbidden":
        return "UNKNOWN_FIELD"
    if error_type in _ENUM_TYPES:
        return "INVALID_ENUM_VALUE"
    if error_type in _RANGE_TYPES:
        return "OUT_OF_RANGE"
    return "INVALID_TYPE"


def dot_path(loc: Sequence[int | str]) -> str:
    parts = list(loc)
    if parts and parts[0] in _REQUEST_PARTS:
        parts = parts[1:]
    return ".".join(str(part) for part in parts if not (isinstance(part, str) and _NOT_A_FIELD.match(part)))


def problems_from_errors(errors: Iterable[Any], prefix: Sequence[int | str] = ()) -> list[Problem]:
    """Translate `ValidationError.errors()` (or FastAPI's) into Problems; duplicates are dropped."""
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for error in errors:
        code = detail_code(str(error.get("type", "")))
        target = dot_path([*prefix, *error.get("loc", ())])
        if (code, target) in seen:
            continue
        seen.add((code, target))
        message = str(error.get("msg", "Invalid value."))
        problems.append(Problem(code, target, message.removeprefix("Value error, ")))
    return problems
