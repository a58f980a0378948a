"""The Pydantic-error translator shared by every surface (loc -> dot path, type -> code)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from herald.problems import Problem
from herald.pydantic_errors import (
    detail_code,
    field_path,
    problems_from_validation_error,
)


@pytest.mark.parametrize(
    ("error_type", "code"),
    [
        ("missing", "REQUIRED_FIELD_MISSING"),
        ("union_tag_not_found", "REQUIRED_FIELD_MISSING"),
        ("extra_forbidden", "UNKNOWN_FIELD"),
        ("enum", "INVALID_ENUM_VALUE"),
        ("literal_error", "INVALID_ENUM_VALUE"),
        ("union_tag_invalid", "INVALID_ENUM_VALUE"),
        ("greater_than_equal", "OUT_OF_RANGE"),
        ("less_than_equal", "OUT_OF_RANGE"),
        ("string_too_short", "OUT_OF_RANGE"),
        ("too_long", "OUT_OF_RANGE"),
        ("int_type", "INVALID_TYPE"),
        ("string_type", "INVALID_TYPE"),
        ("model_attributes_type", "INVALID_TYPE"),
        ("value_error", "INVALID_TYPE"),
        ("MUTUALLY_EXCLUSIVE", "MUTUALLY_EXCLUSIVE"),
        ("FEATURE_NOT_ENABLED", "FEATURE_NOT_ENABLED"),
    ],
)
def test_detail_code(error_type: str, code: str) -> None:
    assert detail_code(error_type) == code


@pytest.mark.parametrize(
    ("loc", "data", "missing", "path"),
    [
        (("a", "b"), {"a": {"b": 1}}, False, ["a", "b"]),
        (("items", 1, "x"), {"items": [{}, {"x": 2}]}, False, ["items", 1, "x"]),
        (("items", 0, "kind_a", "x"), {"items": [{"x": 2}]}, False, ["items", 0, "x"]),  # tag dropped
        (("items", 0, "kind_a", "y"), {"items": [{"x": 2}]}, True, ["items", 0, "y"]),  # missing kept
        (("v", "str"), {"v": 5}, False, ["v"]),  # member label of a plain union dropped
        (("v", "int"), {"v": "x"}, True, ["v"]),  # only the last part of a missing error is kept
        (("m", "k", "[key]"), {"m": {"k": 1}}, False, ["m", "k"]),
    ],
)
def test_field_path(loc: tuple[str | int, ...], data: object, missing: bool, path: list[str | int]) -> None:
    assert field_path(loc, data, missing=missing) == path


class _A(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["a"]
    x: int


class _B(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["b"]
    y: str
    z: str | None = None

    @field_validator("z")
    @classmethod
    def _z(cls, value: str | None) -> str | None:
        raise PydanticCustomError("MUTUALLY_EXCLUSIVE", "z cannot be sent")


class _Root(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Annotated[_A | _B, Field(discriminator="kind")]]
    n: int | float = 0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"items": [{"kind": "a", "x": "no"}]}, Problem("INVALID_TYPE", "items.0.x", "")),
        ({"items": [{"kind": "b"}]}, Problem("REQUIRED_FIELD_MISSING", "items.0.y", "'y' is required.")),
        ({"items": [{"kind": "a", "x": 1, "w": 1}]}, Problem("UNKNOWN_FIELD", "items.0.w", "")),
        ({"items": [{"x": 1}]}, Problem("REQUIRED_FIELD_MISSING", "items.0.kind", "'kind' is required.")),
        ({"items": [{"kind": "c"}]}, Problem("INVALID_ENUM_VALUE", "items.0.kind", "")),
        (
            {"items": [{"kind": "b", "y": "1", "z": "1"}]},
            Problem("MUTUALLY_EXCLUSIVE", "items.0.z", "z cannot be sent."),
        ),
        ({"items": [], "n": "x"}, Problem("INVALID_TYPE", "n", "")),
        ({}, Problem("REQUIRED_FIELD_MISSING", "items", "'items' is required.")),
    ],
)
def test_translation_of_errors(data: dict[str, Any], expected: Problem) -> None:
    with pytest.raises(ValidationError) as info:
        _Root.model_validate(data)
    found = problems_from_validation_error(info.value, data)
    assert [(p.code, p.target) for p in found] == [
        (expected.code, expected.target)
    ]  # union noise deduplicated
    if expected.message:
        assert found[0].message == expected.message


def test_translation_prefix() -> None:
    data = {"items": [{"kind": "a", "x": "no"}]}
    with pytest.raises(ValidationError) as info:
        _Root.model_validate(data)
    assert problems_from_validation_error(info.value, data, prefix=("body",))[0].target == "body.items.0.x"
