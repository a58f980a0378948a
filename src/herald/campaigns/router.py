"""Campaign draft routes (contract §1: C1-C4). Thin: parse, call one service function, answer."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Header
from pydantic import BaseModel, ConfigDict, Field, Strict
from starlette.requests import Request
from starlette.responses import Response

from herald.campaigns import service
from herald.campaigns.openapi import CREATE_BODY, UPDATE_BODY, VALIDATE_BODY, success
from herald.campaigns.schemas import responses
from herald.campaigns.search import parse_body
from herald.campaigns.views import campaign_view, etag, etag_of
from herald.db import INTEGER_MAX
from herald.http.auth import Caller
from herald.http.docs import error_responses
from herald.http.operation import (
    AnswerFirst,
    ClaimedCreate,
    ClaimRead,
    Operation,
    guarded,
    parsed_or_refused,
    reserve_quota,
    services_of,
    unit_of_work,
)
from herald.http.query_model import QUERY_INTEGER, QueryReader, query_model
from herald.http.request_body import json_body
from herald.http.responses import json_response, response_id
from herald.schemas import APIModel
from herald.workspaces.features import enabled_features
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v5/campaigns", tags=["campaigns"])

CREATE = Operation(
    "C1",
    Scope.CAMPAIGNS_CREATE_MANAGE,
    "campaign_create",
    campaigns=True,
    idempotency="required",
    claim_with_create=True,
    quota="campaign_create_success",
    body_check=lambda caller, raw: service.check_create(workspace_of(caller), raw),
)
UPDATE = Operation(
    "C3",
    Scope.CAMPAIGNS_CREATE_MANAGE,
    "campaign_ops",
    campaigns=True,
    idempotency="required",
    claim_with_read=True,
    stored_body_check=lambda session, caller, campaign_id, raw: service.check_stored_update(
        session, workspace_of(caller), campaign_id, raw
    ),
    no_query=True,
)
# C4 is a POST that only reads: it reads in a session of its own, so that on SQLite it does not
# queue for (and hold) the one write lock a writing request's transaction takes. Its two reads (the
# campaign, then the workspace's connector names) need no common snapshot: a connector added or
# removed between them is as if it had changed just before or after the check. So they run
# without a transaction around them (on PostgreSQL no BEGIN and COMMIT: two round trips fewer).
VALIDATE = Operation("C4", Scope.CAMPAIGNS_VIEW, "campaign_ops", campaigns=True, request_transaction=False)


class ValidateBody(APIModel):
    """C4's optional body: nothing but the client's request id."""

    request_id: Annotated[str, Strict(), Field(min_length=1, max_length=128)] | None = None


class GetQuery(BaseModel):
    """C2's query: unknown parameters are refused like unknown body fields (UNKNOWN_FIELD)."""

    model_config = ConfigDict(extra="forbid")

    version_number: Annotated[
        int | None,
        Field(
            ge=1,
            le=INTEGER_MAX,
            description="A version of the campaign (its older versions are read-only snapshots).",
        ),
        QUERY_INTEGER,
    ] = None


GET = Operation("C2", Scope.CAMPAIGNS_VIEW, "campaign_ops", campaigns=True, query=QueryReader.of(GetQuery))


def workspace_of(caller: Caller) -> service.Workspace:
    return service.Workspace(id=caller.workspace_id, features=enabled_features(caller.workspace))


