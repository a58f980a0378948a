"""The OpenAPI document, completed with what every guarded operation shares.

FastAPI describes routes from their signatures; the headers and answers that the middleware and the
guard add to every operation (auth, request ids, rate-limit headers, gateway errors) are added here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import BaseRoute

from herald.config import Settings
from herald.http.docs import GatewayError, error_responses
from herald.http.guards import UUID4_PATTERN
from herald.http.operation import REQUIRED_MARK, IdempotencyMode, Operation, documented_headers, guard_of
from herald.http.query_model import model_of, query_parameters

_INT = {"type": "integer"}
# What `herald.http.guards.parse_uuid4` accepts (its pattern). A string with
# a pattern, not `format: uuid`: generated clients then take and send the text as it is (with the
# standard format, some make the caller build a UUID object and then cannot put it in a header). The
# format is named `uuid4`, which generators leave as plain text and test tools can be taught
# (tests/robustness/hooks.py).
UUID4 = {
    "type": "string",
    "format": "uuid4",
    "pattern": UUID4_PATTERN,
    "description": "A UUID v4 in its hyphenated text form.",
}
UUID4_HEADERS = frozenset({"X-SVC-Request-Id", "Idempotency-Key"})
# Response headers marked `required` are on every answer of the statuses they are listed for: the
# request id on every answer (the middleware's and `herald serve`'s refusals included), the rate
# limit's on every 2xx and 429 of a guarded operation (the guard took a slot, or was refused one).
REQUEST_ID_HEADER = {
    "X-SVC-Request-Id": {"description": "The request's trace id.", "required": True, "schema": UUID4}
}
RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit": {
        "description": "Requests allowed in the window nearest exhaustion.",
        "required": True,
        "schema": _INT,
    },
    "X-RateLimit-Remaining": {
        "description": "Requests left in that window.",
        "required": True,
        "schema": _INT,
    },
    "X-RateLimit-Reset": {
        "description": "UTC epoch seconds when that window frees a slot.",
        "required": True,
        "schema": _INT,
    },
}
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds after which the request is admitted.",
        "required": True,
        "schema": _INT,
    }
}
# What makes a request a repeat whose answer is replayed, by the guard's idempotency mode.
_REPEAT = {
    "required": "the same Idempotency-Key",
    "optional": "the same Idempotency-Key",
    "body_request_id": "the same `request_id` in its body (this operation reads no Idempotency-Key)",
}


def _replayed(mode: IdempotencyMode) -> dict[str, Any]:
    return {
        "Idempotent-Replayed": {
            "description": f"`true` when this is the stored answer to an earlier request with "
            f"{_REPEAT[mode]}; absent on the first answer.",
            "schema": {"type": "string", "enum": ["true"]},
        }
    }


# The answers an Idempotency-Key keeps and replays: successes, and refusals that would be the same
# again (a conflict, a rule the request broke); a 400 or a failure is not kept.
_REPLAYED_STATUSES = ("2", "409", "422")
BODY_METHODS = frozenset({"post", "put", "patch"})


def _rename_token(document: Any, settings: Settings) -> Any:
    """Header names carry the deployment's token (`HERALD_HEADER_TOKEN`) instead of the default."""
    if isinstance(document, dict):
        return {
            _rename_token(key, settings): _rename_token(value, settings) for key, value in document.items()
        }
    if isinstance(document, list):
        return [_rename_token(item, settings) for item in document]
    if isinstance(document, str):
        return settings.with_header_names(document)
    return document


@dataclass(frozen=True)
class Documented:
    """What an operation reads outside its signature's parameters: its guard's headers and a query
    model (`herald.http.query_model`); `enrich` writes both into the document."""

    guard: Operation | None = None
    query: type[BaseModel] | None = None


def guarded_operations(routes: Iterable[BaseRoute]) -> dict[tuple[str, str], Documented]:
    """(path, lower-case method) -> the route's guard and query model, for the routes with either."""
    found: dict[tuple[str, str], Documented] = {}
    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        guard: Operation | None = None
        query: type[BaseModel] | None = None
        dependants = list(route.dependant.dependencies)
        while dependants:
            dependant = dependants.pop(0)
            guard = guard or guard_of(dependant.call)
            query = query or model_of(dependant.call)
            dependants.extend(dependant.dependencies)
        if guard is not None or query is not None:
            for method in route.methods or ():
                found[(route.path_format, method.lower())] = Documented(guard, query)
    return found


