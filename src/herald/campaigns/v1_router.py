"""The earlier API's campaign route (contract §1 L1): update and publish. Thin: parse, call, answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from herald.campaigns import publish, service, v1_merge
from herald.campaigns.openapi import V1_UPDATE_BODY
from herald.campaigns.router import workspace_of
from herald.http.auth import Caller
from herald.http.docs import error_responses
from herald.http.operation import (
    AnswerFirst,
    ClaimRead,
    Operation,
    guarded,
    parsed_or_refused,
    require_scope,
    services_of,
    unit_of_work,
)
from herald.http.request_body import json_body
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/core-services/v1/campaigns", tags=["campaigns (earlier API)"])

# Component updates need create_manage; publishing needs create_manage_publish (checked once the
# body says so). The body's request_id de-duplicates repeats.
UPDATE_V1 = Operation(
    "L1",
    Scope.CAMPAIGNS_CREATE_MANAGE,
    "campaign_ops",
    campaigns=True,
    idempotency="body_request_id",
    claim_with_read=True,
    stored_body_check=lambda session, caller, campaign_id, raw: service.check_stored_update(
        session, workspace_of(caller), campaign_id, raw, v1_merge.merged_body, publish.V1_MODELS
    ),
)


@router.patch(
    "/{campaign_id}",
    summary="Update and publish campaign (earlier API)",
    operation_id="updateCampaignV1",
    description=(
        "The earlier API's update: the sent fields of each component are merged into the stored one, "
        'then the campaign is checked as a whole. With `status: "PUBLISH"` (scope '
        "`campaigns:create_manage_publish`) a draft that passes the publish checks becomes SCHEDULED "
        "or ACTIVE (422 with the failures otherwise). The body's `request_id` de-duplicates repeats."
    ),
    status_code=204,
    response_model=None,
    openapi_extra=V1_UPDATE_BODY,
    responses=error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def update_campaign_v1(
    request: Request, campaign_id: str, caller: Annotated[Caller, guarded(UPDATE_V1)]
) -> Response:
    def body(request: Request) -> object:
        raw = json_body(request)
        if publish.asks_to_publish(raw):
            require_scope(caller, Scope.CAMPAIGNS_CREATE_MANAGE_PUBLISH)
        return raw

    raw, refused = parsed_or_refused(request, body)
    # An update's record goes with the row's update, the key's claim with the row's read.
    first: AnswerFirst[tuple[str, int]] = AnswerFirst(request, lambda _: Response(status_code=204))
    await publish.update_and_publish(
        unit_of_work(request).session(),
        workspace_of(caller),
        campaign_id,
        raw,
        services_of(request).clock.now(),
        first,
        ClaimRead(request, refused),
    )
    return first.response if first.made else Response(status_code=204)
