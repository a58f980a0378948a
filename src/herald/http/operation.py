"""The one dependency every API route starts with: who is calling, may they, how often, which key.

Order matters and is fixed here: authenticate (401/403) → a malformed request id, query string or Idempotency-Key
(400, every fault in one answer) → rate limit (429, nothing consumed on refusal) → claim the Idempotency-Key (replay / 409). Routes declare it as `Annotated[Caller, guarded(OP)]`.

A writing request does all of this in its own transaction, the one that then holds its effect and its
idempotency record: one transaction per request, and a claim that cannot outlive its request.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, NoReturn, TypeVar

import orjson
from fastapi import Depends
from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response

from herald import direct_reads
from herald.direct_writes import Transaction
from herald.errors import HeraldError, RateLimited, ValidationFailed
from herald.http import idempotency
from herald.http.auth import Caller, GatewayRefusal, authenticate, forbidden
from herald.http.context import UnitOfWork
from herald.http.guards import parse_uuid4, query_problems
from herald.http.limits import Consumer, limit_key, windows_for
from herald.http.query_model import QueryReader
from herald.http.ratelimit import Decision, Window
from herald.http.request_body import json_body
from herald.joined_writes import FirstWrite, Joined
from herald.problems import Problem
from herald.pydantic_errors import problems_from_request
from herald.services import Services
from herald.workspaces.scopes import Scope

# "body_request_id": the JSON body's `request_id` is the key (the earlier API's de-duplication, L1).
IdempotencyMode = Literal["required", "optional", "none", "body_request_id"]
IDEMPOTENCY_HEADER = "Idempotency-Key"
T = TypeVar("T")
# What a handler finds wrong with a request by itself (its body, the scope it asks for).
Refusal = HeraldError | GatewayRefusal
REQUIRED_MARK = "Required."


@dataclass(frozen=True)
class Operation:
    """A route's access rules: scope, rate-limit bucket, surface and idempotency."""

    name: str
    scope: Scope
    bucket: str
    campaigns: bool = False  # campaign surfaces also need the app-key header
    idempotency: IdempotencyMode = "none"
    # False when the handler works through sessions of its own (test sends commit each send as it
    # goes; previews read while rendering): the request's transaction then holds nothing but the
    # idempotency record and is opened only to write it. Opened earlier, it would hold SQLite's one
    # write lock through every send and render (and the sends' own writes would wait for it forever).
    request_transaction: bool = True
    # True when each statement the read sends stands alone (O1: its page and total count are one
    # statement): on PostgreSQL it then runs without a transaction around it.
    single_statement: bool = False
    # True when the handler's first statement is a read of the row it writes (`ClaimRead`): on
    # PostgreSQL the Idempotency-Key's claim then goes in that statement (one round trip fewer).
    # Nothing the handler does before that read may answer, but for a malformed request (400).
    claim_with_read: bool = False
    # True when the handler works through sessions of its own (`request_transaction` False) and its
    # work writes in transactions of its own (`WrittenClaim`): the Idempotency-Key's claim is then
    # inserted with its first write and completed with its last, two transactions fewer.
    claim_with_write: bool = False
    # True when the handler's effect is one write that can take the Idempotency-Key's claim
    # (`ClaimedCreate`): the claim is made just before that write, once the body is parsed and
    # validated (on SQLite the write lock is not held through that work), and on PostgreSQL the
    # claim, the write and the answer's record go in one statement committed by itself, instead
    # of BEGIN, the claim, the write and COMMIT. What the handler refuses before answers after the
    # claim, as it would had the guard claimed.
    claim_with_create: bool = False
    # The success quota (a bucket) the handler also takes once the request passed its checks
    # (`reserve_quota`): a refusal by either bucket says how long until the request passes both.
    quota: str | None = None
    # The body's own faults, read as the handler reads it (raising its ValidationFailed), for a
    # request refused for its head (a missing Idempotency-Key, a malformed request id): contract
    # §3 answers every violation in one response, not the head's alone and the body's after they
    # are fixed. It reads the body and the caller only: nothing is claimed, counted or written.
    body_check: Callable[[Caller, Any], object] | None = None
    # The same, for a body judged against the stored campaign the path names (C3 and L1 read the
    # components as its channel's, L1 merged over it): given a session of its own, the caller, the
    # path's campaign id and the body. It reads only; it is used instead of `body_check`.
    stored_body_check: Callable[[AsyncSession, Caller, str, Any], Awaitable[object]] | None = None
    # The route's query model (as `query_model` reads it), for the same reason: a request refused
    # for a control character in one parameter names the other parameters' faults too.
    query: QueryReader | None = None
    # True when the route takes no query parameter: one sent is refused (UNKNOWN_FIELD, as C2 and
    # the stats route refuse a parameter they do not know) with the head's faults. C3 and C5 act on
    # the latest version: `?version_number=1` was ignored, and the latest version changed.
    no_query: bool = False


