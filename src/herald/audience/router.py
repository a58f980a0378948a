"""Ingestion routes, in the production Data API's shapes. Thin: parse, call one service function, answer.

Herald extension (contract §2 names no scope for ingestion): the key needs `data:write`. The workspace
id in the path must be the Basic username; any mismatch is answered like bad credentials (401 ER001).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from starlette.requests import Request
from starlette.responses import Response

from herald.audience import service
from herald.audience.schemas import (
    CustomerObject,
    CustomerResponse,
    EventObject,
    EventResponse,
    TransitionObject,
    TransitionResponse,
)
from herald.delivery.engine import business
from herald.http.auth import Caller, basic_credentials, unauthenticated
from herald.http.docs import documented_as, error_responses
from herald.http.operation import Operation, check_access, services_of, unit_of_work
from herald.http.request_body import raw_body
from herald.http.responses import json_response, response_id
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v1", tags=["audience data"])

# One operation for the three routes: they share one rate-limit counter per API key.
INGEST = Operation("ingest", Scope.DATA_WRITE, "ingest", idempotency="optional")
# Herald extension: raising a business event shares the ingestion bucket and scope.
BUSINESS_EVENT = Operation("business_event", Scope.DATA_WRITE, "ingest", idempotency="optional")
ERRORS = error_responses(400, 401, 403, 409, 413, 429, 503)


def _guarded(operation: Operation) -> Any:
    """Like `guarded`, after checking that the path names the caller's own workspace.

    The check comes first so that a mismatch costs no rate-limit slot and claims no Idempotency-Key.
    An absent body is refused here too: FastAPI validates the body after the dependencies, and would
    report it as a missing field rather than as the malformed request it is.
    """

    async def dependency(request: Request, workspace_id: str) -> Caller:
        username, _ = basic_credentials(request.headers.get("authorization"))
        if username != workspace_id:
            raise unauthenticated("The workspace id in the path must be the one of the credentials.")
        caller = await check_access(request, operation)
        raw_body(request)
        return caller

    dependency.__name__ = f"guard_{operation.name}_workspace_path"
    dependency.operation = operation  # type: ignore[attr-defined]
    return Depends(dependency)


def _answer(request: Request, kind: str, data: dict[str, Any]) -> Response:
    return json_response({"response_id": response_id(request), "type": kind, "data": data})


@router.post(
    "/customer/{workspace_id}",
    summary="Create or update a user",
    operation_id="ingestCustomer",
    response_model=None,
    responses={200: {"model": CustomerResponse}, **ERRORS},
)
async def ingest_customer(
    request: Request,
    workspace_id: str,
    caller: Annotated[Caller, _guarded(INGEST)],
    body: Annotated[Any, Body(), documented_as(CustomerObject)],
) -> Response:
    """Standard attributes fill the profile's columns; other keys are custom attributes, merged key by
    key into the stored ones. With `update_existing_only`, an unknown customer is not created: the
    answer is 200 with `result: "skipped"`."""
    now = services_of(request).clock.now()
    data = await service.ingest_customer(unit_of_work(request).session(), caller.workspace_id, body, now)
    return _answer(request, "customer", data)


@router.post(
    "/event/{workspace_id}",
    summary="Record a user's events",
    operation_id="ingestEvents",
    response_model=None,
    responses={200: {"model": EventResponse}, **ERRORS},
)
async def ingest_event(
    request: Request,
    workspace_id: str,
    caller: Annotated[Caller, _guarded(INGEST)],
    body: Annotated[Any, Body(), documented_as(EventObject)],
) -> Response:
    """Each action is stored as one event at `current_time` (or now). Times more than 5 minutes ahead
    are refused. An unknown customer is created."""
    now = services_of(request).clock.now()
    data = await service.ingest_event(unit_of_work(request).session(), caller.workspace_id, body, now)
    return _answer(request, "event", data)


@router.post(
    "/transition/{workspace_id}",
    summary="Bulk: customers and events",
    operation_id="ingestTransition",
    response_model=None,
    responses={200: {"model": TransitionResponse}, **ERRORS},
)
async def ingest_transition(
    request: Request,
    workspace_id: str,
    caller: Annotated[Caller, _guarded(INGEST)],
    body: Annotated[Any, Body(), documented_as(TransitionObject)],
) -> Response:
    """Up to 1000 customer and event objects, applied in order. All or nothing: every problem of every
    element is reported (paths `elements.<i>...`) and nothing is written."""
    now = services_of(request).clock.now()
    data = await service.ingest_transition(unit_of_work(request).session(), caller.workspace_id, body, now)
    return _answer(request, "transition", data)


@router.post(
    "/business-event/{workspace_id}",
    summary="Raise a business event (Herald extension)",
    operation_id="raiseBusinessEvent",
    status_code=202,
    response_model=None,
    responses={202: {"model": business.BusinessEventResponse}, **ERRORS},
)
async def raise_business_event(
    request: Request,
    workspace_id: str,
    caller: Annotated[Caller, _guarded(BUSINESS_EVENT)],
    body: Annotated[Any, Body(), documented_as(business.BusinessEventObject)],
) -> Response:
    """Starts a run of every ACTIVE BUSINESS_EVENT_TRIGGERED campaign whose
    `basic_details.business_event` is `name`, to its audience, with `attributes` as `event.*` in
    personalization. 202: the runs are started (`campaigns_started` may be 0); the worker sends them."""
    name, attributes = business.parse(body)
    now = services_of(request).clock.now()
    data = await business.raise_event(
        unit_of_work(request).session(), caller.workspace_id, name, attributes, now
    )
    return json_response({"response_id": response_id(request), "type": "business_event", "data": data}, 202)
