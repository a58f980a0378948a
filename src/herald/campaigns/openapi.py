"""OpenAPI request bodies of the campaign routes.

The routes read their bodies with `validation.parse` (the body's channel picks the model, and every
problem is collected), so the schemas are attached here rather than derived from a parameter.
"""

from __future__ import annotations

from typing import Any

from pydantic import RootModel, TypeAdapter

from herald.campaigns.actions import StatusBody
from herald.campaigns.publish import EmailCampaignV1Update, PushCampaignV1Update
from herald.campaigns.schemas.campaign import CampaignCreateBody, CampaignUpdateBody
from herald.campaigns.schemas.search import MetaBody, SearchBody

_REF = "#/components/schemas/{model}"


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _schema(adapter: TypeAdapter[Any]) -> dict[str, Any]:
    schema = adapter.json_schema(ref_template=_REF)
    schema.pop("$defs", None)  # merged into the document's components by `component_schemas`
    return schema


class _CreateBody(RootModel[CampaignCreateBody]):
    pass


class _UpdateBody(RootModel[CampaignUpdateBody]):
    pass


class _V1UpdateBody(RootModel[PushCampaignV1Update | EmailCampaignV1Update]):
    pass


_CREATE: TypeAdapter[Any] = TypeAdapter(_CreateBody)
_UPDATE: TypeAdapter[Any] = TypeAdapter(_UpdateBody)
_V1_UPDATE: TypeAdapter[Any] = TypeAdapter(_V1UpdateBody)
CREATE_BODY = _body(_schema(_CREATE))
UPDATE_BODY = _body(_schema(_UPDATE))
V1_UPDATE_BODY = _body(_schema(_V1_UPDATE))
_STATUS: TypeAdapter[Any] = TypeAdapter(StatusBody)
_SEARCH: TypeAdapter[Any] = TypeAdapter(SearchBody)
_META: TypeAdapter[Any] = TypeAdapter(MetaBody)
STATUS_BODY = _body(_schema(_STATUS))
SEARCH_BODY = _body(_schema(_SEARCH))
META_BODY = _body(_schema(_META))
VALIDATE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"request_id": {"type": "string"}},
                    "additionalProperties": False,
                }
            }
        },
    }
}


def component_schemas() -> dict[str, Any]:
    """The `$defs` the bodies refer to, to merge into the document's components."""
    defs: dict[str, Any] = {}
    for adapter in (_CREATE, _UPDATE, _V1_UPDATE, _STATUS, _SEARCH, _META):
        defs |= adapter.json_schema(ref_template=_REF).get("$defs", {})
    return defs
