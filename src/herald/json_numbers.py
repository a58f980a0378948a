"""JSON has one number type: `7.0` and `7` are the same number, and JSON Schema's `integer` admits both.

Integer fields are otherwise strict (`"7"` and `true` are not integers), so this marker lets an
integral float through as the int it equals. Place it last in `Annotated[int, Strict(), Field(...), ...]`:
before the constraints it would hide them from the JSON Schema (`ge` instead of `minimum`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BeforeValidator


def _integral_float_as_int(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


IntegralFloat = BeforeValidator(_integral_float_as_int)

# The whole numbers Herald stores: signed 64-bit, as the databases' integer and JSON columns and the
# responses' JSON writer hold them (a body with one outside is refused: `http.guards`).
INT64 = range(-(2**63), 2**63)
