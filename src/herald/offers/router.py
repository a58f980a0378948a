"""Offers routes (contract §1: O1-O5). Thin: parse, call one service function, answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from herald.http.auth import Caller
from herald.http.docs import error_responses
from herald.http.operation import Operation, guarded, services_of, unit_of_work
from herald.http.responses import json_response, response_id
from herald.offers import service
from herald.offers.list_query import OffersListQuery
from herald.offers.schemas import OfferListResponse
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v5/offers", tags=["offers"])

LIST_OFFERS = Operation("O1", Scope.OFFERS_READ, "offers_read")


@router.get(
    "",
    summary="List offerings",
    response_model=None,
    responses={200: {"model": OfferListResponse}, **error_responses(400, 401, 403, 429, 503)},
)
async def list_offers(
    request: Request,
    caller: Annotated[Caller, guarded(LIST_OFFERS)],
    query: Annotated[OffersListQuery, Query()],
) -> Response:
    now = services_of(request).clock.now()
    items, pagination = await service.list_offers(
        unit_of_work(request).session(), caller.workspace_id, query, now
    )
    return json_response(
        {"response_id": response_id(request), "type": "offer", "data": items, "pagination": pagination}
    )
