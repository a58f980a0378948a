"""Bad input on every operation: a clear 4xx in the error envelope (or the gateway's 503), nothing written.

Issue 6's battery. The generated part is built from the OpenAPI route table when the module is
collected: every operation with a request body gets every malformed body (oversize, deep, wrong
content type, invalid UTF-8, NUL, non-finite numbers, truncated), every operation gets control
characters in a header, and every integer query parameter gets numbers out of range. A route the
battery cannot address fails `test_every_operation_is_in_the_battery`, so a new route cannot be
forgotten. The named part covers the contract's sized things: 11 test recipients, 10,000 filters,
9,999,999,999 + 1 and numbers past what a database column holds.

Every request carries valid credentials of a workspace with every scope, an Idempotency-Key and the
ids of real objects, so only the bad part stands between it and the handler. Afterwards every table
holds as many rows as before, the workspace's rows are unchanged and the Idempotency-Key is not kept.
One app and one workspace serve the whole module (see the fixtures).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI
from fastapi.routing import APIRoute
from sqlalchemy import func, literal, select, union_all

import herald.models  # noqa: F401  (every table in the metadata)
from herald.campaigns.schemas.audience_limit import AUDIENCE_LIMIT_MAX
from herald.campaigns.schemas.filters import MAX_FILTERS
from herald.clock import FrozenClock
from herald.config import Settings
from herald.db import INTEGER_MAX, Base
from herald.http.idempotency import IdempotencyRecord
from herald.http.ratelimit import make_store
from herald.main import create_app
from herald.workspaces.scopes import Scope
from tests.delivery.builders import inline_push, meta
from tests.factories import Tenant, add_key, make_tenant
from tests.offers.builders import flat_body
from tests.personalization.helpers import add_resources, add_user, email_body
from tests.snapshots import workspace_rows

MIB = 1024 * 1024
REQUEST_ID_HEADER = "X-SVC-Request-Id"
OPEN_LIMITS = dict.fromkeys(
    ("offers_read", "offers_write", "campaign_create", "campaign_ops", "preview", "ingest"), "1000000/second"
) | {"campaign_create_success": "1000000/minute"}
FEATURES = {
    "campaign_audience_limit": True,
    "queuing": True,
    "versioning": True,
    "campaign_meta": True,
}
CAMPAIGN = {"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "owner@example.com"}
# Routes outside the OpenAPI document on purpose (the process probes); any other hidden route fails.
# Probes, and the documentation itself (the document, its viewers, the error catalog): no input;
# the viewers' assets take a name from a fixed list (tests/ops/test_served.py).
UNDOCUMENTED = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/redoc"),
    ("GET", "/docs/assets/{name}"),
    ("GET", "/errors"),
}


# ---- the route table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiOperation:
    method: str
    path: str
    has_body: bool
    integer_queries: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


def _is_integer(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "integer" or any(_is_integer(part) for part in schema.get("anyOf", []))


def operations_of(schema: dict[str, Any]) -> list[ApiOperation]:
    """Every operation of an OpenAPI document, with what the battery needs to know about it."""
    found = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            parameters = operation.get("parameters", [])
            integers = tuple(
                p["name"] for p in parameters if p["in"] == "query" and _is_integer(p.get("schema", {}))
            )
            found.append(ApiOperation(method.upper(), path, "requestBody" in operation, integers))
    return sorted(found, key=lambda operation: operation.label)


def _collected_schema() -> dict[str, Any]:
    # An app with throwaway settings, only to read its route table (no database is opened).
    settings = Settings(
        database_url="sqlite+aiosqlite://",
        redis_url=None,
        secret_key=Fernet.generate_key().decode(),
    )
    return create_app(settings).openapi()


OPERATIONS = operations_of(_collected_schema())
BODY_OPERATIONS = [operation for operation in OPERATIONS if operation.has_body]
INTEGER_QUERIES = [(operation, name) for operation in OPERATIONS for name in operation.integer_queries]


# ---- a workspace with an object behind every path parameter --------------------------------------


@dataclass(frozen=True)
class World:
    app: FastAPI
    tenant: Tenant
    campaign_id: str
    offer_id: str

    def path_ids(self) -> dict[str, str]:
        """A real id for every path parameter of the API (a parameter missing here fails the suite)."""
        return {
            "campaign_id": self.campaign_id,
            "offer_id": self.offer_id,
            "workspace_id": self.tenant.workspace_id,
        }

    def url(self, operation: ApiOperation) -> str:
        return operation.path.format(**self.path_ids())

    def headers(self, idempotency_key: str, request_id: str) -> dict[str, str]:
        return {
            **self.tenant.headers(campaigns=True, idempotency_key=idempotency_key),
            REQUEST_ID_HEADER: request_id,
        }


# As nothing is written, one app and one workspace serve the whole module: these override the
# per-test fixtures of tests/conftest.py (a world per case would cost most of the run).


@pytest.fixture(scope="module")
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture(scope="module")
async def app(database_url: str, clock: FrozenClock) -> AsyncIterator[FastAPI]:
    settings = Settings(
        database_url=database_url,
        redis_url=None,
        base_url="http://testserver",
        secret_key=Fernet.generate_key().decode(),
    )
    limiter = make_store(os.environ.get("HERALD_TEST_REDIS_URL"), prefix=f"herald:test:{uuid.uuid4().hex}:")
    application = create_app(settings, clock=clock, limiter=limiter)
    yield application
    await limiter.aclose()
    await application.state.herald.aclose()


@pytest.fixture(scope="module")
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


@pytest.fixture(scope="module")
async def world(app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock) -> World:
    tenant = await make_tenant(app, features=FEATURES, rate_limits=OPEN_LIMITS)
    campaign = await client.post("/v5/campaigns", json=CAMPAIGN, headers=tenant.write_headers(campaigns=True))
    assert campaign.status_code == 201, campaign.text
    offer = await client.post("/v5/offers", json=flat_body(clock.now()), headers=tenant.write_headers())
    assert offer.status_code == 201, offer.text
    await add_user(app, tenant, "ana-1", first_name="Ana")  # for previews
    await add_resources(app, tenant, templates={"welcome": ("EMAIL", {"html_content": "Hi"})})
    return World(app, tenant, campaign.json()["data"]["id"], offer.json()["data"]["id"])


# ---- what every answer must be ------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    counts: dict[str, int]  # rows of every table
    rows: dict[str, list[tuple[Any, ...]]]  # every row of the workspace, per table


async def snapshot(world: World) -> Snapshot:
    tables = Base.metadata.sorted_tables
    counts = union_all(*(select(literal(table.name), func.count()).select_from(table) for table in tables))
    async with world.app.state.herald.database.reader() as session:
        counted = dict((await session.execute(counts)).tuples().all())
    return Snapshot(counted, await workspace_rows(world.app, world.tenant.workspace_id))


async def assert_nothing_written(world: World, before: Snapshot, idempotency_key: str) -> None:
    after = await snapshot(world)
    assert after.counts == before.counts
    changed = [name for name in before.rows if before.rows[name] != after.rows[name]]
    assert not changed, f"rows of the workspace changed in {changed}"
    async with world.app.state.herald.database.reader() as session:
        kept = await session.scalars(
            select(IdempotencyRecord).where(IdempotencyRecord.key == idempotency_key)
        )
        assert kept.first() is None


def assert_envelope(
    response: httpx.Response,
    status: int,
    code: str,
    request_id: str,
    detail: tuple[str, str] | None = None,
) -> None:
    """The contract's error envelope (§3); `detail` is a (code, dot path) it must name."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers[REQUEST_ID_HEADER] == request_id
    body = response.json()
    assert set(body) == {"response_id", "error"}
    assert body["response_id"] == f"resp_{request_id}"
    error = body["error"]
    assert set(error) - {"target"} == {"code", "message", "doc_url", "details", "request_id"}
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["doc_url"] == f"http://testserver/errors#{code}"
    assert isinstance(error["request_id"], str)
    if detail is not None:
        # The top-level target is the one detail's; a refused head may come with its body's faults.
        if len(error["details"]) == 1:
            assert error["target"] == detail[1]
        assert detail in {(item["code"], item["target"]) for item in error["details"]}