def _complete_operation(method: str, operation: dict[str, Any], guard: Operation) -> None:
    # An Idempotency-Key, or (L1) the body's request_id: its repeats are replayed.
    keyed = guard.idempotency != "none"
    for parameter in operation.get("parameters", []):
        if parameter.get("in") != "header":
            continue
        # A header is absent or a string, never null: `str | None` parameters describe only absence.
        variants = parameter.get("schema", {}).get("anyOf", [])
        if {"type": "null"} in variants and len(variants) == 2:
            parameter["schema"] = next(variant for variant in variants if variant != {"type": "null"})
        if str(parameter.get("description", "")).startswith(REQUIRED_MARK):
            parameter["required"] = True
        if parameter.get("name") in UUID4_HEADERS:
            parameter["schema"] = dict(UUID4)
    # The scope the API key needs: in the description, and as `x-scopes` for tools. Not as the
    # security requirement's role, which OpenAPI 3.1 allows but linters read as undeclared OAuth
    # scopes.
    scope = guard.scope.value
    operation["security"] = [{"basicAuth": []}]
    operation["x-scopes"] = [scope]
    needs = f"Scope: `{scope}`."
    description = str(operation.get("description") or "")
    if needs not in description:
        operation["description"] = f"{description}\n\n{needs}" if description else needs
    responses: dict[str, Any] = operation.setdefault("responses", {})
    # FastAPI's default 422 describes its own validation errors; Herald answers those with 400.
    default_422 = responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if default_422.get("$ref", "").endswith("/HTTPValidationError"):
        del responses["422"]
    # What any request may be answered: the guard's, and `herald serve`'s at the socket.
    shared = [400, 401, 403, 408, 415, 417, 429, 431, 501, 503] + ([413] if method in BODY_METHODS else [])
    for status, entry in error_responses(*shared).items():
        if str(status) not in responses:
            if "model" in entry:
                entry = {
                    "description": entry["description"],
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}
                    },
                }
            responses[str(status)] = entry
    for status, response in responses.items():
        headers = response.setdefault("headers", {})
        if status.startswith("2") or status == "429":
            headers.update(RATE_LIMIT_HEADERS)
        if status == "429":
            headers.update(RETRY_AFTER)
        if keyed and status.startswith(_REPLAYED_STATUSES):
            headers.update(_replayed(guard.idempotency))


def _identify_answers(operation: dict[str, Any]) -> None:
    """Every answer of every operation carries the request id (the probes' and metrics' too)."""
    for response in operation.get("responses", {}).values():
        response["headers"] = {**REQUEST_ID_HEADER, **response.get("headers", {})}


DESCRIPTION = """Herald serves the Offer Listing and Campaign Draft API (v5): the offers catalog and
the Push/Email campaign drafts, with the earlier API's update-and-publish and Herald's audience ingestion.

Every JSON answer carries `response_id`; errors share one envelope whose `doc_url` leads to the
[error catalog](/errors). Credentials: HTTP Basic (workspace id, API key); campaign operations also
send the workspace id in `SVC-APPKEY`."""
CONTACT = {"name": "Herald"}
TAGS = [
    {"name": "offers", "description": "The offers catalog: list, create, update, archive, templates."},
    {
        "name": "campaigns",
        "description": "Push and Email campaign drafts: create, read, update, validate, test, search, "
        "meta, status actions.",
    },
    {
        "name": "campaigns (earlier API)",
        "description": "The earlier API's campaign update, which also publishes.",
    },
    {"name": "personalization", "description": "Content rendered for one user, nothing sent."},
    {
        "name": "audience data",
        "description": "Users and their events, in the Data API's shapes (Herald extension).",
    },
    {
        "name": "operations",
        "description": "Probes and metrics for load balancers, orchestrators and Prometheus; no API key.",
    },
]


def _references(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            found |= _references(value)
        return found
    if isinstance(node, list):
        return set().union(*(_references(item) for item in node)) if node else set()
    return set()


def _drop_unused_schemas(document: dict[str, Any]) -> None:
    """Keep the component schemas that some operation reaches (definitions merged from whole models
    may hold ones no operation uses: a document should not carry them)."""
    schemas: dict[str, Any] = document.get("components", {}).get("schemas", {})
    reached: set[str] = set()
    frontier = _references(document.get("paths", {}))
    while frontier:
        reached |= frontier
        frontier = set().union(*(_references(schemas.get(name)) for name in frontier)) - reached
    for name in set(schemas) - reached:
        del schemas[name]


_BOUNDS = frozenset({"maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf"})


def _integral_bounds(node: Any) -> None:
    """Bounds written as the integers they are: the framework's document model reads every bound
    as a float (`maximum: 15.0`), which an integer property's reader should not have to round."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _BOUNDS and isinstance(value, float) and value.is_integer():
                node[key] = int(value)
            else:
                _integral_bounds(value)
    elif isinstance(node, list):
        for item in node:
            _integral_bounds(item)


def enrich(
    document: dict[str, Any], settings: Settings, guarded: dict[tuple[str, str], Documented]
) -> dict[str, Any]:
    """The framework's document of the app's routes, completed: `guarded` (see `guarded_operations`)
    names the operations that authenticate, whose guard's headers and shared answers are added."""
    document["info"] |= {"description": DESCRIPTION, "contact": CONTACT}
    document["tags"] = TAGS
    components = document.setdefault("components", {})
    components.setdefault("schemas", {})["GatewayError"] = GatewayError.model_json_schema()
    components.setdefault("securitySchemes", {})["basicAuth"] = {
        "type": "http",
        "scheme": "basic",
        "description": "Username: workspace id. Password: an API key issued by `herald keys create`.",
    }
    for path, path_item in document.get("paths", {}).items():
        for method, operation in path_item.items():
            if not isinstance(operation, dict):
                continue
            documented = guarded.get((path, method))
            if documented is not None:
                parameters = operation.setdefault("parameters", [])
                if documented.query is not None:  # after the path's parameters, as the framework orders them
                    parameters.extend(query_parameters(documented.query))
                if documented.guard is not None:
                    parameters.extend(documented_headers(documented.guard))
                    _complete_operation(method, operation, documented.guard)
            _identify_answers(operation)  # last: the answers `_complete_operation` adds too
    _drop_unused_schemas(document)
    _integral_bounds(document)
    renamed: dict[str, Any] = _rename_token(document, settings)
    return renamed
