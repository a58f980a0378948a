"""Every code Herald answers with: its HTTP status, what it means, what its `target` names.

The one list of codes: the error catalog served at `/errors` (each error's `doc_url` points into it)
is generated from it, the error classes of `herald.errors` must agree with it, and a test fails when
a code is used anywhere in the source without being listed here.

Three kinds: the gateway's refusals (`ER001`/`ER007`, JSON text sent as text/plain), the codes of the
error envelope (`error.code`), and the detail codes (`error.details[].code`), which arrive inside an
envelope whose code and status `within` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gateway", "error", "detail"]


@dataclass(frozen=True, slots=True)
class Code:
    code: str
    kind: Kind
    status: int
    meaning: str
    target: str = ""  # what `target` names, when the code names something
    within: str = ""  # detail codes: the envelope code(s) they arrive in


_IN_400 = "VALIDATION_FAILED"
_BODY_PATH = "The dot path of the field in the body (array indexes as numbers)."

CODES: tuple[Code, ...] = (
    # The gateway (401/403; body: JSON text sent as text/plain).
    Code(
        "ER001",
        "gateway",
        401,
        "Credentials missing or invalid, or SVC-APPKEY is not the Basic username.",
        "`Authentication Invalid`.",
    ),
    Code(
        "ER007",
        "gateway",
        403,
        "The API key lacks the scope this operation (or this request) needs.",
        "`Authorization Failed`.",
    ),
    # The error envelope's codes.
    Code(
        "VALIDATION_FAILED",
        "error",
        400,
        "The request is not valid; every violation is in `details`.",
        "The one field at fault, when there is exactly one.",
    ),
    Code(
        "BAD_REQUEST",
        "error",
        400,
        "The request could not be read: no body, malformed JSON, not JSON (Content-Type), invalid UTF-8, "
        "NUL characters, NaN/Infinity, or JSON nested too deep. In a CLI import, a line that is not JSON.",
    ),
    Code(
        "NOT_FOUND",
        "error",
        404,
        "No such resource in this workspace (another workspace's ids are not found either), or no such "
        "route. As a detail: a recipient, user or segment the request names does not exist.",
        "The identifier or field that names what was not found.",
    ),
    Code("OFFER_NOT_FOUND", "error", 404, "No offering with this id exists in the workspace.", "`offer_id`."),
    Code("EXPIRED_OFFERING", "error", 403, "The offering has expired and cannot be changed."),
    Code("ARCHIVED_OFFERING", "error", 403, "The offering is archived and cannot be changed."),
    Code(
        "METHOD_NOT_ALLOWED",
        "error",
        405,
        "The path exists but not with this method; the `Allow` header lists the methods it has.",
    ),
    Code(
        "IDEMPOTENCY_CONFLICT",
        "error",
        409,
        "This Idempotency-Key was used (within 24 h, by this API key) with a different request.",
        "`Idempotency-Key`.",
    ),
    Code(
        "DUPLICATE_IDEMPOTENCY_KEY",
        "error",
        409,
        "A request with this Idempotency-Key is still in progress; retry when it has finished.",
        "`Idempotency-Key`.",
    ),
    Code(
        "DUPLICATE_REQUEST_ID",
        "error",
        409,
        "This campaign `request_id` was used by a successful create (1 hour for Push, 1 day for Email); "
        "the message names the existing campaign.",
        "`request_id`.",
    ),
    Code(
        "INVALID_STATE",
        "error",
        409,
        "The campaign's state does not allow this change; `details` has one NOT_EDITABLE per field.",
    ),
    Code("CONFLICT", "error", 409, "A concurrent request changed the same data; retry."),
    Code(
        "PRECONDITION_FAILED",
        "error",
        412,
        "If-Match does not match the campaign's current ETag.",
        "`If-Match`.",
    ),
    Code(
        "EXPECTATION_FAILED",
        "error",
        417,
        "The request's `Expect` header names an expectation other than 100-continue, the only one "
        "Herald meets; nothing was processed.",
        "`expect`.",
    ),
    Code(
        "UNSUPPORTED_MEDIA_TYPE",
        "error",
        415,
        "The request's body has a content coding (`Content-Encoding`, e.g. gzip); send it "
        "uncompressed. Nothing was processed.",
        "`content-encoding`.",
    ),
    Code(
        "NOT_IMPLEMENTED",
        "error",
        501,
        "The request's method is one this server implements nowhere (e.g. PROPFIND; a method it knows "
        "but the resource does not answer is 405), or its body uses a transfer coding other than chunked "
        "(e.g. gzip; send it unencoded, with Content-Length or chunked). Nothing was processed.",
        "`transfer-encoding` for a transfer coding; none for a method.",
    ),
    Code("PAYLOAD_TOO_LARGE", "error", 413, "The request body is larger than the limit (1 MiB by default)."),
    Code(
        "REQUEST_TIMEOUT",
        "error",
        408,
        "`herald serve` did not receive the request's head (`HERALD_HEADER_TIMEOUT_SECONDS`) or body "
        "(`HERALD_BODY_TIMEOUT_SECONDS`) in time; nothing was processed and the connection is closed.",
    ),
    Code(
        "REQUEST_HEADERS_TOO_LARGE",
        "error",
        431,
        "`herald serve` refused a request line and header fields larger than `HERALD_MAX_HEADER_BYTES` "
        "(64 KiB by default); nothing was processed and the connection is closed.",
    ),
    Code(
        "UNPROCESSABLE_ENTITY",
        "error",
        422,
        "The request is valid but cannot be applied: a status action the campaign does not allow, a "
        "publish that fails the publish checks (failures in `details`), a template that fails to render.",
    ),
    Code(
        "RATE_LIMITED",
        "error",
        429,
        "Rate limit exceeded; retry after the seconds in Retry-After (X-RateLimit-* describe the window).",
    ),
    Code(
        "HTTP_ERROR",
        "error",
        400,
        "A protocol-level refusal of the HTTP layer with no more specific code (its status is the "
        "answer's, a 4xx).",
    ),
    Code(
        "INTERNAL_ERROR",
        "error",
        500,
        "An unexpected failure; nothing was applied. Never an answer to bad input.",
    ),
    Code(
        "SERVICE_UNAVAILABLE",
        "error",
        503,
        "A dependency (the database or Redis) is unavailable; retry with back-off.",
    ),
    # Detail codes (error.details[].code).
    Code(
        "REQUIRED_FIELD_MISSING",
        "detail",
        400,
        "A required field is absent (or null where it may not be).",
        _BODY_PATH,
        _IN_400,
    ),
    Code(
        "INVALID_TYPE",
        "detail",
        400,
        "A value of the wrong type or format (e.g. not an ISO 8601 date-time, not a UUID v4, not an e-mail).",
        "The field, query parameter or header.",
        _IN_400,
    ),
    Code(
        "INVALID_ENUM_VALUE",
        "detail",
        400,
        "A value outside the allowed set.",
        "The field or query parameter.",
        _IN_400,
    ),
    Code(
        "OUT_OF_RANGE",
        "detail",
        400,
        "A number, length or count outside its bounds, or bounds out of order.",
        "The field or query parameter.",
        _IN_400,
    ),
    Code(
        "UNKNOWN_FIELD",
        "detail",
        400,
        "A field (or query parameter) the operation does not know.",
        "The unknown field.",
        _IN_400,
    ),
    Code(
        "MUTUALLY_EXCLUSIVE",
        "detail",
        400,
        "Fields that may not be sent together (e.g. `custom_template_id` and `html_content`).",
        "One of the fields.",
        _IN_400,
    ),
    Code(
        "FEATURE_NOT_ENABLED",
        "detail",
        400,
        "The field needs a workspace feature that is not enabled.",
        "The field (or the feature's name).",
        _IN_400,
    ),
    Code(
        "NOT_EDITABLE",
        "detail",
        409,
        "This field cannot change in the campaign's current state.",
        _BODY_PATH,
        "INVALID_STATE",
    ),
    Code(
        "INVALID_TEMPLATE",
        "detail",
        400,
        "Personalization syntax that does not parse.",
        "The field holding the template.",
        _IN_400,
    ),
    Code(
        "TEMPLATE_RENDER_FAILED",
        "detail",
        422,
        "A template that parses but fails to render for this user.",
        "The field holding the template.",
        "UNPROCESSABLE_ENTITY",
    ),
    Code(
        "RENDER_LIMIT_EXCEEDED",
        "detail",
        422,
        "A template exceeds the render limits (time, steps, output).",
        "The field holding the template.",
        "UNPROCESSABLE_ENTITY",
    ),
    Code(
        "MISSING_IDEMPOTENCY_KEY",
        "detail",
        400,
        "This operation needs an Idempotency-Key header.",
        "`Idempotency-Key`.",
        _IN_400,
    ),
    Code(
        "INVALID_IDEMPOTENCY_KEY",
        "detail",
        400,
        "The Idempotency-Key is not a UUID v4.",
        "`Idempotency-Key`.",
        _IN_400,
    ),
    Code(
        "INVALID_CURSOR",
        "detail",
        400,
        "A `cursor` that is not one this API gave (malformed or corrupted).",
        "`cursor`.",
        _IN_400,
    ),
    Code("INVALID_FIELDS_PARAM", "detail", 400, "An unknown field name in `fields`.", "`fields`.", _IN_400),
    Code(
        "INVALID_OFFER_NAME",
        "detail",
        400,
        "An offering name that is not 5-100 characters of [A-Za-z0-9_].",
        "`name`.",
        _IN_400,
    ),
    Code(
        "DUPLICATE_OFFER_NAME",
        "detail",
        400,
        "Another offering of the workspace that is not archived has this name.",
        "`name`.",
        _IN_400,
    ),
    Code(
        "DUPLICATE_OFFER_ID",
        "detail",
        400,
        "CLI offers import: another offering already has this id.",
        "`id`.",
        _IN_400,
    ),
    Code(
        "INVALID_TAG_ID", "detail", 400, "A tag that does not exist in the workspace.", "`tags.<i>`.", _IN_400
    ),
    Code(
        "INVALID_SCHEDULING",
        "detail",
        400,
        "A start in the past, an expiry not after the start, or an expiry less than 10 minutes ahead.",
        "The `scheduling` field at fault.",
        _IN_400,
    ),
    Code("INVALID_TIMEZONE", "detail", 400, "Not an IANA time zone name.", "The `timezone` field.", _IN_400),
    Code(
        "INVALID_SPLIT",
        "detail",
        400,
        "Split percentages that do not sum to exactly 100.",
        "`variation_meta.smv_distribution.split`.",
        _IN_400,
    ),
    Code(
        "SPLIT_KEY_MISMATCH",
        "detail",
        400,
        "Split keys that are not the offering's variants.",
        "`variation_meta.smv_distribution.split`.",
        _IN_400,
    ),
    Code(
        "VARIANT_COUNT_MISMATCH",
        "detail",
        400,
        "Content variants that differ from `variantsPerLocale`.",
        "`offer_content`.",
        _IN_400,
    ),
    Code(
        "INVALID_TEMPLATE_ID",
        "detail",
        400,
        "A template id that names no template of the workspace.",
        "The field holding the id.",
        _IN_400,
    ),
    Code(
        "MISSING_TEMPLATE_FIELD",
        "detail",
        400,
        "A field the offer template requires is missing from the value.",
        "The block's `value`.",
        _IN_400,
    ),
    Code(
        "REVENUE_FIELDS_INCOMPLETE",
        "detail",
        400,
        "Revenue tracking is on but `revenue_amount` or `revenue_currency` is missing.",
        "The conversion goal.",
        _IN_400,
    ),
    Code(
        "INVALID_CURRENCY_CODE",
        "detail",
        400,
        "Not an ISO 4217 currency code.",
        "`revenue_currency`.",
        _IN_400,
    ),
    Code(
        "IMMUTABLE_FIELD",
        "detail",
        400,
        "This offering field cannot change in the offering's current status.",
        _BODY_PATH,
        _IN_400,
    ),
)

BY_CODE: dict[str, Code] = {entry.code: entry for entry in CODES}