def services_of(request: Request) -> Services:
    services: Services = request.app.state.herald
    return services


def unit_of_work(request: Request) -> UnitOfWork:
    uow: UnitOfWork = request.state.uow
    return uow


def _body_request_id_key(request: Request) -> str | None:
    """A key derived from the body's `request_id` (hashed: any string, kept apart from UUID keys)."""
    raw: bytes = getattr(request.state, "body", b"") or b""
    try:
        body = orjson.loads(raw) if raw.strip() else None
    except orjson.JSONDecodeError:
        return None  # the route reports the body
    value = body.get("request_id") if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        return None  # the route reports the missing request_id
    return hashlib.sha256(f"request_id\0{value}".encode()).hexdigest()


def _idempotency_key(request: Request, mode: IdempotencyMode) -> tuple[str | None, list[Problem]]:
    """The request's idempotency key for `mode` (None: it takes or has none), or what is wrong
    with its header."""
    if mode == "none":
        return None, []
    if mode == "body_request_id":
        return _body_request_id_key(request), []
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        if mode == "required":
            return None, [
                Problem(
                    "MISSING_IDEMPOTENCY_KEY", IDEMPOTENCY_HEADER, "The Idempotency-Key header is required."
                )
            ]
        return None, []
    key = parse_uuid4(value)
    if key is None:
        return None, [
            Problem("INVALID_IDEMPOTENCY_KEY", IDEMPOTENCY_HEADER, "The Idempotency-Key must be a UUID v4.")
        ]
    return key, []


async def check_access(request: Request, operation: Operation) -> Caller:
    services = services_of(request)
    uow = unit_of_work(request)
    app_key_header = services.settings.app_key_header if operation.campaigns else None
    in_request_transaction = operation.request_transaction or not uow.for_write
    uow.single_statement = operation.single_statement
    if in_request_transaction:
        caller = await authenticate(
            request, services.credentials, uow.session, operation.scope, app_key_header
        )
    else:
        # A session of its own, made only on a credentials-cache miss (most requests make none).
        opened: list[AsyncSession] = []

        def session() -> AsyncSession:
            if not opened:
                opened.append(services.database.reader())
            return opened[0]

        try:
            caller = await authenticate(
                request, services.credentials, session, operation.scope, app_key_header
            )
        finally:
            if opened:
                await opened[0].close()
    request.state.workspace_id = caller.workspace_id  # for the request's log line

    # A malformed request: every fault of its headers and query string in one answer (contract
    # §3), before the rate limit (nothing consumed) and before anything is claimed.
    problems: list[Problem] = []
    if request.state.request_id_invalid:
        problems.append(Problem("INVALID_TYPE", services.settings.request_id_header, "Not a UUID v4."))
    # Every route's query string, before any handler or query model reads it: a NUL would reach
    # the database (PostgreSQL refuses it), a non-UTF-8 escape would be read as U+FFFD.
    problems += query_problems(request.scope.get("query_string", b""))
    if operation.no_query:
        named = {problem.target for problem in problems}
        problems += [problem for problem in _unknown_parameters(request) if problem.target not in named]
    key, key_problems = _idempotency_key(request, operation.idempotency)
    problems += key_problems
    if problems:
        raise ValidationFailed(
            [
                *problems,
                *_query_faults(request, operation, problems),
                *(
                    await _body_faults(
                        request, operation, caller, uow.session() if in_request_transaction else None
                    )
                ),
            ]
        )

    now = services.clock.now()
    uow.rate_limit, _, _ = await _take_slot(
        request, caller, operation.bucket, operation.name, also_needs=operation.quota
    )
    if key is not None:
        await _claim(request, operation, caller, key, in_request_transaction, now)
    return caller


