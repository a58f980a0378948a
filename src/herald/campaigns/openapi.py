"""OpenAPI request bodies and success answers of the campaign routes.

The routes read their bodies with `validation.parse` (the body's channel picks the model, and every
problem is collected) and write their answers as plain JSON, so the schemas are attached here rather
than derived from a parameter or a return type.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, RootModel, TypeAdapter

from herald.campaigns.actions import StatusBody
from herald.campaigns.publish import EmailCampaignV1Update, PushCampaignV1Update
from herald.campaigns.schemas import responses
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
                    "properties": {"request_id": {"type": "string", "minLength": 1, "maxLength": 128}},
                    "additionalProperties": False,
                }
            }
        },
    }
}


_RESPONSE_MODELS: tuple[type[BaseModel], ...] = (
    responses.CampaignCreatedResponse,
    responses.CampaignResponse,
    responses.CampaignUpdatedResponse,
    responses.CampaignValidationResponse,
    responses.CampaignStatusResponse,
    responses.CampaignSearchResponse,
    responses.CampaignMetaResponse,
    responses.CampaignTestResponse,
    responses.CampaignStatsResponse,
)


def success(
    status: int, model: type[BaseModel], description: str, *, tagged: bool = False
) -> dict[int | str, dict[str, Any]]:
    """A route's success answer (`status` is the route's `status_code`), described by `model`;
    `tagged`: it carries the campaign's `ETag` (what `If-Match` names on update)."""
    schema = {"$ref": _REF.format(model=model.__name__)}
    answer: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if tagged:
        answer["headers"] = {"ETag": ETAG_HEADER}
    return {status: answer}


ETAG_HEADER = {
    "description": "The campaign version's entity tag at this revision: send it in `If-Match` to update it.",
    "required": True,  # on every such answer, a replayed one too (`idempotency.STORED_HEADERS`)
    "schema": {"type": "string", "pattern": '^"[^"]+"$'},
}


_V1_MODELS = (PushCampaignV1Update.__name__, EmailCampaignV1Update.__name__)
_MERGED = "Merge"  # suffix of a component's copy as the earlier API's update sends it


def _merge_patch(node: Any, defs: dict[str, Any], out: dict[str, Any]) -> Any:
    """`node` as L1 sends it: the fields of an object are merged into the stored ones, so none is
    required, at any depth of nested objects. Array items replace what is stored, so they stay whole."""
    if isinstance(node, list):
        return [_merge_patch(item, defs, out) for item in node]
    if not isinstance(node, dict):
        return node
    relaxed: dict[str, Any] = {}
    for key, value in node.items():
        if key == "required" and isinstance(value, list):
            continue
        if key in ("items", "prefixItems"):
            relaxed[key] = value
        elif key == "$ref" and isinstance(value, str):
            relaxed[key] = _REF.format(model=_merged_copy(value.rsplit("/", 1)[-1], defs, out))
        else:
            relaxed[key] = _merge_patch(value, defs, out)
    return relaxed


def _merged_copy(name: str, defs: dict[str, Any], out: dict[str, Any]) -> str:
    """The name of `name`'s merged copy; `name` itself where merging changes nothing (an enum)."""
    merged = f"{name}{_MERGED}"
    if merged not in out:
        out[merged] = {}  # claimed first: a schema may refer to itself
        relaxed = _merge_patch(defs[name], defs, out)
        if relaxed == defs[name]:
            del out[merged]
            return name
        out[merged] = {**relaxed, "title": merged}  # generators name their classes by the title

    return merged


def _v1_update_schemas(defs: dict[str, Any]) -> dict[str, Any]:
    """L1's bodies keep their own required fields (`request_id`, `updated_by`); each component they
    carry is described as merged into the stored one (see `campaigns.v1_merge`)."""
    out: dict[str, Any] = {}
    for name in _V1_MODELS:
        model = dict(defs[name])
        model["properties"] = {
            field: _merge_patch(schema, defs, out) for field, schema in model["properties"].items()
        }
        out[name] = model
    return out


def component_schemas() -> dict[str, Any]:
    """The `$defs` the bodies and answers refer to, to merge into the document's components."""
    defs: dict[str, Any] = {}
    for adapter in (_CREATE, _UPDATE, _V1_UPDATE, _STATUS, _SEARCH, _META):
        defs |= adapter.json_schema(ref_template=_REF).get("$defs", {})
    defs |= _v1_update_schemas(defs)
    for model in _RESPONSE_MODELS:
        schema = TypeAdapter(model).json_schema(ref_template=_REF)
        defs |= schema.pop("$defs", {})
        defs[model.__name__] = schema
    return defs
