"""The error tree and the one error envelope every surface answers with (contract §3)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from herald.problems import Problem


class HeraldError(Exception):
    """An expected failure that becomes an error envelope; never a 500."""

    status: int = 500
    code: str = "INTERNAL_ERROR"
    message: str = "Internal error."

    def __init__(
        self,
        message: str | None = None,
        *,
        target: str | None = None,
        details: Sequence[Problem] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        self.message = message or type(self).message
        self.target = target
        self.details = list(details)
        self.headers = headers or {}
        super().__init__(self.message)


class ValidationFailed(HeraldError):
    status, code, message = 400, "VALIDATION_FAILED", "The request is not valid."

    def __init__(self, problems: Iterable[Problem], message: str | None = None, **kwargs: Any) -> None:
        details = list(problems)
        target = kwargs.pop("target", None) or (details[0].target if len(details) == 1 else None)
        super().__init__(message or _summary(details), target=target, details=details, **kwargs)


class BadRequest(HeraldError):
    status, code, message = 400, "BAD_REQUEST", "The request could not be read."


class NotFound(HeraldError):
    status, code, message = 404, "NOT_FOUND", "The resource was not found."


class OfferNotFound(NotFound):
    code, message = "OFFER_NOT_FOUND", "No offering with this id exists in the workspace."


class MethodNotAllowed(HeraldError):
    status, code, message = 405, "METHOD_NOT_ALLOWED", "The method is not allowed on this resource."


class MethodNotImplemented(HeraldError):
    """A method Herald knows nowhere (RFC 9110 §9.1: 501 on any path; 405 is for a known one)."""

    status, code = 501, "NOT_IMPLEMENTED"

    def __init__(self, method: str) -> None:
        super().__init__(f"The method {method} is not implemented by this server.")


class Conflict(HeraldError):
    status = 409


class IdempotencyConflict(Conflict):
    code = "IDEMPOTENCY_CONFLICT"
    message = "This Idempotency-Key was used with a different request."


class DuplicateIdempotencyKey(Conflict):
    code = "DUPLICATE_IDEMPOTENCY_KEY"
    message = "A request with this Idempotency-Key is still in progress."


class DuplicateRequestId(Conflict):
    code, message = "DUPLICATE_REQUEST_ID", "This request_id was already used by a successful create."


class InvalidState(Conflict):
    code, message = "INVALID_STATE", "The resource's state does not allow this change."


class ExpiredOffering(HeraldError):
    status, code, message = 403, "EXPIRED_OFFERING", "The offering has expired and cannot be changed."


class ArchivedOffering(HeraldError):
    status, code, message = 403, "ARCHIVED_OFFERING", "The offering is archived and cannot be changed."


class PreconditionFailed(HeraldError):
    status, code, message = 412, "PRECONDITION_FAILED", "If-Match does not match the current ETag."


class PayloadTooLarge(HeraldError):
    status, code, message = 413, "PAYLOAD_TOO_LARGE", "The request body is too large."


class RequestTimeout(HeraldError):
    """Answered at the socket by `herald serve` (herald.http.server), never by a route."""

    status, code, message = 408, "REQUEST_TIMEOUT", "The request was not received in time."


class HeadersTooLarge(HeraldError):
    """Answered at the socket by `herald serve` (herald.http.server), never by a route."""

    status, code = 431, "REQUEST_HEADERS_TOO_LARGE"
    message = "The request line and header fields are too large."


class UnsupportedMediaType(BadRequest):
    message = "The request body must be JSON (Content-Type: application/json)."


class Unprocessable(HeraldError):
    status, code, message = 422, "UNPROCESSABLE_ENTITY", "The request cannot be applied."


class RateLimited(HeraldError):
    status, code, message = 429, "RATE_LIMITED", "Rate limit exceeded; retry after the time in Retry-After."


def _summary(problems: Sequence[Problem]) -> str:
    if len(problems) == 1:
        return problems[0].message
    return f"The request has {len(problems)} validation errors."


def error_body(
    response_id: str,
    *,
    code: str,
    message: str,
    doc_base: str,
    target: str | None = None,
    details: Sequence[Problem] = (),
    request_id: str = "",
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "doc_url": f"{doc_base}/errors#{code}"}
    if target:
        error["target"] = target
    error["details"] = [problem.as_detail() for problem in details]
    error["request_id"] = request_id
    return {"response_id": response_id, "error": error}