def _unknown_parameters(request: Request) -> list[Problem]:
    names = dict.fromkeys(name for name, _ in request.query_params.multi_items())
    return [
        Problem("UNKNOWN_FIELD", name, f"'{name}' is not a parameter of this operation.") for name in names
    ]


def _query_faults(request: Request, operation: Operation, head: list[Problem]) -> list[Problem]:
    """What `operation.query` finds wrong with the query string, but for the parameters the head's
    problems already name (a parameter that is no UTF-8 reaches the model as replacement
    characters: its fault is that, not what the model makes of them)."""
    if operation.query is None:
        return []
    named = {problem.target for problem in head}
    found = problems_from_request(operation.query.errors(request.query_params), None)
    return [problem for problem in found if problem.target not in named]


async def _body_faults(
    request: Request, operation: Operation, caller: Caller, held: AsyncSession | None
) -> list[Problem]:
    """What `operation.stored_body_check` or `body_check` finds wrong with the body; nothing when
    the body is not JSON (the handler's BAD_REQUEST, answered once the head is right) or has no
    check. The stored campaign is read on `held`, the request's session when it holds a connection
    already: a second session from the same pool (PostgreSQL) made each refusal wait for another
    connection, and refusals as many as the pool has waited on each other until its timeout."""
    stored_check, campaign_id = operation.stored_body_check, request.path_params.get("campaign_id")
    try:
        if stored_check is not None and isinstance(campaign_id, str):
            body = json_body(request)
            if held is not None:
                await stored_check(held, caller, campaign_id, body)
            else:
                async with services_of(request).database.reader() as session:
                    await stored_check(session, caller, campaign_id, body)
        elif operation.body_check is not None:
            operation.body_check(caller, json_body(request))
    except ValidationFailed as refused:
        return refused.details
    except HeraldError:
        return []
    return []


async def _claim(
    request: Request,
    operation: Operation,
    caller: Caller,
    key: str,
    in_request_transaction: bool,
    now: datetime,
) -> None:
    """Claim the request's idempotency `key` (replay / 409 otherwise)."""
    services = services_of(request)
    uow = unit_of_work(request)
    claim = idempotency.Claim(
        workspace_id=caller.workspace_id,
        api_key_id=caller.api_key.id,
        key=key,
        fingerprint=idempotency.fingerprint(
            request.method, _url_path(request), getattr(request.state, "body", b"") or b""
        ),
        in_request_transaction=in_request_transaction,
        named_by="request_id" if operation.idempotency == "body_request_id" else "Idempotency-Key",
        lease_now=services.lease_clock.now(),
    )
    if in_request_transaction and operation.claim_with_read:
        uow.pending_claim = claim  # taken by the handler's first read (`ClaimRead`)
        return
    if in_request_transaction and operation.claim_with_create:
        uow.pending_claim = claim  # taken by the handler's one write (`ClaimedCreate`)
        return
    if not in_request_transaction and operation.claim_with_write:
        uow.pending_claim = claim  # taken by the handler's first write (`WrittenClaim`)
        return
    if in_request_transaction:
        await idempotency.claim_in(uow.session(), claim, now)
    else:
        await idempotency.claim(services.database.writer, claim, now)
    uow.idempotency = claim


def _url_path(request: Request) -> str:
    """`request.url.path` (what stored fingerprints were made of) without building the whole URL:
    the path as Starlette escapes it there."""
    path: str = request.scope["path"]
    if "?" in path or "#" in path or "\\" in path or path.startswith("//"):
        return request.url.path
    return path


def recorded_with(request: Request, response: Response) -> Joined | None:
    """For a handler that knows its answer before its last write: the idempotency record of
    `response` as an insert to run with that write (`idempotency.written_with`), or None when the
    request has no claim in its own transaction. The commit then records nothing more: the answer
    must be the one sent, a success (anything that fails after it rolls the record back with the
    rest of the transaction)."""
    uow = unit_of_work(request)
    claim = uow.idempotency
    if claim is None or not claim.in_request_transaction:
        return None
    uow.recorded = True
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in response.raw_headers}
    now = services_of(request).clock.now()
    return idempotency.written_with(claim, response.status_code, headers, bytes(response.body), now)