# ---- malformed bodies, on every operation that takes one -----------------------------------------


@dataclass(frozen=True)
class BadBody:
    content: bytes
    content_type: str | None = "application/json"
    status: int = 400
    code: str = "BAD_REQUEST"
    streamed: bool = False  # sent in chunks without Content-Length


_DEPTH = 32  # contract §3: JSON nested deeper than 32 levels is refused

BAD_BODIES = {
    "oversize": BadBody(b'{"name": "' + b"x" * MIB + b'"}', status=413, code="PAYLOAD_TOO_LARGE"),
    "oversize-streamed": BadBody(
        b'{"name": "' + b"x" * MIB + b'"}', status=413, code="PAYLOAD_TOO_LARGE", streamed=True
    ),
    "nested-33-deep": BadBody(b'{"a": ' + b"[" * _DEPTH + b"1" + b"]" * _DEPTH + b"}"),
    "text-plain": BadBody(b'{"name": "x"}', content_type="text/plain"),
    "form": BadBody(b"name=x&priority=1", content_type="application/x-www-form-urlencoded"),
    "multipart": BadBody(
        b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--b--\r\n',
        content_type="multipart/form-data; boundary=b",
    ),
    "no-content-type": BadBody(b'{"name": "x"}', content_type=None),
    # JSON text is UTF-8 (RFC 8259 §8.1): a body declared in another charset is not read as if it were.
    "charset-utf-16": BadBody(b'{"name": "x"}', content_type="application/json; charset=utf-16"),
    "charset-latin-1": BadBody(b'{"name": "x"}', content_type='application/json; charset="ISO-8859-1"'),
    "invalid-utf8": BadBody(b'{"name": "\xff\xfe"}'),
    "utf8-encoded-surrogate": BadBody(b'{"name": "\xed\xa0\x80"}'),
    "lone-surrogate-escape": BadBody(b'{"name": "ab\\ud800"}'),
    "nul-escape": BadBody(b'{"name": "a\\u0000b"}'),
    "nul-byte": BadBody(b'{"name": "a\x00b"}'),
    "nan": BadBody(b'{"name": "x", "priority": NaN}'),
    "infinity": BadBody(b'{"name": "x", "priority": Infinity}'),
    "minus-infinity": BadBody(b'{"name": "x", "priority": -Infinity}'),
    "truncated": BadBody(b'{"name": "Winter_Sale", "priority": '),
    # Valid JSON, but a number of more digits than Python reads into an int (4,300).
    "integer-of-5000-digits": BadBody(b'{"name": "x", "priority": ' + b"9" * 5000 + b"}"),
    # Not UTF-8 JSON text, though Python's reader takes them (it detects the encoding).
    "utf16-le": BadBody('{"name": "x"}'.encode("utf-16-le")),
    "utf32-be": BadBody('{"name": "x"}'.encode("utf-32-be")),
    "utf8-bom": BadBody(b'\xef\xbb\xbf{"name": "x"}'),
    # Valid JSON numbers a double cannot hold: read as infinity, stored as null (an attribute unset).
    "number-1e400": BadBody(b'{"name": "x", "priority": 1e400}'),
    "number-minus-1e999": BadBody(b'{"name": "x", "attributes": {"k": -1e999}}'),
    "number-of-400-digits-with-a-fraction": BadBody(b'{"name": "x", "priority": ' + b"9" * 400 + b".5}"),
    # A whole number is read as the double it equals: there is none for this one.
    "integer-of-400-digits": BadBody(b'{"name": "x", "attributes": {"k": 1' + b"0" * 400 + b"}}"),
}


