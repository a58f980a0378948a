"""What a message needs before it can be sent, once its custom template is filled in: the one home
of these checks for publishing (C4 validate, L1 publish) and for test sends (C8).

A message naming a `custom_template_id` is sent with the template's fields wherever it has none of
its own (`herald.personalization.personalize` fills them in the same way when it prepares the
content, for previews, tests and live sends), so a subject, sender or body the template supplies
counts as one written in the message. (What each Push template type needs is
`content.REQUIRED_BY_TEMPLATE`, read on the filled object by `content.missing_template_fields`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from herald.campaigns.schemas.content import EmailContent
from herald.delivery import attachments
from herald.delivery.config import not_a_verified_sender, sender_allowed
from herald.email_address import RECIPIENT_RULE, is_recipient_address
from herald.personalization.fields import fill_from
from herald.problems import Problem, join_path

TemplateBodies = Mapping[tuple[str | int, ...], Mapping[str, Any]]
"""The body of the custom template each message object names, by the object's path from the body
root (`campaign_content.content.email`); only templates the workspace holds."""


def filled(message: BaseModel, template: Mapping[str, Any] | None) -> dict[str, Any]:
    """The message object as JSON, its template's fields filled in where it has none."""
    data = message.model_dump(mode="json", exclude_none=True)
    if template:
        fill_from(data, dict(template))
    return data


def present(value: Any) -> bool:
    return value not in (None, "", [], {})


def email_problems(
    email: EmailContent,
    path: Sequence[str | int],
    template: Mapping[str, Any] | None,
    senders: Sequence[str] | None = None,
) -> list[Problem]:
    """What the e-mail at `path` (from the body root) lacks to be sent, its custom template (its
    body, when it names one the workspace holds) filled in. `senders`: the verified senders of the
    connector it goes through (None when that connector accepts any address)."""
    data = filled(email, template)
    problems = [
        Problem("REQUIRED_FIELD_MISSING", join_path(*path, name), f"'{name}' is required.")
        for name in ("from_address", "subject")
        if not present(data.get(name))
    ]
    if not present(data.get("html_content")) and not email.custom_template_id:
        problems.append(
            Problem(
                "REQUIRED_FIELD_MISSING",
                join_path(*path, "html_content"),
                "Either 'html_content' or 'custom_template_id' is required.",
            )
        )
    address = data.get("from_address")
    if present(address):
        problem = sender_problem(address, path, senders)
        if problem is not None:
            problems.append(problem)
    return (
        problems
        + _copied_problems(data, path)
        + attachments.problems(data.get("attachments"), (*path, "attachments"))
    )


def _copied_problems(data: Mapping[str, Any], path: Sequence[str | int]) -> list[Problem]:
    """The other addresses the message names (`reply_to_address`, `cc_ids`, `bcc_ids`) that are
    none: the SMTP server refuses a copy to one (every user's message failed, and the campaign
    paused at the error threshold), and a Reply-To that is no address cannot be answered. Judged
    as recipients are (a user's `email`): the operator's relay decides the rest."""
    named: list[tuple[tuple[str | int, ...], Any]] = []
    if present(data.get("reply_to_address")):
        named.append((("reply_to_address",), data["reply_to_address"]))
    for name in ("cc_ids", "bcc_ids"):
        copies = data.get(name)
        if isinstance(copies, list):
            named += [((name, index), copy) for index, copy in enumerate(copies)]
    problems = []
    for where, address in named:
        if not (isinstance(address, str) and is_recipient_address(address)):
            message = f"'{where[0]}' holds what is not an e-mail address ({RECIPIENT_RULE})."
            problems.append(Problem("INVALID_TYPE", join_path(*path, *where), message))
    return problems


def sender_problem(address: Any, path: Sequence[str | int], senders: Sequence[str] | None) -> Problem | None:
    """Why `address` (an e-mail's `from_address`, filled in) cannot send it, or None.
    `senders`: as in `email_problems`."""
    target = join_path(*path, "from_address")
    if not (isinstance(address, str) and is_recipient_address(address)):
        # The MAIL command names it: a draft may hold anything, a sent message may not. The rule
        # of the addresses it goes to (a sandbox sends from `localhost` or a `.test` domain too).
        return Problem("INVALID_TYPE", target, f"'from_address' is not an e-mail address ({RECIPIENT_RULE}).")
    if senders is not None and not sender_allowed(address, senders):
        return Problem("INVALID_ENUM_VALUE", target, not_a_verified_sender(address, senders))
    return None