class AnswerFirst(Generic[T]):
    """A handler's answer made before its last write, so that the write carries the answer's
    idempotency record (`recorded_with`): the service calls the instance with what the answer
    shows, just before that write, and the handler sends `response` afterwards."""

    def __init__(self, request: Request, make: Callable[[T], Response]) -> None:
        self._request = request
        self._make = make
        self._response: Response | None = None

    def __call__(self, shown: T) -> Joined | None:
        self._response = self._make(shown)
        return recorded_with(self._request, self._response)

    @property
    def made(self) -> bool:
        """Whether the service made the answer (a path that writes otherwise may not)."""
        return self._response is not None

    @property
    def response(self) -> Response:
        if self._response is None:
            raise RuntimeError("the service wrote without making its answer first")
        return self._response


class ClaimedCreate:
    """The Idempotency-Key claim the guard left to the handler's one write
    (`Operation.claim_with_create`; a `joined_writes.ClaimedStatement`), or None
    (`of`). From then on the claim is the request's (`UnitOfWork.idempotency`), so that the
    answer made before the write carries its record (`recorded_with`); until the write took it or
    `apart` claimed it, nothing the handler answers may be sent: `answering` claims it first."""

    def __init__(self, request: Request, claim: idempotency.Claim) -> None:
        self._request = request
        self._claim: idempotency.Claim | None = claim
        self.parameters = idempotency.claim_parameters(claim)
        self.one_statement = services_of(request).database.engine.dialect.name == "postgresql"
        unit_of_work(request).idempotency = claim

    @classmethod
    def of(cls, request: Request) -> ClaimedCreate | None:
        uow = unit_of_work(request)
        claim, uow.pending_claim = uow.pending_claim, None
        return None if claim is None else cls(request, claim)

    @property
    def by_itself(self) -> bool:
        """Whether the write can go by itself now: on SQLite, only while the request's own
        transaction has not begun (once it has, e.g. with its authentication's read, it holds the
        one write lock, and the write goes in it)."""
        if self.one_statement:
            return True
        uow = unit_of_work(self._request)
        return not (uow.has_session and uow.session().in_transaction())

    # The same objects for every request: what is built of them is built once.
    claim = idempotency.CLAIMED
    lookup = idempotency.RECORD_OF_KEY
    record_after = staticmethod(idempotency.record_after)

    async def rows(self, statement: Select[Any], values: dict[str, Any]) -> Sequence[Sequence[Any]]:
        return await services_of(self._request).database.direct.rows(statement, values)

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        return services_of(self._request).database.writes.transaction()

    def written(self) -> None:
        self._claim = None

    async def apart(self, session: AsyncSession) -> None:
        """Claim the key in the request's transaction, as the guard would have: a replay or a 409
        gives back what the route reserved for the request (its success-quota slot)."""
        claim, self._claim = self._claim, None
        if claim is None:
            return
        uow = unit_of_work(self._request)
        uow.idempotency = None  # a refusal of the key records nothing
        try:
            await idempotency.claim_in(session, claim, services_of(self._request).clock.now())
        except BaseException:
            await uow.run_failure_callbacks()
            raise
        uow.idempotency = claim

    @contextlib.asynccontextmanager
    async def answering(self) -> AsyncIterator[None]:
        """Around the handler's work: what it refuses before its write took the claim answers
        after the key is claimed (the key's replay or 409 answers first, as with the guard's)."""
        try:
            yield
        except (HeraldError, GatewayRefusal):
            await self.apart(unit_of_work(self._request).session())
            raise


