"""Query-string models read by Herald itself, documented as if FastAPI read them.

`Annotated[Model, Query()]` makes FastAPI walk every field's annotation on every request (is it a
sequence? which alias is present?) before it validates: a quarter of an O1 answer's time. Here that
walk happens once per model; a request only builds the dict and validates it in one pydantic call.
What reaches the model is what FastAPI would hand it (a repeated parameter of a list field as a
list; unknown parameters as extras, so `extra="forbid"` reports them), but a parameter of any other
field given twice is refused (FastAPI takes its last value), and a failure is the same
`RequestValidationError`, located under `query`. `herald.http.openapi` documents the fields as the
query parameters FastAPI would list (`query_parameters`).
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Depends
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import PydanticKnownError
from starlette.datastructures import QueryParams
from starlette.requests import Request

M = TypeVar("M", bound=BaseModel)

# ASCII digits; a leading minus too, so that a negative number is reported out of range.
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _integer_text(value: object) -> object:
    # Pydantic reads text as Python's int() does ('5_0' is 50; '+5', ' 5 ' and '5.0' are 5), but
    # an integer query parameter is its digits only: anything else is refused as no integer at all.
    if isinstance(value, str) and not _INTEGER_TEXT.fullmatch(value):
        raise PydanticKnownError("int_parsing")
    return value


# The one reading of an integer query parameter: `Annotated[int, Field(...), QUERY_INTEGER]` (last,
# so that it runs first and the bounds stay JSON-schema keywords in the OpenAPI document).
QUERY_INTEGER = BeforeValidator(_integer_text)


def _is_sequence(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (list, set, frozenset, tuple):
        return True
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        return any(_is_sequence(argument) for argument in typing.get_args(annotation))
    return False


@dataclass(frozen=True)
class QueryReader:
    """How one model's fields are read from a query string (computed once per model)."""

    model: type[BaseModel]
    sequences: frozenset[str]
    scalars: frozenset[str]

    @classmethod
    def of(cls, model: type[BaseModel]) -> QueryReader:
        names = {info.alias or name: info for name, info in model.model_fields.items()}
        sequences = frozenset(name for name, info in names.items() if _is_sequence(info.annotation))
        return cls(model, sequences, frozenset(names) - sequences)

    def values(self, params: QueryParams) -> dict[str, Any]:
        grouped: dict[str, list[str]] = {}
        for key, value in params.multi_items():
            grouped.setdefault(key, []).append(value)
        values: dict[str, Any] = {}
        for key, found in grouped.items():
            if key in self.sequences:
                values[key] = found
            elif key in self.scalars:
                values[key] = found[0] if len(found) == 1 else found  # repeated: refused by `read`
            else:  # an extra: the model's own policy decides
                values[key] = found[0] if len(found) == 1 else found
        return values

    def read(self, params: QueryParams) -> BaseModel:
        """The model read from `params`, or every fault of them at once (`RequestValidationError`)."""
        model, errors = self._read(params)
        if errors:
            raise RequestValidationError(errors)
        assert model is not None
        return model

    def errors(self, params: QueryParams) -> list[Any]:
        """Every fault of `params`, as `read` reports them in its `RequestValidationError` (none:
        they make a model)."""
        return self._read(params)[1]

    def _read(self, params: QueryParams) -> tuple[BaseModel | None, list[dict[str, Any]]]:
        # A parameter of one value given twice (`limit=1&limit=2`) is refused: FastAPI would take
        # the last, a proxy or a cache in front may take the first, and the client meant one. The
        # others are still read, so that the answer names every fault (contract §3).
        values = self.values(params)
        repeated = sorted(key for key in self.scalars.intersection(values) if type(values[key]) is list)
        errors: list[dict[str, Any]] = [
            {"type": "INVALID_TYPE", "loc": ("query", key), "msg": f"'{key}' must be given once."}
            for key in repeated
        ]
        for key in repeated:
            del values[key]
        given_twice = set(repeated)
        try:
            model = self.model.model_validate(values)
        except ValidationError as exc:
            errors += [
                {**error, "loc": ("query", *error.get("loc", ()))}
                for error in exc.errors(include_url=False)
                # A required parameter given twice is not missing as well.
                if not (error["type"] == "missing" and error["loc"] and error["loc"][0] in given_twice)
            ]
            return None, errors
        return (None, errors) if errors else (model, errors)


def query_model(model: type[M]) -> Any:
    """`Depends(...)` marker for `Annotated[Model, query_model(Model)]`: the model read from the query
    string, declared after the route's guard (which runs first, as it did before)."""
    reader = QueryReader.of(model)

    async def dependency(request: Request) -> BaseModel:
        return reader.read(request.query_params)

    dependency.__name__ = f"query_{model.__name__}"
    dependency.query_model = model  # type: ignore[attr-defined]
    return Depends(dependency)


def model_of(call: Any) -> type[BaseModel] | None:
    """The query model a dependency reads (see `query_model`), or None."""
    model = getattr(call, "query_model", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The model's fields as OpenAPI query parameters, as FastAPI lists a query model's fields."""
    schema = model.model_json_schema(mode="validation")
    required = set(schema.get("required", ()))
    parameters: list[dict[str, Any]] = []
    for name, property_schema in schema.get("properties", {}).items():
        if "default" in property_schema and property_schema["default"] is None:
            property_schema = {key: value for key, value in property_schema.items() if key != "default"}
        parameter: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        if "description" in property_schema:
            parameter["description"] = property_schema["description"]
        parameter["schema"] = property_schema
        parameters.append(parameter)
    return parameters
