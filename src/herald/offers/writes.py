"""O2 create, O3 update, O5 archive. Services never commit; the request's unit of work does.

Each use case collects every problem — parse errors, status gates, rules — into one 400 before
writing anything. The live-name index is the last word on uniqueness: a concurrent create or
rename that slips between our check and our write is reported as DUPLICATE_OFFER_NAME too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from herald.errors import ArchivedOffering, OfferNotFound, ValidationFailed
from herald.ids import object_id, offer_public_id, parse_offer_id, parse_tag_id
from herald.joined_writes import Answer
from herald.offers import documents, gates, parsing, repository, rules
from herald.offers.models import STORED_ARCHIVED, STORED_DRAFT, STORED_PUBLISHED, StoredOffer
from herald.offers.requests import OfferArchive, OfferCreate, OfferFields, OfferUpdate
from herald.offers.rules.content import template_ids
from herald.offers.rules.scheduling import EXPIRY, START
from herald.offers.status import effective_status
from herald.problems import Problem
from herald.timefmt import rfc3339


def everything(document: dict[str, Any]) -> frozenset[str]:
    """On create (and import) every field sent counts as changed."""
    extra = {START, EXPIRY} if document.get("scheduling") else set()
    return frozenset(document) | extra


async def load_lookups(
    session: AsyncSession,
    workspace_id: str,
    values: OfferFields,
    changed: frozenset[str],
    now: datetime,
    *,
    draft: bool = False,
) -> rules.Lookups:
    """Fetch only what the changed fields refer to (the name: see `check_all`)."""
    tags: frozenset[str] = frozenset()
    if "tags" in changed and values.tags:
        tags = await repository.existing_tags(session, workspace_id, [parse_tag_id(t) for t in values.tags])
    templates: dict[str, list[str]] = {}
    if "offer_content" in changed and values.offer_content is not None:
        templates = await repository.template_fields(
            session, workspace_id, sorted(template_ids(values.offer_content))
        )
    return rules.Lookups(now=now, existing_tags=tags, templates=templates, draft=draft)


async def check_all(
    session: AsyncSession,
    workspace_id: str,
    values: OfferFields,
    changed: frozenset[str],
    now: datetime,
    found: list[Problem],
    failed: frozenset[str],
    *,
    except_id: str | None = None,
    draft: bool = False,
) -> None:
    """Raise every problem of a write at once: `found` (parse errors, status gates) and the rules.

    Whether a new name is taken is left to the live-name index when nothing else is wrong: the
    write then fails on it and is answered DUPLICATE_OFFER_NAME, as the rule would have (one
    statement fewer on every write that changes the name). A request refused anyway looks the name
    up, so the clash is reported beside its other problems.
    """
    lookups = await load_lookups(session, workspace_id, values, changed, now, draft=draft)
    problems = distinct([*found, *rules.check(values, changed, lookups, failed)])
    if not problems:
        return
    name = values.name
    checks_name = "name" in changed and name is not None and rules.OFFER_NAME.fullmatch(name)
    if checks_name and await repository.live_names(session, workspace_id, [str(name)], except_id):
        lookups = replace(lookups, name_taken=True)
        problems = distinct([*found, *rules.check(values, changed, lookups, failed)])
    raise ValidationFailed(problems)


def distinct(problems: Iterable[Problem]) -> list[Problem]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for problem in problems:
        if (problem.code, problem.target) not in seen:
            seen.add((problem.code, problem.target))
            kept.append(problem)
    return kept


def _duplicate_name(name: str) -> ValidationFailed:
    return ValidationFailed(
        [Problem("DUPLICATE_OFFER_NAME", "name", f"An offer named '{name}' already exists.")]
    )


async def create_offer(
    session: AsyncSession,
    workspace_id: str,
    body: Any,
    now: datetime,
    answer: Answer[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """O2. Offers created through the API are published; drafts come from `herald offers import`.
    `answer` is called with what the answer shows just before the row is written."""
    parsed = parsing.parse(parsing.as_object(body), OfferCreate)
    changed = everything(parsed.valid)
    await check_all(session, workspace_id, parsed.values, changed, now, parsed.problems, parsed.failed)
    row = documents.row_values(parsed.valid)
    offer_id = object_id(now)
    values = {
        "workspace_id": workspace_id,
        "id": offer_id,
        "name": row.name,
        "stored_status": STORED_PUBLISHED,
        "priority": row.priority,
        "start_datetime": row.start_datetime,
        "expiry_datetime": row.expiry_datetime,
        "tags": row.tags,
        "document": row.document,
        "created_at": now,
        "created_by": row.created_by,
        "updated_at": now,
        "updated_by": None,
    }
    status = effective_status(STORED_PUBLISHED, row.start_datetime, row.expiry_datetime, now)
    shown = {"id": offer_public_id(offer_id), "status": status.value, "created_at": rfc3339(now)}
    joined = answer(shown) if answer is not None else None
    await _written(repository.insert_offer(session, values, joined), row.name)
    await repository.add_tags(session, workspace_id, offer_id, row.tags)
    return shown


async def _written(write: Awaitable[None], name: str) -> None:
    """Run a write of an offer's row; a clash on the live-name index is the name's problem."""
    try:
        await write
    except IntegrityError as exc:
        if repository.is_duplicate_name(exc):
            raise _duplicate_name(name) from None
        raise


async def _load(session: AsyncSession, workspace_id: str, public_id: str) -> StoredOffer:
    raw_id = parse_offer_id(public_id)
    offer = await repository.get_for_update(session, workspace_id, raw_id) if raw_id else None
    if offer is None:
        raise OfferNotFound(target="offer_id")
    return offer


async def update_offer(
    session: AsyncSession,
    workspace_id: str,
    public_id: str,
    body: Any,
    now: datetime,
    answer: Answer[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """O3: merge the sent fields into the stored offer, check gates and rules, write (`answer`: see
    `create_offer`)."""
    offer = await _load(session, workspace_id, public_id)
    status = effective_status(offer.stored_status, offer.start_datetime, offer.expiry_datetime, now)
    refused = gates.refusal(status)
    if refused is not None:
        raise refused
    raw = parsing.as_object(body)
    parsed = parsing.parse(raw, OfferUpdate)
    current = documents.current_document(offer)
    merged = documents.merge(current, parsed.valid)
    changed = gates.changed_fields(current, merged)
    values = OfferFields.model_validate(merged)
    await check_all(
        session,
        workspace_id,
        values,
        changed,
        now,
        [*parsed.problems, *gates.gate_problems(status, current, merged, changed)],
        parsed.failed,
        except_id=offer.id,
        draft=offer.stored_status == STORED_DRAFT,
    )
    row = documents.row_values(merged)
    columns = {
        "name": row.name,
        "priority": row.priority,
        "created_by": row.created_by,
        "tags": row.tags,
        "start_datetime": row.start_datetime,
        "expiry_datetime": row.expiry_datetime,
        "document": row.document,
        "updated_at": now,
        "updated_by": raw["updated_by"],
    }
    status = effective_status(offer.stored_status, row.start_datetime, row.expiry_datetime, now)
    shown = {"id": public_id, "status": status.value, "updated_at": rfc3339(now)}
    joined = answer(shown) if answer is not None else None
    await _written(repository.update_offer(session, workspace_id, offer.id, columns, joined), row.name)
    if "tags" in changed:
        await repository.replace_tags(session, workspace_id, offer.id, row.tags)
    return shown


async def archive_offer(
    session: AsyncSession,
    workspace_id: str,
    public_id: str,
    body: Any,
    now: datetime,
    answer: Answer[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """O5: any offering that is not archived yet becomes archived, for good (`answer`: see
    `create_offer`)."""
    offer = await _load(session, workspace_id, public_id)
    if offer.stored_status == STORED_ARCHIVED:
        raise ArchivedOffering()
    body, problems = parsing.parse_model(parsing.as_object(body), OfferArchive)
    if body is None:
        raise ValidationFailed(problems)
    columns = {"stored_status": STORED_ARCHIVED, "updated_at": now, "updated_by": body.updated_by}
    shown = {"id": public_id, "status": STORED_ARCHIVED, "updated_at": rfc3339(now)}
    joined = answer(shown) if answer is not None else None
    await repository.update_offer(session, workspace_id, offer.id, columns, joined)
    return shown
