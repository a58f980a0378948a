"""Offers routes (contract §1: O1-O5). Thin: parse, call one service function, answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from herald.http.auth import Caller
from herald.http.docs import ErrorEnvelope, documented_as, error_responses
from herald.http.operation import AnswerFirst, Operation, guarded, services_of, unit_of_work
from herald.http.query_model import QueryReader, query_model
from herald.http.request_body import has_body, raw_body
from herald.http.responses import json_response, response_id
from herald.offers import parsing, service, templates, writes
from herald.offers.list_query import OffersListQuery
from herald.offers.requests import OfferArchive, OfferCreate, OfferUpdate
from herald.offers.schemas import (
    OfferChangedResponse,
    OfferCreatedResponse,
    OfferListResponse,
    TemplateListResponse,
)
from herald.offers.templates import TemplatesQuery
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v5/offers", tags=["offers"])

LIST_OFFERS = Operation(
    "O1", Scope.OFFERS_READ, "offers_read", single_statement=True, query=QueryReader.of(OffersListQuery)
)


def _write_operation(code: str, body: type[BaseModel]) -> Operation:
    """O2, O3 and O5: an idempotent write whose body's faults are named beside its head's."""
    return Operation(
        code,
        Scope.OFFERS_WRITE,
        "offers_write",
        idempotency="required",
        body_check=lambda _, raw: parsing.check_body(raw, body),
    )


CREATE_OFFER = _write_operation("O2", OfferCreate)
UPDATE_OFFER = _write_operation("O3", OfferUpdate)
LIST_TEMPLATES = Operation(
    "O4", Scope.OFFERS_READ, "offers_read", single_statement=True, query=QueryReader.of(TemplatesQuery)
)
ARCHIVE_OFFER = _write_operation("O5", OfferArchive)

# The body is read as a plain JSON object and validated by the service, so that parse errors and
# rule violations come back together; the OpenAPI still shows the real shape. An absent body counts
# as `{}` (each required field is then reported), but the documents call it required.
_REQUIRED_BODY: dict[str, Any] = {"requestBody": {"required": True}}
OfferId = Annotated[str, Path(description="`offer_` followed by 24 hex digits.")]
_WRITE_ERRORS = error_responses(400, 401, 403, 404, 409, 413, 429, 503)
# O3/O5 answer 403 in two forms: the gateway's (scope) and the envelope (expired/archived offering).
_WRITE_ERRORS[403] = {
    **_WRITE_ERRORS[403],
    "description": "Insufficient scope (gateway body ER007, text/plain), or the offering is expired "
    "(EXPIRED_OFFERING) or archived (ARCHIVED_OFFERING) (error envelope).",
    "model": ErrorEnvelope,
}


def _answer(request: Request, data: Any, status: int = 200, kind: str = "offer") -> Response:
    return json_response({"response_id": response_id(request), "type": kind, "data": data}, status)


@router.get(
    "",
    summary="List offerings",
    operation_id="listOffers",
    description=(
        "Offerings of the workspace, newest first, filtered, with sparse `fields`; walk the pages with "
        "`pagination.next_cursor`. Status is the one in effect at request time."
    ),
    response_model=None,
    responses={200: {"model": OfferListResponse}, **error_responses(400, 401, 403, 429, 503)},
)
async def list_offers(
    request: Request,
    caller: Annotated[Caller, guarded(LIST_OFFERS)],
    query: Annotated[OffersListQuery, query_model(OffersListQuery)],
) -> Response:
    now = services_of(request).clock.now()
    reads = unit_of_work(request).direct_reads()
    items, pagination = await service.list_offers(reads, caller.workspace_id, query, now)
    return json_response(
        {"response_id": response_id(request), "type": "offer", "data": items, "pagination": pagination}
    )


@router.post(
    "",
    summary="Create an offering",
    operation_id="createOffer",
    description="Creates a published offering; its status follows its schedule. Needs an Idempotency-Key.",
    status_code=201,
    response_model=OfferCreatedResponse,
    responses=error_responses(400, 401, 403, 409, 413, 429, 503),
    openapi_extra=_REQUIRED_BODY,
)
async def create_offer(
    request: Request,
    caller: Annotated[Caller, guarded(CREATE_OFFER)],
    body: Annotated[Any, documented_as(OfferCreate), Body()] = None,
) -> Response:
    raw_body(request)  # none is a malformed request, not an offering without fields
    now = services_of(request).clock.now()
    first: AnswerFirst[dict[str, Any]] = AnswerFirst(
        request, lambda data: _answer(request, data, 201)
    )  # its record goes with the row
    await writes.create_offer(unit_of_work(request).session(), caller.workspace_id, body, now, first)
    return first.response


@router.get(
    "/templates",
    summary="List offer templates",
    operation_id="listOfferTemplates",
    description="The workspace's offer templates (managed with the CLI), paged like the offerings.",
    response_model=None,
    responses={200: {"model": TemplateListResponse}, **error_responses(400, 401, 403, 429, 503)},
)
async def list_templates(
    request: Request,
    caller: Annotated[Caller, guarded(LIST_TEMPLATES)],
    query: Annotated[TemplatesQuery, query_model(TemplatesQuery)],
) -> Response:
    items, pagination = await templates.list_templates(
        unit_of_work(request).direct_reads(), caller.workspace_id, query
    )
    return json_response(
        {"response_id": response_id(request), "type": "template", "data": items, "pagination": pagination}
    )


@router.patch(
    "/{offer_id}",
    summary="Update an offering",
    operation_id="updateOffer",
    description=(
        "`updated_by` plus the fields to change; what may change depends on the status. "
        "Expired and archived offerings answer 403. Needs an Idempotency-Key."
    ),
    response_model=OfferChangedResponse,
    responses=_WRITE_ERRORS,
    openapi_extra=_REQUIRED_BODY,
)
async def update_offer(
    request: Request,
    caller: Annotated[Caller, guarded(UPDATE_OFFER)],
    offer_id: OfferId,
    body: Annotated[Any, documented_as(OfferUpdate), Body()] = None,
) -> Response:
    raw_body(request)  # none is a malformed request, not an update without `updated_by`
    now = services_of(request).clock.now()
    session = unit_of_work(request).session()
    first: AnswerFirst[dict[str, Any]] = AnswerFirst(
        request, lambda data: _answer(request, data)
    )  # its record goes with the update
    await writes.update_offer(session, caller.workspace_id, offer_id, body, now, first)
    return first.response


@router.post(
    "/{offer_id}/archive",
    summary="Archive an offering (Herald extension)",
    operation_id="archiveOffer",
    description="Moves any offering that is not archived to `archived`, for good. Needs an Idempotency-Key.",
    response_model=OfferChangedResponse,
    responses=_WRITE_ERRORS,
)
async def archive_offer(
    request: Request,
    caller: Annotated[Caller, guarded(ARCHIVE_OFFER)],
    offer_id: OfferId,
    body: Annotated[Any, documented_as(OfferArchive), Body()] = None,
) -> Response:
    now = services_of(request).clock.now()
    session = unit_of_work(request).session()
    first: AnswerFirst[dict[str, Any]] = AnswerFirst(
        request, lambda data: _answer(request, data)
    )  # its record goes with the update
    sent = body if has_body(request) else {}  # the body is optional; `null` is not an object
    await writes.archive_offer(session, caller.workspace_id, offer_id, sent, now, first)
    return first.response
