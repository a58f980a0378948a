"""Bad header bytes and bad query strings on every operation: the documented answer, never a 5xx,
nothing written (issue 11; the body half of the battery is `test_bad_input_battery`, whose route
table, workspace and checks this module shares).

Generated from the OpenAPI route table: every header an operation reads (Authorization, the app key,
the request id, the Idempotency-Key, Content-Type, If-Match) gets non-ASCII bytes and an oversize
value; every query parameter of every operation (or an unknown one where it has none) gets NUL and
other control characters, non-UTF-8 percent-escapes, a huge value and repeats; every path parameter
gets control characters. Bounds on total header size and the time to send them are the socket's
(tests/system/test_socket_gateway.py).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import httpx
import pytest

from tests.http import test_bad_input_battery as battery
from tests.http.test_bad_input_battery import (
    OPERATIONS,
    REQUEST_ID_HEADER,
    ApiOperation,
    World,
    assert_envelope,
    assert_nothing_written,
    snapshot,
)

# The battery's module-scoped app, client and workspace, one of each for this module too.
clock = battery.clock
app = battery.app
client = battery.client
world = battery.world


def _parameters(schema: dict[str, object], where: str) -> dict[tuple[str, str], tuple[str, ...]]:
    found: dict[tuple[str, str], tuple[str, ...]] = {}
    paths = schema["paths"]
    assert isinstance(paths, dict)
    for path, item in paths.items():
        for method, operation in item.items():
            names = tuple(p["name"] for p in operation.get("parameters", []) if p["in"] == where)
            found[(method.upper(), path)] = names
    return found


_SCHEMA = battery._collected_schema()
QUERIES = _parameters(_SCHEMA, "query")
HEADERS = _parameters(_SCHEMA, "header")
# The probes (/healthz, /readyz, /metrics) take no credentials and read no header or query: they are
# held to "never a 5xx" below, not to the API's answers.
PROBES = [
    operation
    for operation in OPERATIONS
    if "operations" in _SCHEMA["paths"][operation.path][operation.method.lower()]["tags"]  # type: ignore[index]
]
API_OPERATIONS = [operation for operation in OPERATIONS if operation not in PROBES]


def _query_names(operation: ApiOperation) -> tuple[str, ...]:
    # Every route's query string is checked, read or not: an operation without parameters gets one.
    return QUERIES[(operation.method, operation.path)] or ("q",)


# ---- header bytes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeaderAnswer:
    status: int
    code: str
    detail: tuple[str, str] | None = None  # (detail code, target) of a 400


def _header_answer(name: str) -> HeaderAnswer:
    """What a bad value of header `name` is answered with (contract §2, §3)."""
    return {
        "Authorization": HeaderAnswer(401, "ER001"),
        "SVC-APPKEY": HeaderAnswer(401, "ER001"),
        REQUEST_ID_HEADER: HeaderAnswer(400, "VALIDATION_FAILED", ("INVALID_TYPE", REQUEST_ID_HEADER)),
        "Idempotency-Key": HeaderAnswer(
            400, "VALIDATION_FAILED", ("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key")
        ),
        "Content-Type": HeaderAnswer(400, "BAD_REQUEST"),
        "If-Match": HeaderAnswer(412, "PRECONDITION_FAILED"),
    }[name]


def _headers_read(operation: ApiOperation) -> list[str]:
    names = ["Authorization", *HEADERS[(operation.method, operation.path)]]
    return [*names, "Content-Type"] if operation.has_body else names


HEADER_CASES = [(operation, name) for operation in API_OPERATIONS for name in _headers_read(operation)]
BAD_HEADER_VALUES = {
    "non-ascii": b"\xff\xfe",
    "latin-1-text": "caf\xe9".encode("latin-1"),
    "utf-8-text": "caf\xe9 \u2603".encode(),
    "oversize": b"a" * 100_000,
}


def _with_header(
    world: World, operation: ApiOperation, name: str, value: bytes, key: str, request_id: str
) -> list[tuple[str, bytes]]:
    base = {**world.headers(key, request_id), "Content-Type": "application/json"}
    if name == "Authorization":
        value = b"Basic " + value
    return [(k, v.encode()) for k, v in base.items() if k.lower() != name.lower()] + [(name, value)]


@pytest.mark.parametrize("case", list(BAD_HEADER_VALUES))
@pytest.mark.parametrize(
    ("operation", "name"), HEADER_CASES, ids=[f"{op.label} {name}" for op, name in HEADER_CASES]
)
async def test_bad_header_bytes_get_the_documented_answer(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, name: str, case: str
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    headers = _with_header(world, operation, name, BAD_HEADER_VALUES[case], key, request_id)
    before = await snapshot(world)
    response = await client.request(
        operation.method, world.url(operation), content=b"{}" if operation.has_body else None, headers=headers
    )
    expected = _header_answer(name)
    if expected.code.startswith("ER"):
        assert response.status_code == expected.status, response.text
        assert response.headers["content-type"].startswith("text/plain")
        assert json.loads(response.text)["code"] == expected.code
    elif name == REQUEST_ID_HEADER:
        # The bad id is not echoed: the answer carries a fresh one of ours.
        fresh = response.headers[REQUEST_ID_HEADER]
        assert fresh != request_id
        assert_envelope(response, expected.status, expected.code, fresh, expected.detail)
    else:
        assert_envelope(response, expected.status, expected.code, request_id, expected.detail)
    await assert_nothing_written(world, before, key)


# ---- query strings --------------------------------------------------------------------------------

# Percent-encoded as a client would send them; each is refused naming the parameter.
REFUSED_QUERY_VALUES = {
    "nul": "a%00b",
    "soh": "%01",
    "unit-separator": "x%1F",
    "del": "x%7F",
    "c1-csi": "x%C2%9B31m",  # U+009B: a terminal escape in one character
    "line-feed": "a%0Ab",
    "tab": "a%09b",
    "non-utf8-ff": "%ff",
    "truncated-utf8": "caf%C3",
    "utf8-encoded-surrogate": "%ED%A0%80",
}
QUERY_CASES = [(operation, name) for operation in API_OPERATIONS for name in _query_names(operation)]
QUERY_IDS = [f"{op.label} ?{name}" for op, name in QUERY_CASES]


async def _query(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, query: str, key: str, request_id: str
) -> httpx.Response:
    return await client.request(
        operation.method,
        f"{world.url(operation)}?{query}",
        content=b"{}" if operation.has_body else None,
        headers={**world.headers(key, request_id), "Content-Type": "application/json"},
    )


@pytest.mark.parametrize("case", list(REFUSED_QUERY_VALUES))
@pytest.mark.parametrize(("operation", "name"), QUERY_CASES, ids=QUERY_IDS)
async def test_control_characters_and_bad_utf8_in_a_query_parameter_are_400(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, name: str, case: str
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    before = await snapshot(world)
    for query in (f"{name}={REFUSED_QUERY_VALUES[case]}", f"{name}=ok&{name}={REFUSED_QUERY_VALUES[case]}"):
        response = await _query(client, world, operation, query, key, request_id)
        assert_envelope(response, 400, "VALIDATION_FAILED", request_id, ("INVALID_TYPE", name))
    await assert_nothing_written(world, before, key)


@pytest.mark.parametrize("operation", API_OPERATIONS, ids=lambda operation: operation.label)
async def test_a_control_character_in_a_query_parameter_name_is_400(
    client: httpx.AsyncClient, world: World, operation: ApiOperation
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    before = await snapshot(world)
    response = await _query(client, world, operation, "a%00b=1", key, request_id)
    assert_envelope(response, 400, "VALIDATION_FAILED", request_id, ("INVALID_TYPE", "a\x00b"))
    await assert_nothing_written(world, before, key)


ODD_QUERY_VALUES = {
    "huge": "a" * 60_000,  # httpx sends URLs up to 64 KiB
    "huge-utf8": "%E2%98%83" * 6_000,
    "repeated": "1&{name}=2&{name}=3",
    "empty": "",
    "plus-and-spaces": "a+b%20c",
}


@pytest.mark.parametrize("case", list(ODD_QUERY_VALUES))
@pytest.mark.parametrize(("operation", "name"), QUERY_CASES, ids=QUERY_IDS)
async def test_odd_query_values_are_never_a_5xx(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, name: str, case: str
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    before = await snapshot(world)
    value = ODD_QUERY_VALUES[case].format(name=name)
    response = await _query(client, world, operation, f"{name}={value}", key, request_id)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert_envelope(response, response.status_code, response.json()["error"]["code"], request_id)
        if not operation.has_body:  # a write's `{}` body may be what is reported
            for detail in response.json()["error"]["details"]:
                assert detail["target"] == name or detail["target"].startswith(f"{name}."), detail
        await assert_nothing_written(world, before, key)


@pytest.mark.parametrize("operation", PROBES, ids=lambda operation: operation.label)
async def test_probes_answer_hostile_query_and_header_bytes_without_a_5xx(
    client: httpx.AsyncClient, world: World, operation: ApiOperation
) -> None:
    queries = [f"q={value}" for value in (*REFUSED_QUERY_VALUES.values(), *ODD_QUERY_VALUES.values())]
    for query in [*queries, "a%00b=1"]:
        response = await client.get(f"{world.url(operation)}?{query}")
        assert response.status_code in (200, 503), (query, response.text)
    for name in ("Authorization", REQUEST_ID_HEADER, "Content-Type"):
        for value in BAD_HEADER_VALUES.values():
            response = await client.get(world.url(operation), headers=[(name, value)])
            assert response.status_code < 500 or response.status_code == 503, (name, response.text)


# ---- path parameters --------------------------------------------------------------------------------

PATH_CASES = [operation for operation in OPERATIONS if "{" in operation.path]
# A body the route accepts, so that the id in the path is what gets looked up.
VALID_BODIES = {("PATCH", "/v5/campaigns/{campaign_id}/status"): b'{"action": "PAUSE"}'}
BAD_PATH_IDS = {"nul": "a%00b", "soh": "%01", "non-utf8": "%ff", "huge": "a" * 10_000}


@pytest.mark.parametrize("case", list(BAD_PATH_IDS))
@pytest.mark.parametrize("operation", PATH_CASES, ids=lambda operation: operation.label)
async def test_bad_bytes_in_a_path_parameter_are_not_found(
    client: httpx.AsyncClient, world: World, operation: ApiOperation, case: str
) -> None:
    key, request_id = str(uuid.uuid4()), str(uuid.uuid4())
    ids = dict.fromkeys(world.path_ids(), BAD_PATH_IDS[case])
    before = await snapshot(world)
    response = await client.request(
        operation.method,
        operation.path.format(**ids),
        content=VALID_BODIES.get((operation.method, operation.path), b"{}") if operation.has_body else None,
        headers={**world.headers(key, request_id), "Content-Type": "application/json"},
    )
    if "{workspace_id}" in operation.path:  # the path must name the caller's own workspace
        assert response.status_code == 401, response.text
        assert json.loads(response.text)["code"] == "ER001"
    else:
        assert response.status_code == 404, response.text
        assert_envelope(response, 404, response.json()["error"]["code"], request_id)
    await assert_nothing_written(world, before, key)
