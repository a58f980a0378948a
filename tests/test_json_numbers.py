"""Integer fields accept an integral float (JSON's one number type) and nothing else new."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Strict, TypeAdapter, ValidationError

from herald.json_numbers import IntegralFloat

WHOLE = TypeAdapter(Annotated[int, Strict(), IntegralFloat])


@pytest.mark.parametrize(("given", "expected"), [(7, 7), (7.0, 7), (-3.0, -3), (0.0, 0)])
def test_integral_values_are_ints(given: object, expected: int) -> None:
    value = WHOLE.validate_python(given)
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize("given", [7.5, "7", True, None, float("nan"), float("inf")])
def test_other_values_stay_refused(given: object) -> None:
    with pytest.raises(ValidationError):
        WHOLE.validate_python(given)
