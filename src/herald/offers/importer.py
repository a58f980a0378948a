"""Bulk import of offerings from JSON Lines (`herald offers import`, the demo, the benchmarks).

Each line is one offering: an O2 body plus optional
- `status`: `published` (default; the effective status then follows the schedule), `draft` or
  `archived`. Drafts and archived offerings need only `name` and `created_by`; what they do carry
  is checked like an O2 body.
- `id`: `offer_<24 hex>` to keep an offering's identity across systems (default: a new id that
  sorts by `created_at`).
- `created_at`: ISO 8601 UTC with `Z` (default: now).

Every rule of O2 applies except the ones about the present moment ("start in the past", "expires
within 10 minutes"): an import carries history. Names stay unique among non-archived offerings,
within the file and against the workspace.

The whole file is one transaction: it lands whole or not at all. Lines are validated and written
in batches with one multi-row INSERT per table per batch (SQLAlchemy Core executemany), so memory
stays flat whatever the file size; validation, most of the work, can run in worker processes. A
bad line does not stop validation: the import goes on to report up to `max_errors` bad lines with
their numbers, and the caller rolls everything back.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import aclosing, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.ids import INSTANT_RANGE, holds_instant, object_id, parse_offer_id
from herald.offers import documents, parsing, repository, rules
from herald.offers.models import STORED_ARCHIVED, STORED_DRAFT, STORED_PUBLISHED, Offer, OfferTag
from herald.offers.requests import OfferCreate, OfferFields
from herald.offers.rules.scheduling import parse_zulu
from herald.offers.writes import distinct, everything
from herald.problems import Problem
from herald.workspaces import service as workspaces_service
from herald.workspaces.models import OfferTemplate, Tag

STATUSES = (STORED_PUBLISHED, STORED_DRAFT, STORED_ARCHIVED)
IMPORT_ONLY = ("status", "id", "created_at")
DEFAULT_BATCH = 5000


@dataclass(frozen=True)
class LineError:
    line: int
    problems: list[Problem]

    def describe(self) -> str:
        return "; ".join(f"{p.target or '(line)'}: {p.code}: {p.message}" for p in self.problems)


@dataclass
class ImportResult:
    imported: int = 0  # rows written (rolled back again when there are errors)
    lines: int = 0
    errors: list[LineError] = field(default_factory=list)
    stopped_early: bool = False  # max_errors reached; later lines were not read

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class _Row:
    line: int
    offer: dict[str, Any]
    tags: list[str]
    live_name: str | None  # the name, unless archived (archived names may repeat)


@dataclass(frozen=True)
class _Catalog:
    """What every line is checked against, built once per import (and sent to each worker)."""

    workspace_id: str
    now: datetime
    published: rules.Lookups
    draft: rules.Lookups


@dataclass(frozen=True)
class _Chunk:
    first_line: int
    lines: list[bytes]


@dataclass(frozen=True)
class _Checked:
    rows: list[_Row]
    errors: list[LineError]
    size: int  # bytes of the chunk


Progress = Callable[[int], None]  # bytes consumed so far


async def import_lines(
    session: AsyncSession,
    workspace_id: str,
    lines: Iterable[bytes],
    now: datetime,
    *,
    batch_size: int = DEFAULT_BATCH,
    max_errors: int = 100,
    progress: Progress | None = None,
    workers: int = 1,
) -> ImportResult:
    """Validate and insert every line in `session`'s transaction. The caller commits when
    `result.ok`, and rolls back otherwise.

    With `workers` > 1, batches are validated in that many worker processes while this one writes
    the batches before them: validation is most of the CPU an import takes. Batches are written in
    file order either way, so names and ids clash exactly as they would one by one.
    """
    await workspaces_service.get_workspace(session, workspace_id)  # AdminError when unknown
    catalog = await _load_catalog(session, workspace_id, now)
    result = ImportResult()
    consumed = 0
    checked_all = _check_all(catalog, _chunks(lines, batch_size, result), workers)
    with few_collections():
        async with aclosing(checked_all) as checked_chunks:
            async for checked in checked_chunks:
                result.errors += checked.errors
                await _flush(session, workspace_id, checked.rows, result)
                consumed += checked.size
                if progress is not None:
                    progress(consumed)
                if len(result.errors) >= max_errors:
                    result.stopped_early = True
                    break
    result.errors.sort(key=lambda error: error.line)
    del result.errors[max_errors:]
    return result


@contextmanager
def few_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while a bulk job allocates millions of objects.

    They die young by reference counting anyway; what costs is the collector re-scanning every
    long-lived object (modules, models, mappers) hundreds of times: a fifth of an import's CPU.
    Frozen objects are not scanned; the previous settings come back afterwards.
    """
    before = gc.get_threshold()
    _collect_less()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def _chunks(lines: Iterable[bytes], size: int, result: ImportResult) -> Iterator[_Chunk]:
    chunk: list[bytes] = []
    first = 1
    for number, line in enumerate(lines, start=1):
        chunk.append(line)
        result.lines = number
        if len(chunk) >= size:
            yield _Chunk(first, chunk)
            chunk, first = [], number + 1
    if chunk:
        yield _Chunk(first, chunk)


