"""Whether a string is an e-mail address: one check for every request field that holds one, and
one for the addresses Herald sends to (a user's `email`, a test send's EMAIL identifier)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated

from email_validator import EmailNotValidError, validate_email
from pydantic import AfterValidator, Field, Strict
from pydantic_core import PydanticCustomError

from herald.control_characters import CLASS, SPACES


@lru_cache(maxsize=4096)
def email_problem(value: str) -> str | None:
    """Why `value` is not an e-mail address (syntax only, no DNS), or None when it is one.

    Cached: the check costs more than the rest of a field's validation (a twentieth of a campaign
    create's CPU), and requests and bulk imports repeat a few creators over and over."""
    try:
        validate_email(value, check_deliverability=False)
    except EmailNotValidError as exc:
        return str(exc)
    return None


def _email(value: str) -> str:
    reason = email_problem(value)
    if reason is not None:
        raise PydanticCustomError("INVALID_TYPE", "Expected an e-mail address: {reason}", {"reason": reason})
    return value  # kept as sent: normalising would make the stored value differ from the request


# A request field holding an e-mail address (`created_by`, `updated_by`): `format: email` in the
# OpenAPI document.
EmailAddress = Annotated[str, Strict(), AfterValidator(_email), Field(json_schema_extra={"format": "email"})]

# A mailbox as a recipient: one '@' between a local part and a domain of dot-separated labels, no
# space or control character. Nothing more is asked: the operator's SMTP relay decides what it
# delivers, so a user's address at `localhost` or at a `.test` domain (a local relay, a sandbox) is
# as good as any. An empty label (`u@example.com.`, `u@.example`, `u@a..example`) is refused: no
# server takes such a domain, so every send to it would fail.
# Also the OpenAPI document's pattern (ECMAScript reads it alike, see `control_characters.SPACES`).
_LABEL = f"[^@.{SPACES}{CLASS}]+"
RECIPIENT_PATTERN = f"^[^@{SPACES}{CLASS}]+@{_LABEL}(?:\\.{_LABEL})*$"
_RECIPIENT = re.compile(RECIPIENT_PATTERN)
RECIPIENT_RULE = (
    "an `@` between a local part and a domain of dot-separated labels, none empty, without spaces "
    "or control characters (any domain, `localhost` too)"
)


def is_recipient_address(value: str) -> bool:
    """Whether `value` may be a user's e-mail address (ingestion) and so a recipient's (C8): the
    addresses a live campaign delivers to are exactly those a test may be sent to."""
    return _RECIPIENT.fullmatch(value) is not None  # `$` would let a trailing newline through
