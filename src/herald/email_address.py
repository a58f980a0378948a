"""Whether a string is an e-mail address: one check for every request field that holds one."""

from __future__ import annotations

from functools import lru_cache

from email_validator import EmailNotValidError, validate_email


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