class WrittenClaim(Generic[T]):
    """The Idempotency-Key claim of a handler whose work commits in transactions of its own
    (`Operation.claim_with_write`; a `joined_writes.ClaimedWrites`): its record in flight goes with
    the work's first write and its answer with the last, so that the key is claimed exactly when
    the work's first effect is committed, and completed with its last. Whatever the handler
    answers without having written (a refusal, or nothing to write) claims the key first, in a
    transaction of its own (`apart`), as the guard would have: a replay or a 409 answers first."""

    def __init__(self, request: Request, make: Callable[[T], Response]) -> None:
        self._request = request
        self._make = make
        self._response: Response | None = None

    def first(self) -> FirstWrite | None:
        uow = unit_of_work(self._request)
        claim = uow.pending_claim
        if claim is None:
            return None

        def written() -> None:  # the key is this request's from the commit on
            uow.pending_claim, uow.idempotency = None, claim

        now = services_of(self._request).clock.now()
        return FirstWrite(idempotency.claimed_with(claim, now), written, self.apart)

    async def apart(self) -> None:
        uow = unit_of_work(self._request)
        claim = uow.pending_claim
        if claim is None:
            return
        uow.pending_claim = None
        services = services_of(self._request)
        await idempotency.claim(services.database.writer, claim, services.clock.now())
        uow.idempotency = claim

    def last(self, shown: T) -> Joined | None:
        self._response = self._make(shown)
        uow = unit_of_work(self._request)
        claim = uow.idempotency
        if claim is None or claim.in_request_transaction:
            return None
        uow.recorded = True
        response = self._response
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in response.raw_headers}
        return idempotency.completed_with(claim, response.status_code, headers, bytes(response.body))

    def answer(self, shown: T) -> Response:
        """The response made by `last`, else (the work wrote nothing) made now."""
        return self._response if self._response is not None else self._make(shown)


