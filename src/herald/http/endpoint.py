"""Herald's own per-route request handler, in place of the framework's.

The framework's handler does, on every request, work Herald's routes never need: it describes the
endpoint for error messages, opens two exit stacks, parses the Content-Type with the e-mail package
and walks the whole dependency tree, asking each parameter what kind it is (about a third of an
`O1` answer's CPU). Herald's routes take only a few kinds of parameter: the request, the route's
dependencies (the guard of `herald.http.operation.guarded`, a query model of
`herald.http.query_model`) that take such parameters themselves, `str` path parameters, optional
`str` headers and one JSON body. So each route's handler is planned once, at
start-up, from the route's `Dependant` (the same one the OpenAPI document is generated from), and a
request only runs the plan. A route with any other kind of parameter is refused at start-up: a new
kind is added here, on purpose, not silently handled another way.

The dependencies run first, in declaration order (the guard: credentials, scope, rate limit), then
the body is judged and parsed: a caller without credentials or scope is answered 401/403 whatever it
sent (contract §2), never told what is wrong with its body. The middleware's verdict on the body's
bytes (`BODY_PROBLEM`: its media type, encoding, depth) is answered here for the same reason.
Failures raise the framework's exceptions, which the app's exception handlers turn into answers.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi._compat import Undefined
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_body_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from herald.errors import BadRequest
from herald.json_numbers import wide_as_doubles

Reader = Callable[[Request], Awaitable[Any]]

# The request state's key for what the middleware found wrong with the body's bytes: (message,
# dot path or None), or None.
BODY_PROBLEM = "body_problem"


class UnsupportedParameter(TypeError):
    """A route declares a parameter kind this handler does not read (see the module docstring)."""


def install(routes: list[BaseRoute]) -> None:
    """Give every API route Herald's handler: at start-up (`herald.main`, so that an unsupported
    parameter stops the app there) and again at the first request (routes added in between)."""
    for route in routes:
        if isinstance(route, APIRoute) and not getattr(route.app, "herald_handler", False):
            route.app = handler_for(route)


def handler_for(route: APIRoute) -> ASGIApp:
    dependant = route.dependant
    call = dependant.call
    if call is None or not inspect.iscoroutinefunction(call):
        raise UnsupportedParameter(f"{route.path}: the endpoint must be a coroutine function")
    readers = _readers(route.path, dependant)
    body_fields = dependant.body_params
    if len(body_fields) > 1:
        raise UnsupportedParameter(f"{route.path}: more than one body parameter")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        values: dict[str, Any] = {}
        for name, read in readers:
            values[name] = await read(request)
        problem = scope["state"].get(BODY_PROBLEM)
        if problem is not None:
            message, target = problem
            raise BadRequest(message, target=target)
        if body_fields:
            parsed = _parsed_body(scope["state"].get("body", b""))  # read by HeraldMiddleware
            body_values, errors = await request_body_to_args(
                body_fields=body_fields, received_body=parsed, embed_body_fields=False
            )
            if errors:
                raise RequestValidationError(errors, body=parsed)
            values.update(body_values)
        response: Response = await call(**values)
        await response(scope, receive, send)

    app.herald_handler = True  # type: ignore[attr-defined]  # `install` plans each route once
    return app


def _parsed_body(raw: bytes) -> Any:
    """The JSON body as the framework read it (`json.loads`, which the error handlers' messages and
    the numbers' precision rely on), or `Undefined` when there is none. The middleware has already
    refused a body that is not JSON by its Content-Type."""
    if not raw:
        return Undefined
    try:
        return wide_as_doubles(json.loads(raw), raw)
    except json.JSONDecodeError as error:
        problem = {
            "type": "json_invalid",
            "loc": ("body", error.pos),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": error.msg},
        }
        raise RequestValidationError([problem], body=error.doc) from error
    except ValueError as error:  # an integer beyond the interpreter's digit limit (4,300)
        raise BadRequest("The request body holds a number of more digits than can be read.") from error


def _readers(path: str, dependant: Dependant) -> list[tuple[str, Reader]]:
    if dependant.query_params or dependant.cookie_params:
        raise UnsupportedParameter(f"{path}: plain query or cookie parameters (use a query model)")
    readers: list[tuple[str, Reader]] = []
    for sub in dependant.dependencies:
        if sub.name is None:  # a route-level `dependencies=[...]` entry
            raise UnsupportedParameter(f"{path}: route-level dependencies (declare a parameter)")
        readers.append((sub.name, _dependency_reader(path, sub)))
    if dependant.request_param_name:
        readers.append((dependant.request_param_name, _the_request))
    for field in dependant.path_params:
        if field.field_info.annotation is not str:
            raise UnsupportedParameter(f"{path}: path parameter {field.name} is not a str")
        readers.append((field.name, _path_reader(field.alias)))
    for field in dependant.header_params:
        if field.field_info.annotation != (str | None):
            raise UnsupportedParameter(f"{path}: header {field.name} is not an optional str")
        readers.append((field.name, _header_reader(field.alias)))
    return readers


def _dependency_reader(path: str, sub: Dependant) -> Reader:
    """A dependency (the guard, a query model) called with its own parameters, read the same way."""
    call = sub.call
    if call is None or not inspect.iscoroutinefunction(call) or sub.body_params:
        raise UnsupportedParameter(f"{path}: dependency {call!r} must be a coroutine function without a body")
    readers = _readers(path, sub)

    async def read(request: Request) -> Any:
        values = {name: await reader(request) for name, reader in readers}
        return await call(**values)

    return read


async def _the_request(request: Request) -> Request:
    return request


def _path_reader(alias: str) -> Reader:
    async def read(request: Request) -> Any:
        return request.scope["path_params"][alias]

    return read


def _header_reader(alias: str) -> Reader:
    name = alias.lower()

    async def read(request: Request) -> Any:
        return request.headers.get(name)

    return read
