"""Routes of live campaigns (contract §1: C5 status, C6 search, C7 meta). Thin: parse, call, answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from herald.campaigns import actions, meta, search
from herald.campaigns.lifecycle import Action
from herald.campaigns.openapi import META_BODY, SEARCH_BODY, STATUS_BODY, success
from herald.campaigns.schemas import responses
from herald.campaigns.schemas.common import Feature
from herald.campaigns.schemas.search import SearchBody
from herald.campaigns.views import campaign_view
from herald.http.auth import Caller
from herald.http.docs import error_responses
from herald.http.operation import (
    AnswerFirst,
    ClaimRead,
    Operation,
    guarded,
    parsed_or_refused,
    services_of,
    unit_of_work,
)
from herald.http.request_body import json_body
from herald.http.responses import json_response, response_id
from herald.workspaces.features import enabled_features
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v5/campaigns", tags=["campaigns"])

STATUS = Operation(
    "C5",
    Scope.CAMPAIGNS_CREATE_MANAGE,
    "campaign_ops",
    campaigns=True,
    idempotency="required",
    claim_with_read=True,
    body_check=lambda _, raw: actions.parse_status_body(raw),
    no_query=True,
)
SEARCH = Operation(
    "C6",
    Scope.CAMPAIGNS_VIEW,
    "campaign_ops",
    campaigns=True,
    idempotency="required",
    body_check=lambda _, raw: search.parse_body(SearchBody, raw),
)
META = Operation(
    "C7",
    Scope.CAMPAIGNS_VIEW,
    "campaign_ops",
    campaigns=True,
    idempotency="required",
    claim_with_read=True,
    body_check=lambda caller, raw: meta.parse(enabled_features(caller.workspace), raw),
)


def _envelope(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    return {"response_id": response_id(request), "type": "campaign", "data": data}


@router.patch(
    "/{campaign_id}/status",
    summary="Update campaign status",
    operation_id="updateCampaignStatus",
    description=(
        "STOP a one-time campaign; PAUSE or RESUME a periodic or triggered one (RESUME returns to "
        "ACTIVE or SCHEDULED). An action the delivery type or state does not allow is 422. "
        "Needs an Idempotency-Key."
    ),
    response_model=None,
    openapi_extra=STATUS_BODY,
    responses={
        **success(200, responses.CampaignStatusResponse, "The action was applied."),
        **error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
    },
)
async def update_campaign_status(
    request: Request, campaign_id: str, caller: Annotated[Caller, guarded(STATUS)]
) -> Response:
    def answer(moved: tuple[str, Action]) -> Response:
        row_id, action = moved
        return json_response(_envelope(request, {"id": row_id, "action": action.value}))

    body, refused = parsed_or_refused(request, lambda r: actions.parse_status_body(json_body(r)))
    first = AnswerFirst(request, answer)  # its record goes with the move
    await actions.change_status(
        unit_of_work(request).session(),
        caller.workspace_id,
        campaign_id,
        body,
        services_of(request).clock.now(),
        first,
        ClaimRead(request, refused),  # the key's claim goes with the row's read
    )
    return first.response


@router.post(
    "/search",
    summary="Search campaigns",
    operation_id="searchCampaigns",
    description=(
        "Campaigns matching the filters, newest first, `limit` (at most 15) per `page`. "
        "Needs an Idempotency-Key."
    ),
    response_model=None,
    openapi_extra=SEARCH_BODY,
    responses={
        **success(200, responses.CampaignSearchResponse, "One page of campaigns."),
        **error_responses(400, 401, 403, 409, 413, 429, 503),
    },
)
async def search_campaigns(request: Request, caller: Annotated[Caller, guarded(SEARCH)]) -> Response:
    versioning = Feature.VERSIONING.value in enabled_features(caller.workspace)
    rows = await search.search(
        unit_of_work(request).session(), caller.workspace_id, json_body(request), versioning=versioning
    )
    campaigns = [campaign_view(row, versioning=versioning) for row in rows]
    return json_response(_envelope(request, {"campaigns": campaigns}))


@router.post(
    "/meta",
    summary="Get campaign meta",
    operation_id="getCampaignMeta",
    description=(
        "Lightweight rows for the campaigns that match, with child counts and the daily-cached "
        "reachability of scheduled one-time and triggered campaigns. Needs the workspace's "
        "`campaign_meta` feature and an Idempotency-Key."
    ),
    response_model=None,
    openapi_extra=META_BODY,
    responses={
        **success(200, responses.CampaignMetaResponse, "One page of meta rows."),
        **error_responses(400, 401, 403, 409, 413, 429, 503),
    },
)
async def campaign_meta(request: Request, caller: Annotated[Caller, guarded(META)]) -> Response:
    features = enabled_features(caller.workspace)
    body, refused = parsed_or_refused(request, lambda r: meta.parse(features, json_body(r)))
    rows = await meta.campaign_meta(
        unit_of_work(request).session(),
        caller.workspace_id,
        features,
        body,
        services_of(request).clock.now(),
        ClaimRead(request, refused).rows,  # the key's claim goes with the page's read
    )
    return json_response(_envelope(request, {"campaigns": rows}))