async def _check_all(
    catalog: _Catalog, chunks: Iterator[_Chunk], workers: int
) -> AsyncGenerator[_Checked, None]:
    """Checked chunks in file order: here, or in worker processes with a few chunks in flight."""
    if workers <= 1:
        for chunk in chunks:
            yield check_chunk(catalog, chunk)
        return
    loop = asyncio.get_running_loop()
    # spawn, not fork: the parent holds an event loop and database connections.
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_collect_less,  # for the worker's life: it only checks chunks
    )
    pending: deque[asyncio.Future[_Checked]] = deque()
    try:
        for chunk in chunks:
            pending.append(loop.run_in_executor(pool, check_chunk, catalog, chunk))
            if len(pending) > 2 * workers:  # bounded read-ahead keeps memory flat
                yield await pending.popleft()
        while pending:
            yield await pending.popleft()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def _collect_less() -> None:
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def check_chunk(catalog: _Catalog, chunk: _Chunk) -> _Checked:
    """Validate the lines of one chunk (pure: runs in a worker process as well)."""
    rows: list[_Row] = []
    errors: list[LineError] = []
    for number, line in enumerate(chunk.lines, start=chunk.first_line):
        if not line.strip():
            continue
        problems: list[Problem] = []
        row = _check_line(number, line, catalog, problems)
        if problems:
            errors.append(LineError(number, distinct(problems)))
        elif row is not None:
            rows.append(row)
    return _Checked(rows, errors, sum(len(line) for line in chunk.lines))


async def _load_catalog(session: AsyncSession, workspace_id: str, now: datetime) -> _Catalog:
    # Tags and templates are few (CLI-managed); one read each serves every line. Names are
    # checked per batch in `_flush`, against the database and the batch itself.
    tags = await session.scalars(select(Tag.id).where(Tag.workspace_id == workspace_id))
    templates = await session.execute(
        select(OfferTemplate.id, OfferTemplate.fields).where(OfferTemplate.workspace_id == workspace_id)
    )
    published = rules.Lookups(
        now=now,
        existing_tags=frozenset(tags.all()),
        templates={row.id: list(row.fields or []) for row in templates},
        check_time=False,
    )
    return _Catalog(workspace_id, now, published=published, draft=replace(published, draft=True))