class ClaimRead:
    """The handler's first read, carrying the Idempotency-Key claim its operation left to it
    (`Operation.claim_with_read`; a `joined_writes.ClaimedRead`): the claim answers first (replay /
    409), then `refused` (what the handler found wrong with the request before reading: it answers
    after the claim, as it would had the guard claimed), then the row read is returned. Without a
    pending claim it reads plainly; with no statement (`read` None) it only claims. A read of any
    number of rows (a page) is `rows`."""

    def __init__(self, request: Request, refused: Refusal | None = None) -> None:
        self._request = request
        self._refused = refused

    async def __call__(
        self, session: AsyncSession, read: Select[Any] | None, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        claim = self._pending()
        found: dict[str, Any] | None = None
        if claim is not None:
            found = await idempotency.claim_in_with_read(session, claim, self._now(), read, params)
            unit_of_work(self._request).idempotency = claim
        elif read is not None:
            row = (await (await session.connection()).execute(read, params)).first()
            found = None if row is None else dict(row._mapping)
        self._answer_refusal()
        return found

    async def rows(
        self,
        session: AsyncSession,
        read: Select[Any] | None,
        params: dict[str, Any],
        descending: tuple[str, ...] = (),
    ) -> Sequence[Any]:
        """As a call, for a select of any number of rows: its rows, ordered by the columns named in
        `descending` (`idempotency.claim_in_with_rows`); none without a statement."""
        claim = self._pending()
        found: Sequence[Any] = ()
        if claim is not None:
            now = self._now()
            if read is None:
                await idempotency.claim_in_with_read(session, claim, now, None, params)
            else:
                found = await idempotency.claim_in_with_rows(session, claim, now, read, params, descending)
            unit_of_work(self._request).idempotency = claim
        elif read is not None:
            found = await direct_reads.rows_in(await session.connection(), read, params)
        self._answer_refusal()
        return found

    def _pending(self) -> idempotency.Claim | None:
        """The claim left to this read, taken (it becomes the request's once it holds)."""
        uow = unit_of_work(self._request)
        claim, uow.pending_claim = uow.pending_claim, None
        return claim

    def _now(self) -> datetime:
        return services_of(self._request).clock.now()

    def _answer_refusal(self) -> None:
        if self._refused is not None:
            refused, self._refused = self._refused, None
            raise refused


def parsed_or_refused(request: Request, parse: Callable[[Request], T]) -> tuple[T | None, Refusal | None]:
    """What `parse` makes of the request, or the refusal it raised, kept for `ClaimRead` to answer
    after the claim."""
    try:
        return parse(request), None
    except (HeraldError, GatewayRefusal) as exc:
        return None, exc


def require_scope(caller: Caller, scope: Scope) -> None:
    """A stronger scope than the route's, needed by what this request asks (403 ER007 otherwise)."""
    if scope not in caller.api_key.scopes:
        raise forbidden(scope)


def documented_headers(operation: Operation) -> list[dict[str, Any]]:
    """The header parameters the guard reads, as OpenAPI parameter objects (`herald.http.openapi`
    adds them to the operation's document). They are read from the request by the guard itself:
    declared in the dependency's signature, the framework would parse each of them on every request.
    The default token's names are shown; the document is renamed for the deployment's token."""

    def header(name: str, description: str, *, required: bool = False) -> dict[str, Any]:
        text = f"{REQUIRED_MARK} {description}" if required else description
        return {
            "description": text,
            "in": "header",
            "name": name,
            "required": required,
            "schema": {"type": "string"},
        }

    headers = [header("X-SVC-Request-Id", "Optional UUID v4 trace id, echoed back.")]
    if operation.campaigns:
        headers.append(header("SVC-APPKEY", "The workspace id (equals the Basic username).", required=True))
    if operation.idempotency in ("required", "optional"):  # L1 de-duplicates on its body's request_id
        headers.append(
            header(
                IDEMPOTENCY_HEADER,
                "UUID v4; a repeat with the same body replays the stored response for 24 h.",
                required=operation.idempotency == "required",
            )
        )
    return headers


def guard_of(call: Any) -> Operation | None:
    """The operation a dependency guards (see `guarded`), or None."""
    operation = getattr(call, "operation", None)
    return operation if isinstance(operation, Operation) else None


def guarded(operation: Operation) -> Any:
    """`Depends(...)` marker for `Annotated[Caller, guarded(OPERATION)]`."""

    async def dependency(request: Request) -> Caller:
        return await check_access(request, operation)

    dependency.__name__ = f"guard_{operation.name}"
    dependency.operation = operation  # type: ignore[attr-defined]
    return Depends(dependency)


async def reserve_quota(request: Request, caller: Caller, operation: Operation) -> None:
    """Take a slot of a success quota now (or 429); it is given back if the request ends in failure.

    Reserving (rather than counting after the fact) keeps the quota exact under concurrency; the
    route reserves once the request has passed its checks, so a request that fails them never
    holds a slot another one would have had.
    """
    assert operation.quota is not None  # only an operation with a success quota reserves one
    services = services_of(request)
    decision, key, windows = await _take_slot(
        request, caller, operation.quota, operation.name, also_needs=operation.bucket
    )
    unit_of_work(request).quota = decision
    token = decision.token
    assert token is not None  # every admitted entry has one

    async def give_back() -> None:
        await services.limiter.release(key, windows, token)

    unit_of_work(request).on_failure.append(give_back)


async def _take_slot(
    request: Request, caller: Caller, bucket: str, operation: str, *, also_needs: str | None = None
) -> tuple[Decision, str, tuple[Window, ...]]:
    """One slot in every window of `bucket` for this caller, or 429 (the refusal's figures become the
    response's X-RateLimit headers) having taken none. `also_needs`: another bucket the request
    takes a slot of too, whose full windows the refusal's Retry-After also waits for."""
    services = services_of(request)
    consumer = Consumer(caller.workspace, caller.api_key.id)
    key = limit_key(bucket, operation, consumer)
    windows = windows_for(caller.workspace, bucket)
    now = services.clock.now().timestamp()
    decision = await services.limiter.acquire(key, windows, now)
    if not decision.allowed:
        wait = decision.retry_after
        if also_needs is not None:
            other = limit_key(also_needs, operation, consumer)
            wait = max(
                wait, await services.limiter.wait(other, windows_for(caller.workspace, also_needs), now)
            )
        _refuse(request, bucket, decision, wait)
    return decision, key, windows


def _refuse(request: Request, bucket: str, decision: Decision, retry_after: int) -> NoReturn:
    """429: the refusal's figures become the response's X-RateLimit headers; `Retry-After` is when
    the same request passes every window it needs (README)."""
    unit_of_work(request).rate_limit = decision
    request.state.rate_limited_bucket = bucket  # for the refusals metric
    raise RateLimited(headers={"Retry-After": str(max(1, retry_after))})
