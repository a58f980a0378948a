"""C9 `POST /v5/personalization/preview`. Thin: parse, call the service, answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from starlette.requests import Request
from starlette.responses import Response

from herald.http.auth import Caller
from herald.http.docs import documented_as, error_responses
from herald.http.operation import Operation, guarded, services_of
from herald.http.request_body import raw_body
from herald.http.responses import json_response, response_id
from herald.personalization import preview as service
from herald.personalization.schemas import PreviewRequest, PreviewResponse
from herald.workspaces.scopes import Scope

router = APIRouter(prefix="/v5/personalization", tags=["personalization"])

PREVIEW = Operation(
    "C9",
    Scope.CAMPAIGNS_VIEW,
    "preview",
    campaigns=True,
    idempotency="optional",
    request_transaction=False,  # renders on read sessions of its own; writes nothing but the record
)


@router.post(
    "/preview",
    summary="Personalized preview",
    operation_id="previewPersonalization",
    description=(
        "Renders inline campaign content (PUSH, EMAIL or SMS) for one user: every personalization "
        "expression in every text is resolved; `missing` lists expressions whose value does not exist "
        "(they render empty). Nothing is sent or stored. A template that fails for this user, or "
        "exceeds the render limits (time, steps, output size), is refused with 422 "
        "UNPROCESSABLE_ENTITY (details TEMPLATE_RENDER_FAILED / RENDER_LIMIT_EXCEEDED at the field)."
    ),
    response_model=None,
    openapi_extra={"requestBody": {"required": True}},
    responses={
        200: {"model": PreviewResponse, "description": "The content rendered for the user."},
        **error_responses(400, 401, 403, 404, 409, 413, 422, 429, 503),
    },
)
async def personalized_preview(
    request: Request,
    caller: Annotated[Caller, guarded(PREVIEW)],
    # Not left to the framework to require: a request without a body is malformed (400
    # BAD_REQUEST, as on every JSON route), not a body field missing.
    body: Annotated[Any, Body(), documented_as(PreviewRequest)] = None,
) -> Response:
    raw_body(request)
    result = await service.preview(services_of(request).database.reader, caller.workspace_id, body)
    data = {"personalized_content": result.personalized_content, "missing": result.missing}
    return json_response({"response_id": response_id(request), "type": "personalization", "data": data})