def _check_line(number: int, line: bytes, catalog: _Catalog, problems: list[Problem]) -> _Row | None:
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        problems.append(Problem("INVALID_TYPE", "", f"Not valid JSON: {exc}."))
        return None
    if not isinstance(raw, dict):
        problems.append(Problem("INVALID_TYPE", "", "Each line is one JSON object."))
        return None
    status = raw.pop("status", STORED_PUBLISHED)
    if status not in STATUSES:
        problems.append(Problem("INVALID_ENUM_VALUE", "status", "status is published, draft or archived."))
        status = STORED_DRAFT  # check the rest leniently; the line fails anyway
    offer_id = _offer_id(raw.pop("id", None), problems)
    created_at = _created_at(raw.pop("created_at", None), catalog.now, problems)
    published = status == STORED_PUBLISHED
    parsed = parsing.parse(raw, OfferCreate if published else OfferFields)
    lookups = catalog.published if published else catalog.draft
    problems += parsed.problems + rules.check(parsed.values, everything(parsed.valid), lookups, parsed.failed)
    if problems:
        return None
    values = documents.row_values(parsed.valid)
    offer = {
        "workspace_id": catalog.workspace_id,
        "id": offer_id or object_id(created_at),
        "name": values.name,
        "stored_status": status,
        "priority": values.priority,
        "start_datetime": values.start_datetime,
        "expiry_datetime": values.expiry_datetime,
        "tags": values.tags,
        "document": values.document,
        "created_at": created_at,
        "created_by": values.created_by,
        "updated_at": catalog.now,
        "updated_by": None,
    }
    return _Row(number, offer, values.tags, None if status == STORED_ARCHIVED else values.name)


def _offer_id(value: Any, problems: list[Problem]) -> str | None:
    if value is None:
        return None
    raw_id = parse_offer_id(value) if isinstance(value, str) else None
    if raw_id is None:
        problems.append(Problem("INVALID_TYPE", "id", "id is offer_ followed by 24 hex digits."))
    return raw_id


def _created_at(value: Any, now: datetime, problems: list[Problem]) -> datetime:
    if value is None:
        return now
    parsed = parse_zulu(value) if isinstance(value, str) else None
    if parsed is None:
        problems.append(Problem("INVALID_TYPE", "created_at", "created_at is like 2026-01-15T12:00:00Z."))
        return now
    if not holds_instant(parsed):
        problems.append(Problem("OUT_OF_RANGE", "created_at", f"created_at is {INSTANT_RANGE}."))
        return now
    return parsed


async def _flush(session: AsyncSession, workspace_id: str, batch: list[_Row], result: ImportResult) -> None:
    """Drop rows whose name or id is taken (by the workspace, an earlier batch or this one), then
    insert the rest. Earlier batches are already in the transaction, so one query per batch sees them."""
    names = [row.live_name for row in batch if row.live_name is not None]
    taken_names = set(await repository.live_names(session, workspace_id, names))
    ids = [str(row.offer["id"]) for row in batch]
    taken_ids = set(await _existing_ids(session, workspace_id, ids))
    keep: list[_Row] = []
    for row in batch:
        problems = []
        if row.live_name is not None:
            if row.live_name in taken_names:
                problems.append(
                    Problem(
                        "DUPLICATE_OFFER_NAME", "name", f"An offer named '{row.live_name}' already exists."
                    )
                )
            taken_names.add(row.live_name)
        if row.offer["id"] in taken_ids:
            problems.append(Problem("DUPLICATE_OFFER_ID", "id", "Another offering already has this id."))
        taken_ids.add(str(row.offer["id"]))
        if problems:
            result.errors.append(LineError(row.line, problems))
        else:
            keep.append(row)
    if not keep:
        return
    connection = await session.connection()
    await connection.execute(insert(Offer), [row.offer for row in keep])
    links = [
        {"workspace_id": workspace_id, "tag_id": tag, "offer_id": row.offer["id"]}
        for row in keep
        for tag in row.tags
    ]
    if links:
        await connection.execute(insert(OfferTag), links)
    result.imported += len(keep)


async def _existing_ids(session: AsyncSession, workspace_id: str, ids: list[str]) -> list[str]:
    query = select(Offer.id).where(Offer.workspace_id == workspace_id, Offer.id.in_(set(ids)))
    return list((await session.scalars(query)).all())
