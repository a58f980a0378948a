"""C8 `POST /v5/campaigns/test` (contract §5). Thin: parse, call the service, answer.

Included before the campaigns router: `/v5/campaigns/test` is a fixed path next to
`/v5/campaigns/{campaign_id}` routes.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, TypeAdapter
from starlette.requests import Request
from starlette.responses import Response

from herald.campaigns import openapi as campaigns_openapi
from herald.campaigns.schemas.responses import CampaignStatsResponse, CampaignTestResponse
from herald.delivery import testsend
from herald.delivery.engine import stats
from herald.delivery.testsend_request import CampaignTestDoc, check_test_body
from herald.http.auth import Caller
from herald.http.docs import error_responses
from herald.http.operation import Operation, WrittenClaim, guarded, services_of, unit_of_work
from herald.http.query_model import QueryReader, query_model
from herald.http.request_body import json_body
from herald.http.responses import json_response, request_id, response_id
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v5/campaigns", tags=["campaigns"])

TEST = Operation(
    "C8",
    Scope.CAMPAIGNS_CREATE_MANAGE,
    "campaign_ops",
    campaigns=True,
    idempotency="required",
    request_transaction=False,  # each send is recorded in the outbox as it goes
    claim_with_write=True,  # the key's claim and answer go with the first and last outbox writes
    body_check=lambda _, raw: check_test_body(raw),
)

_REF = "#/components/schemas/{model}"
_DOC: TypeAdapter[Any] = TypeAdapter(CampaignTestDoc)


def body_schemas() -> dict[str, Any]:
    """The request body's schema and the definitions it refers to (merged into components)."""
    schema = _DOC.json_schema(ref_template=_REF)
    defs = schema.pop("$defs", {})
    return {"CampaignTestBody": schema, **defs}


_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model="CampaignTestBody")}}},
    }
}


@router.post(
    "/test",
    summary="Test campaign",
    operation_id="testCampaign",
    description=(
        "Sends the content of a saved campaign (`draft_id`) or of inline content to up to 10 "
        "recipients through the workspace's connectors, one message per platform x locale x "
        "variation unless narrowed by `test_campaign_meta`. Every send is recorded in the outbox."
    ),
    response_model=None,
    openapi_extra=_BODY,
    responses={
        **campaigns_openapi.success(200, CampaignTestResponse, "The outcome of each send."),
        **error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
    },
)
async def test_campaign(request: Request, caller: Annotated[Caller, guarded(TEST)]) -> Response:
    services = services_of(request)
    deployment = testsend.Deployment(
        services.settings, services.clock, services.database, services.test_lanes
    )
    claimed: WrittenClaim[testsend.Results] = WrittenClaim(request, lambda results: _answer(request, results))
    results = await testsend.test_campaign(
        deployment, caller.workspace_id, json_body(request), request_id(request), claimed
    )
    return claimed.answer(results)


def _answer(request: Request, results: testsend.Results) -> Response:
    data = {"data": results, "message": testsend.PROCESSED_MESSAGE}
    return json_response({"response_id": response_id(request), "type": "campaign", "data": data})


class StatsQuery(BaseModel):
    """The stats route takes no query parameter: one sent is refused (UNKNOWN_FIELD), as on C2."""

    model_config = ConfigDict(extra="forbid")


STATS = Operation(
    "STATS", Scope.CAMPAIGNS_VIEW, "campaign_ops", campaigns=True, query=QueryReader.of(StatsQuery)
)


@router.get(
    "/{campaign_id}/stats",
    summary="Get campaign delivery stats",
    operation_id="getCampaignStats",
    description=(
        "A Herald extension. Per execution (run) of the campaign: the audience the segmentation "
        "selected, users held out (control group), suppressed by reason (opted out, no address on "
        "the channel, audience limit), and messages pending, sent and failed."
    ),
    response_model=None,
    responses={
        **campaigns_openapi.success(200, CampaignStatsResponse, "Each execution's counts."),
        **error_responses(400, 401, 403, 404, 429, 503),
    },
)
async def campaign_stats(
    request: Request,
    campaign_id: str,
    caller: Annotated[Caller, guarded(STATS)],
    query: Annotated[StatsQuery, query_model(StatsQuery)],
) -> Response:
    # The request's own session, which authenticated the caller: a second one from the same pool
    # made each request hold a connection while it waited for another (PostgreSQL), and a burst as
    # large as the pool waited on itself until the pool's timeout.
    data = await stats.campaign_stats(unit_of_work(request).session(), caller.workspace_id, campaign_id)
    return json_response({"response_id": response_id(request), "type": "campaign", "data": data})
