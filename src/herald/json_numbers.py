"""JSON has one number type: `7.0` and `7` are the same number, and JSON Schema's `integer` admits both.

Integer fields are otherwise strict (`"7"` and `true` are not integers), so this marker lets an
integral float through as the int it equals. Place it last in `Annotated[int, Strict(), Field(...), ...]`:
before the constraints it would hide them from the JSON Schema (`ge` instead of `minimum`).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import AfterValidator, BeforeValidator
from pydantic_core import PydanticCustomError


def _integral_float_as_int(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


IntegralFloat = BeforeValidator(_integral_float_as_int)


def _within_int64(value: int) -> int:
    if value not in INT64:
        raise PydanticCustomError(
            "OUT_OF_RANGE", "Whole numbers must fit in 64 bits ({low} to {high}).", _BOUNDS
        )
    return value


# The bound of an integer field that has no tighter one: place it with the field's other
# constraints. (Not a `Field(le=...)`: the OpenAPI document would give the bound as a double,
# 9.223372036854776e+18, which a client reads as a number past it.)
Int64 = AfterValidator(_within_int64)

# The whole numbers Herald stores: signed 64-bit, as the databases' integer and JSON columns and the
# responses' JSON writer hold them. Every integer field is bounded by them (`Int64`) or tighter; a
# request body's whole numbers outside them are read as doubles (`wide_as_doubles`).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT64 = range(INT64_MIN, INT64_MAX + 1)
_BOUNDS = {"low": INT64_MIN, "high": INT64_MAX}

# A whole number outside 64 bits has at least 19 digits: bodies without such a run are left alone.
_LONG_DIGITS = re.compile(rb"\d{19,}")


def wide_as_doubles(value: Any, raw: bytes) -> Any:
    """`value` (read from the JSON text `raw`) with every whole number outside 64 bits replaced by
    the double it is nearest to. JSON has one number type: `100000000000000000000` is the number
    `1e20` is, and is judged as `1e20` is (an integer field bounded below it: OUT_OF_RANGE, with
    every other problem of the body; a free-form value: stored as a double) instead of reaching
    a column or the responses' writer that cannot hold it."""
    if _LONG_DIGITS.search(raw) is None:
        return value
    return _narrowed(value)


def _narrowed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _narrowed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_narrowed(item) for item in value]
    if type(value) is int and value not in INT64:
        return float(value)
    return value