async def _chunks(content: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(content), size):
        yield content[start : start + size]


# What the credentials decide comes before anything about the body (contract §2: 401/403 on
# every surface): a caller without them learns nothing of what is wrong with what it sent.
UNSEEN_BODIES = ("truncated", "text-plain", "invalid-utf8", "nested-33-deep", "integer-of-5000-digits")


@pytest.mark.parametrize("case", UNSEEN_BODIES)
@pytest.mark.parametrize("operation", BODY_OPERATIONS, ids=lambda operation: operation.label)
@pytest.mark.parametrize("caller", ["bad-secret", "no-scope"])
async def test_credentials_are_judged_before_the_body(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, case: str, caller: str
) -> None:
    bad = BAD_BODIES[case]
    if caller == "no-scope":
        tenant = await add_key(world.app, world.tenant, [Scope.OFFERS_READ])  # no body route needs only it
    else:
        tenant = dataclasses.replace(world.tenant, secret="wrong")
    headers = tenant.headers(campaigns=True, idempotency_key=str(uuid.uuid4()))
    if bad.content_type is not None:
        headers["Content-Type"] = bad.content_type
    response = await client.request(
        operation.method, world.url(operation), content=bad.content, headers=headers
    )
    expected = (401, "ER001") if caller == "bad-secret" else (403, "ER007")
    assert (response.status_code, response.json()["code"]) == expected, response.text