def _envelope(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    return {"response_id": response_id(request), "type": "campaign", "data": data}


@router.post(
    "",
    summary="Create campaign draft",
    operation_id="createCampaign",
    description=(
        "Creates a DRAFT from `channel`, `campaign_delivery_type` and `created_by`, plus any components "
        "(each validated alone). A `request_id` may not be reused after a successful create (1 h Push, "
        "1 day Email). Needs an Idempotency-Key."
    ),
    status_code=201,
    response_model=None,
    openapi_extra=CREATE_BODY,
    responses={
        **success(201, responses.CampaignCreatedResponse, "The draft was created."),
        **error_responses(400, 401, 403, 409, 413, 429, 503),
    },
)
async def create_campaign(request: Request, caller: Annotated[Caller, guarded(CREATE)]) -> Response:
    async def reserve() -> None:
        await reserve_quota(request, caller, CREATE)

    def answer(created: tuple[str, str]) -> Response:
        campaign_id, status = created
        return json_response(_envelope(request, {"id": campaign_id, "status": status}), status=201)

    first = AnswerFirst(request, answer)  # its record goes with the row
    claimed = ClaimedCreate.of(request)  # the key's claim goes with the row too
    async with claimed.answering() if claimed is not None else contextlib.nullcontext():
        await service.create_campaign(
            unit_of_work(request).session(),
            workspace_of(caller),
            json_body(request),
            services_of(request).clock.now(),
            reserve,
            first,
            claimed=claimed,
        )
    return first.response


@router.get(
    "/{campaign_id}",
    summary="Get campaign",
    operation_id="getCampaign",
    description=(
        "The stored campaign (latest version, or `version_number`), with every stored component. "
        "The `ETag` header is the value for `If-Match` on update."
    ),
    response_model=None,
    responses={
        **success(200, responses.CampaignResponse, "The campaign.", tagged=True),
        **error_responses(400, 401, 403, 404, 429, 503),
    },
)
async def get_campaign(
    request: Request,
    campaign_id: str,
    caller: Annotated[Caller, guarded(GET)],
    query: Annotated[GetQuery, query_model(GetQuery)],
) -> Response:
    row = await service.get_campaign_or_version(
        unit_of_work(request).session(), caller.workspace_id, campaign_id, query.version_number
    )
    versioning = "versioning" in enabled_features(caller.workspace)
    return json_response(
        _envelope(request, campaign_view(row, versioning=versioning)), headers={"ETag": etag(row)}
    )


@router.patch(
    "/{campaign_id}",
    summary="Update campaign",
    operation_id="updateCampaign",
    description=(
        "Each sent component replaces the stored one whole and is validated in full; then the merged "
        "draft is checked across components. What may change depends on the campaign's state (409 "
        "INVALID_STATE otherwise). Honours `If-Match` (412). Needs an Idempotency-Key."
    ),
    response_model=None,
    openapi_extra=UPDATE_BODY,
    responses={
        **success(200, responses.CampaignUpdatedResponse, "The campaign was updated.", tagged=True),
        **error_responses(400, 401, 403, 404, 409, 412, 413, 429, 503),
    },
)
async def update_campaign(
    request: Request,
    campaign_id: str,
    caller: Annotated[Caller, guarded(UPDATE)],
    if_match: Annotated[str | None, Header(alias="If-Match")] = None,
) -> Response:
    def answer(written: tuple[str, int]) -> Response:
        row_id, revision = written
        return json_response(_envelope(request, {"id": row_id}), headers={"ETag": etag_of(row_id, revision)})

    raw, refused = parsed_or_refused(request, json_body)
    first = AnswerFirst(request, answer)  # its record goes with the row's update
    await service.update_campaign(
        unit_of_work(request).session(),
        workspace_of(caller),
        campaign_id,
        raw,
        services_of(request).clock.now(),
        if_match,
        etag_of,
        first,
        ClaimRead(request, refused),  # the key's claim goes with the row's read
    )
    return first.response


@router.post(
    "/{campaign_id}/validate",
    summary="Validate campaign",
    operation_id="validateCampaign",
    description=(
        "Runs the publish checks on the saved campaign without changing it: always 200 for an existing "
        "campaign, `valid: false` with every failure in `errors`."
    ),
    response_model=None,
    openapi_extra=VALIDATE_BODY,
    responses={
        **success(200, responses.CampaignValidationResponse, "The outcome of the checks."),
        **error_responses(400, 401, 403, 404, 429, 503),
    },
)
async def validate_campaign(
    request: Request, campaign_id: str, caller: Annotated[Caller, guarded(VALIDATE)]
) -> Response:
    raw = request.state.body
    if raw and raw.strip():
        # Read only for its problems: an unknown field is UNKNOWN_FIELD, as on every other body.
        parse_body(ValidateBody, json_body(request))
    async with services_of(request).database.single_statement_reader() as session:
        problems = await service.validate_stored(
            session, workspace_of(caller), campaign_id, services_of(request).clock.now()
        )
    errors = [
        {"field": problem.target, "issue": problem.message, "code": problem.code} for problem in problems
    ]
    return json_response(_envelope(request, {"valid": not errors, "errors": errors}))