@pytest.mark.parametrize("case", list(BAD_BODIES))
@pytest.mark.parametrize("operation", BODY_OPERATIONS, ids=lambda operation: operation.label)
async def test_malformed_body_is_refused(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, case: str
) -> None:
    bad = BAD_BODIES[case]
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = world.headers(key, request_id)
    if bad.content_type is not None:
        headers["Content-Type"] = bad.content_type
    before = await snapshot(world)
    response = await client.request(
        operation.method,
        world.url(operation),
        content=_chunks(bad.content) if bad.streamed else bad.content,
        headers=headers,
    )
    assert_envelope(response, bad.status, bad.code, request_id)
    await assert_nothing_written(world, before, key)


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "*/*", "", "application/jsonx", "application/json; charset=utf-16"],
)
async def test_a_body_refused_for_its_media_type_names_the_content_type(
    client: httpx.AsyncClient, world: World, content_type: str
) -> None:
    [operation] = [operation for operation in BODY_OPERATIONS if operation.label == "POST /v5/offers"]
    headers = {**world.headers(str(uuid.uuid4()), str(uuid.uuid4())), "Content-Type": content_type}
    response = await client.request(
        operation.method, world.url(operation), content=b'{"name": "x"}', headers=headers
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "BAD_REQUEST"
    assert response.json()["error"]["target"] == "Content-Type"


async def test_a_body_declared_utf_8_is_read(client: httpx.AsyncClient, world: World) -> None:
    [operation] = [operation for operation in BODY_OPERATIONS if operation.label == "POST /v5/offers"]
    for content_type in ("application/json; charset=utf-8", 'application/json; charset="UTF-8"'):
        headers = {**world.headers(str(uuid.uuid4()), str(uuid.uuid4())), "Content-Type": content_type}
        response = await client.request(
            operation.method, world.url(operation), content=b"{}", headers=headers
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "VALIDATION_FAILED"  # the body was read


NUL_PLACES = {
    "top-level": (b'{"name": "a\\u0000b"}', "name"),
    "nested": (b'{"actions": [{"attributes": {"colour": "r\\u0000"}}]}', "actions.0.attributes.colour"),
    "in-a-key": (b'{"a": {"k\\u0000": 1}}', "a.k\\u0000"),
}


@pytest.mark.parametrize("case", list(NUL_PLACES))
async def test_a_nul_is_refused_where_it_is(client: httpx.AsyncClient, world: World, case: str) -> None:
    body, target = NUL_PLACES[case]
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {**world.headers(key, request_id), "Content-Type": "application/json"}
    response = await client.post("/v5/campaigns/search", content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["target"]) == ("BAD_REQUEST", target)


async def test_a_nul_spelled_out_after_an_escaped_backslash_is_text(
    client: httpx.AsyncClient, world: World
) -> None:
    # `\\u0000` in JSON is a backslash and then the text u0000: no NUL, nothing refused for it.
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {**world.headers(key, request_id), "Content-Type": "application/json"}
    body = b'{"limit": 15, "page": 1, "campaign_fields": {"name": "a\\\\u0000b"}}'
    response = await client.post("/v5/campaigns/search", content=body, headers=headers)
    assert response.status_code == 200, response.text


async def test_a_number_too_large_for_a_double_is_refused_where_it_is(
    client: httpx.AsyncClient, world: World
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {**world.headers(key, request_id), "Content-Type": "application/json"}
    body = b'{"limit": 15, "page": 1, "campaign_fields": {"name": "1e400", "version_number": 1e400}}'
    response = await client.post("/v5/campaigns/search", content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["target"]) == ("BAD_REQUEST", "campaign_fields.version_number")


@pytest.mark.parametrize(
    "number",
    [b"9223372036854775808", b"-9223372036854775809", b"18446744073709551616", b"1" + b"0" * 40, b"1e30"],
)
async def test_a_whole_number_past_64_bits_is_out_of_range_beside_the_other_problems(
    client: httpx.AsyncClient, world: World, number: bytes
) -> None:
    """JSON has one number type: a whole number no column holds is judged as the double it equals
    (as `1e30` is), with every other problem of the body, not refused alone as unreadable."""
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {**world.headers(key, request_id), "Content-Type": "application/json"}
    body = b'{"limit": 15, "page": 0, "campaign_fields": {"version_number": ' + number + b"}}"
    response = await client.post("/v5/campaigns/search", content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_FAILED", error
    assert {(detail["code"], detail["target"]) for detail in error["details"]} == {
        ("OUT_OF_RANGE", "campaign_fields.version_number"),
        ("OUT_OF_RANGE", "page"),
    }


@pytest.mark.parametrize("number", [b"9223372036854775807", b"-9223372036854775808"])
async def test_the_widest_64_bit_numbers_are_judged_by_the_field(
    client: httpx.AsyncClient, world: World, number: bytes
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {**world.headers(key, request_id), "Content-Type": "application/json"}
    body = b'{"limit": 15, "page": 1, "campaign_fields": {"version_number": ' + number + b"}}"
    response = await client.post("/v5/campaigns/search", content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "VALIDATION_FAILED"


_SEARCH = b'{"limit": 15, "page": 1, "a": '  # a valid search, but for the unknown field `a`


def _sized(size: int) -> bytes:
    """A search body of exactly `size` bytes (`a` holds a long string)."""
    return _SEARCH + b'"' + b"x" * (size - len(_SEARCH) - 3) + b'"}'


AT_THE_LIMITS = {
    "nested-32-deep": _SEARCH + b"[" * (_DEPTH - 1) + b"1" + b"]" * (_DEPTH - 1) + b"}",
    "exactly-1-mib": _sized(MIB),
}


@pytest.mark.parametrize("case", list(AT_THE_LIMITS))
async def test_body_at_the_limits_passes_the_gate(client: httpx.AsyncClient, world: World, case: str) -> None:
    # The handler, not the gateway, answers: the unknown field is reported at its path.
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {**world.headers(key, request_id), "Content-Type": "application/json"}
    before = await snapshot(world)
    body = AT_THE_LIMITS[case]
    assert len(body) <= MIB
    response = await client.post("/v5/campaigns/search", content=body, headers=headers)
    assert_envelope(response, 400, "VALIDATION_FAILED", request_id, ("UNKNOWN_FIELD", "a"))
    await assert_nothing_written(world, before, key)


# ---- control characters in headers, on every operation ------------------------------------------

BAD_HEADERS = {
    "extra-header-soh": ("X-Note", "a\x01b"),
    "authorization-del": ("Authorization", "Basic \x7f"),
    "idempotency-key-escape": ("Idempotency-Key", f"{uuid.UUID(int=4, version=4)}\x1b"),
}


@pytest.mark.parametrize("case", list(BAD_HEADERS))
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.label)
async def test_control_characters_in_a_header_are_503_html(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, case: str
) -> None:
    key = str(uuid.uuid4())
    name, value = BAD_HEADERS[case]
    headers = [
        *((k, v) for k, v in world.headers(key, str(uuid.uuid4())).items() if k.lower() != name.lower()),
        ("Content-Type", "application/json"),
        (name, value),
    ]
    before = await snapshot(world)
    response = await client.request(
        operation.method,
        world.url(operation),
        content=b"{}" if operation.has_body else None,
        headers=headers,
    )
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("text/html")
    assert response.text.startswith("<html>")
    await assert_nothing_written(world, before, key)


# ---- integers out of range in query parameters ----------------------------------------------------

OUT_OF_RANGE_INTEGERS = ["10000000000", "-10000000000", "1" + "0" * 30]


@pytest.mark.parametrize("value", OUT_OF_RANGE_INTEGERS)
@pytest.mark.parametrize(
    ("operation", "name"), INTEGER_QUERIES, ids=[f"{op.label} ?{name}" for op, name in INTEGER_QUERIES]
)
async def test_integer_query_parameter_out_of_range_is_400(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, name: str, value: str
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    before = await snapshot(world)
    response = await client.request(
        operation.method,
        world.url(operation),
        params={name: value},
        headers=world.headers(key, request_id),
    )
    assert_envelope(response, 400, "VALIDATION_FAILED", request_id, ("OUT_OF_RANGE", name))
    await assert_nothing_written(world, before, key)


# ---- the route table is covered ----------------------------------------------------------------


async def test_every_operation_is_in_the_battery(app: FastAPI, world: World) -> None:
    live = operations_of(app.openapi())
    assert live == OPERATIONS, "the collected route table differs from the app's"
    fillers = world.path_ids()
    unfilled = {
        (operation.label, part[1:-1])
        for operation in live
        for part in operation.path.split("/")
        if part.startswith("{") and part[1:-1] not in fillers
    }
    assert not unfilled, f"give these path parameters a real id in World.path_ids: {sorted(unfilled)}"
    documented = {(operation.method, operation.path) for operation in live}
    routes = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    hidden = routes - documented - UNDOCUMENTED
    assert not hidden, f"routes outside the OpenAPI document escape the battery: {sorted(hidden)}"
    assert BODY_OPERATIONS, "no operation with a body was collected"
    assert INTEGER_QUERIES, "no integer query parameter was collected"


# ---- sized things: recipients, filters, numbers past their bounds ---------------------------------


def _filters(count: int) -> dict[str, Any]:
    one = {
        "filter_type": "user_attributes",
        "data_type": "string",
        "name": "city",
        "operator": "is",
        "value": "x",
    }
    return {"filter_operator": "or", "filters": [one] * count}


def _recipients(count: int) -> list[str]:
    return [f"user-{number}" for number in range(count)]


@dataclass(frozen=True)
class Sized:
    method: str
    path: str
    body: Callable[[World, FrozenClock], dict[str, Any]]
    detail: tuple[str, str]  # (detail code, dot path) of the 400 VALIDATION_FAILED


def _campaign(**components: Any) -> Callable[[World, FrozenClock], dict[str, Any]]:
    return lambda _world, _clock: {**CAMPAIGN, **components}


def _update(**components: Any) -> Callable[[World, FrozenClock], dict[str, Any]]:
    return lambda _world, _clock: components


def _v1_update(**components: Any) -> Callable[[World, FrozenClock], dict[str, Any]]:
    return lambda _world, _clock: {
        "request_id": str(uuid.uuid4()),
        "updated_by": "o@example.com",
        **components,
    }


_TOO_MANY = 10_000
_AUDIENCE_LIMIT = {
    "is_campaign_audience_limit_enabled": True,
    "metric": "SENT",
    "frequency": "TOTAL",
    "limit": AUDIENCE_LIMIT_MAX + 1,
}
_ROOT = "segmentation_details"

SIZED = {
    "test-send-draft-11-recipients": Sized(
        "POST",
        "/v5/campaigns/test",
        lambda world, _clock: {
            "draft_id": world.campaign_id,
            "test_campaign_meta": meta("USER_ATTRIBUTE_UNIQUE_ID", *_recipients(11)),
        },
        ("OUT_OF_RANGE", "test_campaign_meta.identifier_values"),
    ),
    "test-send-inline-11-recipients": Sized(
        "POST",
        "/v5/campaigns/test",
        lambda _world, _clock: inline_push("USER_ATTRIBUTE_UNIQUE_ID", *_recipients(11)),
        ("OUT_OF_RANGE", "test_campaign_meta.identifier_values"),
    ),
    "create-10000-filters": Sized(
        "POST",
        "/v5/campaigns",
        _campaign(segmentation_details={"included_filters": _filters(_TOO_MANY)}),
        ("OUT_OF_RANGE", f"{_ROOT}.included_filters.filters"),
    ),
    "update-10000-filters": Sized(
        "PATCH",
        "/v5/campaigns/{campaign_id}",
        _update(
            segmentation_details={"included_filters": _filters(1), "excluded_filters": _filters(_TOO_MANY)}
        ),
        ("OUT_OF_RANGE", f"{_ROOT}.excluded_filters.filters"),
    ),
    "v1-update-10000-filters": Sized(
        "PATCH",
        "/core-services/v1/campaigns/{campaign_id}",
        _v1_update(segmentation_details={"included_filters": _filters(_TOO_MANY)}),
        ("OUT_OF_RANGE", f"{_ROOT}.included_filters.filters"),
    ),
    "create-10000-trigger-filters": Sized(
        "POST",
        "/v5/campaigns",
        lambda _world, _clock: {
            **CAMPAIGN,
            "campaign_delivery_type": "EVENT_TRIGGERED",
            "trigger_condition": {"included_filters": _filters(_TOO_MANY)},
        },
        ("OUT_OF_RANGE", "trigger_condition.included_filters.filters"),
    ),
    "create-filters-one-over-the-limit": Sized(
        "POST",
        "/v5/campaigns",
        _campaign(segmentation_details={"included_filters": _filters(MAX_FILTERS + 1)}),
        ("OUT_OF_RANGE", f"{_ROOT}.included_filters.filters"),
    ),
    "offer-10000-filters": Sized(
        "POST",
        "/v5/offers",
        lambda _world, clock: flat_body(
            clock.now(), "Filtered_Offer", segment_info={"filters": {"included_filters": _filters(_TOO_MANY)}}
        ),
        ("OUT_OF_RANGE", "segment_info.filters.included_filters.filters"),
    ),
    "create-audience-limit-9999999999-plus-1": Sized(
        "POST",
        "/v5/campaigns",
        _campaign(campaign_audience_limit=_AUDIENCE_LIMIT),
        ("OUT_OF_RANGE", "campaign_audience_limit.limit"),
    ),
    "update-audience-limit-9999999999-plus-1": Sized(
        "PATCH",
        "/v5/campaigns/{campaign_id}",
        _update(campaign_audience_limit=_AUDIENCE_LIMIT),
        ("OUT_OF_RANGE", "campaign_audience_limit.limit"),
    ),
    "search-page-past-integer": Sized(
        "POST",
        "/v5/campaigns/search",
        _update(limit=15, page=INTEGER_MAX + 1),
        ("OUT_OF_RANGE", "page"),
    ),
    "search-version-past-integer": Sized(
        "POST",
        "/v5/campaigns/search",
        _update(limit=15, page=1, campaign_fields={"version_number": INTEGER_MAX + 1}),
        ("OUT_OF_RANGE", "campaign_fields.version_number"),
    ),
    "meta-page-past-integer": Sized(
        "POST",
        "/v5/campaigns/meta",
        _update(limit=15, page=INTEGER_MAX + 1),
        ("OUT_OF_RANGE", "page"),
    ),
    "preview-template-version-past-integer": Sized(
        "POST",
        "/v5/personalization/preview",
        lambda _world, _clock: email_body(
            {"subject": "Hi", "custom_template_id": "welcome", "custom_template_version": INTEGER_MAX + 1},
            user="ana-1",
        ),
        ("INVALID_TEMPLATE_ID", "campaign_content.content.email.custom_template_id"),
    ),
}


@pytest.mark.parametrize("case", list(SIZED))
async def test_sized_input_past_its_limit_is_400(
    client: httpx.AsyncClient, world: World, clock: FrozenClock, case: str
) -> None:
    sized = SIZED[case]
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    before = await snapshot(world)
    response = await client.request(
        sized.method,
        sized.path.format(**world.path_ids()),
        json=sized.body(world, clock),
        headers=world.headers(key, request_id),
    )
    assert_envelope(response, 400, "VALIDATION_FAILED", request_id, sized.detail)
    await assert_nothing_written(world, before, key)


async def test_offers_limit_of_9999999999_plus_1_is_400(client: httpx.AsyncClient, world: World) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    before = await snapshot(world)
    response = await client.get(
        "/v5/offers", params={"limit": 9_999_999_999 + 1}, headers=world.headers(key, request_id)
    )
    assert_envelope(response, 400, "VALIDATION_FAILED", request_id, ("OUT_OF_RANGE", "limit"))
    await assert_nothing_written(world, before, key)
