"""What a client meets at the socket of a served `herald serve` process (contract §2, spec Errors).

The bytes here are ones httpx refuses to send (control characters, raw non-ASCII, broken request
lines), so each test writes a raw HTTP/1.1 exchange on a TCP socket and reads until the server
closes it. The served process runs with 1-second head and body timeouts (settings, through its
environment); a slow-client test waits for the socket to be closed, within a generous bound.
Runs on both engines (the served process uses the session's database).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import select
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from herald.config import Settings
from herald.http.limits import BUCKETS
from herald.main import create_app
from tests.conftest import REDIS_URL, TEST_SECRET_KEY
from tests.factories import Tenant, make_tenant
from tests.system.cluster import Server, serve

# An upper bound on any answer, slow-client ones included (they come after about one second).
WAIT = 30.0
MAX_HEADER_BYTES = 64 * 1024  # the default of HERALD_MAX_HEADER_BYTES
CAMPAIGN = b'{"channel": "PUSH", "campaign_delivery_type": "ONE_TIME", "created_by": "a@example.com"}'


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after this answer

    @property
    def json(self) -> dict[str, object]:
        parsed: dict[str, object] = json.loads(self.body)
        return parsed

    def error_code(self) -> object:
        error = self.json["error"]
        assert isinstance(error, dict)
        return error["code"]


def _parse(raw: bytes, closed: bool) -> Answer:
    head, separator, rest = raw.partition(b"\r\n\r\n")
    assert separator, f"no complete answer: {raw[:200]!r}"
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", len(rest)))
    return Answer(int(status_line.split()[1]), headers, rest[:length], closed)


def _read_all(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (True) or `WAIT` passes (False)."""
    received = b""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            return received, True
        received += chunk
    return received, False


def exchange(server: Server, raw: bytes) -> Answer:
    """Send `raw` whole, then read the first answer and whether the connection was closed."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        with contextlib.suppress(OSError):  # refused while sending: the answer is still there to read
            sock.sendall(raw)
        received, closed = _read_all(sock)
    return _parse(received, closed)


def request(
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    *,
    close: bool = True,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1"]
    lines += [name + b": " + value for name, value in headers]
    if body:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def credentials(tenant: Tenant, *, campaigns: bool = False) -> list[tuple[bytes, bytes]]:
    return [(name.encode(), value.encode()) for name, value in tenant.headers(campaigns=campaigns).items()]


def create_headers(tenant: Tenant, key: str) -> list[tuple[bytes, bytes]]:
    return [
        *credentials(tenant, campaigns=True),
        (b"Idempotency-Key", key.encode()),
        (b"Content-Type", b"application/json"),
    ]


def assert_not_processed(server: Server, tenant: Tenant, key: str) -> None:
    """The refused create with `key` left nothing: the same create now is new, not a replay."""
    answer = exchange(server, request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN))
    assert answer.status == 201, answer.body
    assert "idempotent-replayed" not in answer.headers
    again = exchange(server, request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN))
    assert again.headers.get("idempotent-replayed") == "true"  # so the check above can fail


def assert_gateway_503(answer: Answer) -> None:
    assert answer.status == 503, answer.body
    assert answer.headers["content-type"].startswith("text/html")
    assert answer.body.startswith(b"<html>")
    # Like every answer, it carries a request id of its own (the document lists it on every 503).
    assert uuid.UUID(answer.headers["x-svc-request-id"]).version == 4
    assert answer.closed


def assert_envelope(answer: Answer, status: int, code: str) -> None:
    assert answer.status == status, answer.body
    assert answer.headers["content-type"] == "application/json"
    assert answer.error_code() == code
    assert answer.json["response_id"] == f"resp_{answer.headers['x-svc-request-id']}"


# ---- the served process --------------------------------------------------------------------------


async def _tenant(database_url: str) -> Tenant:
    settings = Settings(database_url=database_url, redis_url=None, secret_key=TEST_SECRET_KEY)
    app = create_app(settings)
    try:
        limits = dict.fromkeys(BUCKETS, "1000000/second")
        return await make_tenant(app, rate_limits=limits)
    finally:
        await app.state.herald.aclose()


def _env(database_url: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HERALD_DATABASE_URL": database_url,
        "HERALD_SECRET_KEY": TEST_SECRET_KEY,
        "HERALD_LOG_LEVEL": "warning",
        "HERALD_HEADER_TIMEOUT_SECONDS": "1",
        "HERALD_BODY_TIMEOUT_SECONDS": "1",
    }
    if REDIS_URL:
        env["HERALD_REDIS_URL"] = REDIS_URL
    return env


@pytest.fixture(scope="module")
def tenant(database_url: str) -> Tenant:
    return asyncio.run(_tenant(database_url))


@pytest.fixture(scope="module")
def server(database_url: str, tenant: Tenant) -> Iterator[Server]:
    served = serve(_env(database_url), workers=1)
    yield served
    served.kill()


# ---- control characters in headers: 503 HTML, nothing processed ----------------------------------

CONTROL_HEADERS = {
    "soh-in-value": b"X-Note: a\x01b",
    "nul-in-value": b"X-Note: a\x00b",
    "del-in-value": b"X-Note: a\x7fb",
    "escape-in-idempotency-key": b"Idempotency-Key: " + str(uuid.uuid4()).encode() + b"\x1b",
    "bare-lf-in-value": b"X-Note: a\nb",
    "bare-cr-in-value": b"X-Note: a\rb",
    "soh-in-name": b"X-No\x01te: ab",
}


@pytest.mark.parametrize("case", list(CONTROL_HEADERS))
def test_control_characters_in_a_header_are_503_html_and_nothing_is_processed(
    server: Server, tenant: Tenant, case: str
) -> None:
    key = str(uuid.uuid4())
    raw = request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN)
    head, _, body = raw.partition(b"\r\n\r\n")
    answer = exchange(server, head + b"\r\n" + CONTROL_HEADERS[case] + b"\r\n\r\n" + body)
    assert_gateway_503(answer)
    assert_not_processed(server, tenant, key)


def test_every_worker_answers_control_characters_with_503_html(database_url: str, tenant: Tenant) -> None:
    # `--workers 2` runs the protocol in spawned processes: each connection may land on either.
    served = serve(_env(database_url), workers=2)
    try:
        for _ in range(6):
            raw = request("GET", "/v5/offers", [*credentials(tenant), (b"X-Note", b"a\x01b")])
            assert_gateway_503(exchange(served, raw))
    finally:
        served.kill()


# ---- non-ASCII header bytes: each header's documented answer --------------------------------------


def test_non_ascii_basic_credentials_are_401_er001(server: Server) -> None:
    for path, extra in (("/v5/offers", []), ("/v5/campaigns/search", [(b"SVC-APPKEY", b"W1")])):
        method = "GET" if path == "/v5/offers" else "POST"
        raw = request(method, path, [(b"Authorization", b"Basic \xff\xfe"), *extra])
        answer = exchange(server, raw)
        assert answer.status == 401, answer.body
        assert answer.headers["content-type"].startswith("text/plain")
        assert answer.json["code"] == "ER001"


def test_basic_credentials_holding_a_nul_are_401(server: Server) -> None:
    token = base64.b64encode(b"W\x00X:secret")
    answer = exchange(server, request("GET", "/v5/offers", [(b"Authorization", b"Basic " + token)]))
    assert answer.status == 401, answer.body
    assert answer.json["code"] == "ER001"


def test_non_ascii_app_key_is_401(server: Server, tenant: Tenant) -> None:
    raw = request("POST", "/v5/campaigns/search", [*credentials(tenant), (b"SVC-APPKEY", b"\xff\xfe")])
    answer = exchange(server, raw)
    assert answer.status == 401, answer.body
    assert answer.json["code"] == "ER001"


def test_non_ascii_request_id_is_400_invalid_type(server: Server, tenant: Tenant) -> None:
    raw = request("GET", "/v5/offers", [*credentials(tenant), (b"X-SVC-Request-Id", b"\xff\xfe")])
    answer = exchange(server, raw)
    assert_envelope(answer, 400, "VALIDATION_FAILED")
    assert answer.json["error"]["details"][0]["target"] == "X-SVC-Request-Id"  # type: ignore[index]


def test_non_ascii_idempotency_key_is_400(server: Server, tenant: Tenant) -> None:
    headers = [*credentials(tenant, campaigns=True), (b"Content-Type", b"application/json")]
    answer = exchange(
        server, request("POST", "/v5/campaigns", [*headers, (b"Idempotency-Key", b"\xff")], CAMPAIGN)
    )
    assert_envelope(answer, 400, "VALIDATION_FAILED")


def test_non_ascii_content_type_is_400_bad_request(server: Server, tenant: Tenant) -> None:
    headers = [*credentials(tenant, campaigns=True), (b"Idempotency-Key", str(uuid.uuid4()).encode())]
    raw = request("POST", "/v5/campaigns", [*headers, (b"Content-Type", b"application/\xffjson")], CAMPAIGN)
    assert_envelope(exchange(server, raw), 400, "BAD_REQUEST")


def test_non_ascii_if_match_is_412(server: Server, tenant: Tenant) -> None:
    created = exchange(
        server, request("POST", "/v5/campaigns", create_headers(tenant, str(uuid.uuid4())), CAMPAIGN)
    )
    campaign_id = created.json["data"]["id"]  # type: ignore[index]
    headers = [*create_headers(tenant, str(uuid.uuid4())), (b"If-Match", b'"\xff\xfe"')]
    raw = request("PATCH", f"/v5/campaigns/{campaign_id}", headers, b'{"updated_by": "a@example.com"}')
    assert_envelope(exchange(server, raw), 412, "PRECONDITION_FAILED")


def test_non_ascii_header_name_is_400_bad_request(server: Server, tenant: Tenant) -> None:
    answer = exchange(server, request("GET", "/v5/offers", [*credentials(tenant), (b"X-N\xe9te", b"a")]))
    assert_envelope(answer, 400, "BAD_REQUEST")
    assert answer.closed


@pytest.mark.parametrize("name", ["Authorization", "SVC-APPKEY", "Idempotency-Key", "Content-Type", "Host"])
def test_a_header_of_one_value_given_twice_is_400_naming_it(
    server: Server, tenant: Tenant, name: str
) -> None:
    # The first of two Authorization headers was the one read: a proxy in front reading the
    # last would have authenticated someone else. Each order is refused, and nothing is written.
    key = str(uuid.uuid4())
    headers = create_headers(tenant, key)
    value = next((v for n, v in headers if n.decode().lower() == name.lower()), b"127.0.0.1")
    for extra in (value, b"other"):
        raw = request("POST", "/v5/campaigns", [*headers, (name.encode(), extra)], CAMPAIGN)
        answer = exchange(server, raw)
        assert_envelope(answer, 400, "BAD_REQUEST")
        assert answer.json["error"]["target"] == name.lower()  # type: ignore[index]
    assert_not_processed(server, tenant, key)


@pytest.mark.parametrize(
    "host", [b"a b/c", b"x.example/path", b"user@x.example", b"h\xc3\xa9.example", b"a:b:c"]
)
def test_an_invalid_host_is_400(server: Server, tenant: Tenant, host: bytes) -> None:
    # RFC 9112 §3.2: a server MUST answer 400 to an invalid Host (it was served, and the answers'
    # doc_url fell back to the socket's address).
    head = [b"GET /v5/offers HTTP/1.1", b"Host: " + host, *(n + b": " + v for n, v in credentials(tenant))]
    answer = exchange(server, b"\r\n".join([*head, b"Connection: close"]) + b"\r\n\r\n")
    assert_envelope(answer, 400, "BAD_REQUEST")
    assert answer.json["error"]["target"] == "host"  # type: ignore[index]


def test_an_http_1_1_request_without_host_is_400(server: Server, tenant: Tenant) -> None:
    head = [
        b"GET /v5/offers HTTP/1.1",
        *(n + b": " + v for n, v in credentials(tenant)),
        b"Connection: close",
    ]
    answer = exchange(server, b"\r\n".join(head) + b"\r\n\r\n")
    assert_envelope(answer, 400, "BAD_REQUEST")
    assert answer.json["error"]["target"] == "host"  # type: ignore[index]


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (b"GET /healthz HTTP/1.1\r\nConnection: close", "host"),
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close", "host"),
        (
            b"GET /healthz HTTP/1.1\r\nHost: a\r\nAuthorization: x\r\nAuthorization: y\r\nConnection: close",
            "authorization",
        ),
    ],
)
def test_the_health_probe_keeps_the_sockets_rules(server: Server, head: bytes, target: str) -> None:
    # `/healthz` is answered before the router, and it was answered 200 to these.
    answer = exchange(server, head + b"\r\n\r\n")
    assert_envelope(answer, 400, "BAD_REQUEST")
    assert answer.json["error"]["target"] == target  # type: ignore[index]
    assert exchange(server, b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").status == 200


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"deflate,chunked", b"br"])
def test_a_transfer_coding_other_than_chunked_is_501_and_nothing_is_processed(
    server: Server, tenant: Tenant, coding: bytes
) -> None:
    # Decoded as chunked alone, a gzip body reached the handlers as bytes that are not JSON.
    key = str(uuid.uuid4())
    headers = [*create_headers(tenant, key), (b"Transfer-Encoding", coding)]
    body = b"%x\r\n" % len(CAMPAIGN) + CAMPAIGN + b"\r\n0\r\n\r\n"
    answer = exchange(server, request("POST", "/v5/campaigns", headers) + body)
    if coding == b"br":  # chunked not last: the framing itself is unreadable (RFC 9112 §6.3)
        assert_envelope(answer, 400, "BAD_REQUEST")
    else:
        assert_envelope(answer, 501, "NOT_IMPLEMENTED")
        assert answer.json["error"]["target"] == "transfer-encoding"  # type: ignore[index]
    assert_not_processed(server, tenant, key)


@pytest.mark.parametrize("coding", [b"gzip", b"identity, br"])
def test_a_content_coding_other_than_identity_is_415_and_nothing_is_processed(
    server: Server, tenant: Tenant, coding: bytes
) -> None:
    # The body was read as sent: a plain body labelled gzip was taken, a compressed one judged as
    # bytes that are not JSON.
    key = str(uuid.uuid4())
    headers = [*create_headers(tenant, key), (b"Content-Encoding", coding)]
    answer = exchange(server, request("POST", "/v5/campaigns", headers, CAMPAIGN))
    assert_envelope(answer, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert answer.json["error"]["target"] == "content-encoding"  # type: ignore[index]
    assert_not_processed(server, tenant, key)
    headers = [*create_headers(tenant, str(uuid.uuid4())), (b"Content-Encoding", b"identity")]
    assert exchange(server, request("POST", "/v5/campaigns", headers, CAMPAIGN)).status == 201


def test_an_expectation_other_than_100_continue_is_417_and_nothing_is_processed(
    server: Server, tenant: Tenant
) -> None:
    key = str(uuid.uuid4())
    headers = [*create_headers(tenant, key), (b"Expect", b"teapot")]
    answer = exchange(server, request("POST", "/v5/campaigns", headers, CAMPAIGN))
    assert_envelope(answer, 417, "EXPECTATION_FAILED")
    assert answer.json["error"]["target"] == "expect"  # type: ignore[index]
    assert_not_processed(server, tenant, key)


def test_chunked_bodies_and_100_continue_in_any_case_are_served(server: Server, tenant: Tenant) -> None:
    headers = [*create_headers(tenant, str(uuid.uuid4())), (b"Transfer-Encoding", b"Chunked")]
    body = b"%x\r\n" % len(CAMPAIGN) + CAMPAIGN + b"\r\n0\r\n\r\n"
    assert exchange(server, request("POST", "/v5/campaigns", headers) + body).status == 201
    headers = [*create_headers(tenant, str(uuid.uuid4())), (b"Expect", b"100-Continue")]
    answer = exchange(server, request("POST", "/v5/campaigns", headers, CAMPAIGN))
    # The interim 100 (Continue), then the answer.
    assert answer.status == 100, answer.body
    assert answer.body.startswith(b"HTTP/1.1 201 Created\r\n"), answer.body


def test_an_http_1_0_expectation_of_100_continue_is_ignored(server: Server, tenant: Tenant) -> None:
    # RFC 9110 §10.1.1: a server MUST ignore it in an HTTP/1.0 request (such a client knows no
    # interim answer); it was answered `HTTP/1.1 100 Continue` before the final answer.
    headers = [*create_headers(tenant, str(uuid.uuid4())), (b"Expect", b"100-continue")]
    head = request("POST", "/v5/campaigns", headers, CAMPAIGN).replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1)
    answer = exchange(server, head)
    assert answer.status == 201, answer.body
    assert b"100 Continue" not in answer.body


# ---- malformed request lines: a clean 400 -----------------------------------------------------------

MALFORMED = {
    "not-http": b"GARBAGE\r\n\r\n",
    "no-version": b"GET /v5/offers\r\n\r\n",  # what llhttp reads as HTTP/0.9
    "unknown-version": b"GET /v5/offers HTTP/9.9\r\nHost: x\r\n\r\n",
    "space-in-target": b"GET /v5/off ers HTTP/1.1\r\nHost: x\r\n\r\n",
    "control-in-target": b"GET /v5/off\x01ers HTTP/1.1\r\nHost: x\r\n\r\n",
    "non-ascii-target": b"GET /v5/offers\xff HTTP/1.1\r\nHost: x\r\n\r\n",
    "bare-lf-line-ends": b"GET /v5/offers HTTP/1.1\nHost: x\n\n",
    "folded-header": b"GET /v5/offers HTTP/1.1\r\nHost: x\r\nX-Note: a\r\n b\r\n\r\n",
    "no-colon": b"GET /v5/offers HTTP/1.1\r\nHost x\r\n\r\n",
    # HTAB is header whitespace, not one of the refused controls (as in the in-process guard); in a
    # name it only makes the header malformed.
    "tab-in-name": b"GET /v5/offers HTTP/1.1\r\nHost: x\r\nX-No\tte: ab\r\n\r\n",
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_is_400_bad_request_and_closed(server: Server, case: str) -> None:
    answer = exchange(server, MALFORMED[case])
    assert_envelope(answer, 400, "BAD_REQUEST")
    assert answer.closed


# ---- methods: 501 for one implemented nowhere, 405 for a known one a resource does not answer ------


@pytest.mark.parametrize("method", ["FOO", "get", "M-SEARCH", "PROPFIND", "PURGE"])
def test_a_method_implemented_nowhere_is_501_on_any_path(server: Server, tenant: Tenant, method: str) -> None:
    # llhttp refuses FOO, `get` (methods are case-sensitive) and some others itself; PROPFIND and
    # PURGE reach the app. Both answer alike, on a path that exists and on one that does not.
    for path in ("/v5/offers", "/nowhere"):
        answer = exchange(server, request(method, path, credentials(tenant)))
        assert_envelope(answer, 501, "NOT_IMPLEMENTED")
        assert method in str(answer.json["error"])


def test_a_method_that_is_not_a_token_is_a_malformed_request(server: Server) -> None:
    answer = exchange(server, b"GE(T /v5/offers HTTP/1.1\r\nHost: x\r\n\r\n")
    assert_envelope(answer, 400, "BAD_REQUEST")
    assert answer.closed


def test_an_unknown_method_after_a_complete_request_is_answered_after_it(
    server: Server, tenant: Tenant
) -> None:
    raw = request("GET", "/healthz", [], close=False) + request("FOO", "/v5/offers", credentials(tenant))
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(raw)
        received, closed = _read_all(sock)
    first, second = _answers(received, closed)
    assert first.status == 200
    assert_envelope(second, 501, "NOT_IMPLEMENTED")
    assert second.closed


# ---- header size ----------------------------------------------------------------------------------


def test_one_header_past_the_bound_is_431(server: Server, tenant: Tenant) -> None:
    raw = request("GET", "/v5/offers", [*credentials(tenant), (b"X-Note", b"a" * MAX_HEADER_BYTES)])
    answer = exchange(server, raw)
    assert_envelope(answer, 431, "REQUEST_HEADERS_TOO_LARGE")
    assert answer.closed


def test_many_headers_past_the_bound_are_431(server: Server, tenant: Tenant) -> None:
    many = [(f"X-Note-{i}".encode(), b"a" * 1000) for i in range(70)]
    answer = exchange(server, request("GET", "/v5/offers", [*credentials(tenant), *many]))
    assert_envelope(answer, 431, "REQUEST_HEADERS_TOO_LARGE")


def test_an_8_mb_header_is_431_without_reading_it_all(server: Server, tenant: Tenant) -> None:
    raw = request("GET", "/v5/offers", [*credentials(tenant), (b"X-Note", b"a" * 8 * 1024 * 1024)])
    answer = exchange(server, raw)
    assert_envelope(answer, 431, "REQUEST_HEADERS_TOO_LARGE")
    assert answer.closed


def test_headers_within_the_bound_reach_the_api(server: Server, tenant: Tenant) -> None:
    raw = request("GET", "/v5/offers", [*credentials(tenant), (b"X-Note", b"a" * (MAX_HEADER_BYTES - 1024))])
    answer = exchange(server, raw)
    assert answer.status == 200, answer.body


# ---- slow clients -----------------------------------------------------------------------------------


def test_a_head_sent_a_byte_at_a_time_is_closed_with_408(server: Server, tenant: Tenant) -> None:
    raw = request("GET", "/v5/offers", [*credentials(tenant), (b"X-Note", b"a" * 10_000)])
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        deadline = time.monotonic() + WAIT
        for byte in raw:
            assert time.monotonic() < deadline, "the server kept a trickling head open"
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            # Each byte waits on the socket: an answer (or a close) ends the trickle.
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                break
        else:
            pytest.fail("the whole head was sent before the server answered")
        received, closed = _read_all(sock)
    answer = _parse(received, closed)
    assert_envelope(answer, 408, "REQUEST_TIMEOUT")
    assert answer.closed


def test_a_connection_that_sends_nothing_is_closed(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        received, closed = _read_all(sock)
    assert closed
    assert received == b""


def test_a_slow_body_is_408_and_nothing_is_processed(server: Server, tenant: Tenant) -> None:
    key = str(uuid.uuid4())
    head, _, _ = request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN).partition(
        b"\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(head + b"\r\n\r\n" + CAMPAIGN[:10])  # Content-Length promises the whole body
        received, closed = _read_all(sock)
    answer = _parse(received, closed)
    assert_envelope(answer, 408, "REQUEST_TIMEOUT")
    assert answer.closed
    assert_not_processed(server, tenant, key)


def test_bodies_refused_at_the_socket_are_counted_with_the_answer_the_client_got(
    server: Server, tenant: Tenant
) -> None:
    # The app was reading these bodies when the server answered them itself: its metrics (and
    # its log line) show that answer, not a 500 of an app that gave none.
    before = _request_counts(server)
    headers = [*create_headers(tenant, str(uuid.uuid4())), (b"Transfer-Encoding", b"chunked")]
    bad_chunk = exchange(server, request("POST", "/v5/campaigns", headers) + b"zz\r\n")
    assert_envelope(bad_chunk, 400, "BAD_REQUEST")
    head, _, _ = request(
        "POST", "/v5/campaigns", create_headers(tenant, str(uuid.uuid4())), CAMPAIGN
    ).partition(b"\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(head + b"\r\n\r\n" + CAMPAIGN[:10])
        received, closed = _read_all(sock)
    assert_envelope(_parse(received, closed), 408, "REQUEST_TIMEOUT")
    after = _request_counts(server)
    assert after.get("400", 0) - before.get("400", 0) == 1
    assert after.get("408", 0) - before.get("408", 0) == 1
    assert after.get("500", 0) == before.get("500", 0)


def test_a_client_that_leaves_mid_body_is_counted_499_not_500(server: Server, tenant: Tenant) -> None:
    # Nothing failed on the server: the client closed before its body was whole (nginx's 499).
    before = _request_counts(server)
    head, _, _ = request(
        "POST", "/v5/campaigns", create_headers(tenant, str(uuid.uuid4())), CAMPAIGN
    ).partition(b"\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(head + b"\r\n\r\n" + CAMPAIGN[:10])
    for _ in range(100):  # the server learns of the close on its own time
        after = _request_counts(server)
        if after.get("499", 0) > before.get("499", 0):
            break
        time.sleep(0.05)
    assert after.get("499", 0) - before.get("499", 0) == 1
    assert after.get("500", 0) == before.get("500", 0)


def _request_counts(server: Server) -> dict[str, float]:
    """herald_http_requests_total of POST /v5/campaigns's requests refused before routing, by status."""
    answer = exchange(server, request("GET", "/metrics", []))
    counts: dict[str, float] = {}
    for line in answer.body.decode().splitlines():
        if (
            line.startswith("herald_http_requests_total{")
            and 'method="POST"' in line
            and 'route="unmatched"' in line
        ):
            status = line.split('status="', 1)[1].split('"', 1)[0]
            counts[status] = counts.get(status, 0) + float(line.rsplit(" ", 1)[1])
    return counts


# ---- body limits ------------------------------------------------------------------------------------


def test_declared_oversize_body_is_413(server: Server, tenant: Tenant) -> None:
    key = str(uuid.uuid4())
    headers = [*create_headers(tenant, key), (b"Content-Length", str(2 * 1024 * 1024).encode())]
    answer = exchange(server, request("POST", "/v5/campaigns", headers) + b"{")
    assert_envelope(answer, 413, "PAYLOAD_TOO_LARGE")


def test_an_oversize_body_announced_with_100_continue_is_413_and_closes(
    server: Server, tenant: Tenant
) -> None:
    # The client may hold its body back: the next request on the connection was read as it.
    headers = [
        *create_headers(tenant, str(uuid.uuid4())),
        (b"Content-Length", str(2 * 1024 * 1024).encode()),
        (b"Expect", b"100-continue"),
    ]
    after = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(request("POST", "/v5/campaigns", headers, close=False))
        first = sock.recv(65536)
        with contextlib.suppress(OSError):  # closed already
            sock.sendall(after)
        received, closed = _read_all(sock)
    answer = _parse(first + received, closed)
    assert_envelope(answer, 413, "PAYLOAD_TOO_LARGE")
    assert answer.headers.get("connection") == "close"
    assert closed
    assert (first + received).count(b"HTTP/1.1 ") == 1  # the next request was not taken for the body


def test_chunked_oversize_body_without_length_is_413_and_nothing_is_processed(
    server: Server, tenant: Tenant
) -> None:
    key = str(uuid.uuid4())
    headers = [*create_headers(tenant, key), (b"Transfer-Encoding", b"chunked")]
    chunk = b"a" * 64 * 1024
    chunks = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(20))  # 1.25 MiB
    answer = exchange(server, request("POST", "/v5/campaigns", headers) + chunks + b"0\r\n\r\n")
    assert_envelope(answer, 413, "PAYLOAD_TOO_LARGE")
    assert_not_processed(server, tenant, key)


# ---- what still works ---------------------------------------------------------------------------------


def test_kept_alive_connection_answers_each_request(server: Server, tenant: Tenant) -> None:
    first = request("GET", "/v5/offers", credentials(tenant), close=False)
    second = request("GET", "/v5/offers", credentials(tenant))
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(first + second)
        received, closed = _read_all(sock)
    assert closed
    assert received.count(b"HTTP/1.1 200 OK") == 2


def test_a_burst_of_new_connections_is_each_answered(server: Server, tenant: Tenant) -> None:
    # `herald serve` accepts every connection waiting on its socket per turn of its loop
    # (herald.http.accept): a burst opened together, each sending at once, gets every answer.
    raw = request("GET", "/v5/offers", credentials(tenant))
    burst = [socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) for _ in range(64)]
    try:
        for sock in burst:
            sock.sendall(raw)
        answers = [_parse(*_read_all(sock)) for sock in burst]
    finally:
        for sock in burst:
            sock.close()
    assert [answer.status for answer in answers] == [200] * len(burst)
    assert all(answer.closed for answer in answers)


def test_a_late_head_on_a_kept_alive_connection_is_408(server: Server, tenant: Tenant) -> None:
    first = request("GET", "/v5/offers", credentials(tenant), close=False)
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(first + b"GET /v5/offers HTTP/1.1\r\nHost: x\r\n")  # the second head never ends
        received, closed = _read_all(sock)
    assert closed
    assert received.startswith(b"HTTP/1.1 200 OK")
    second = received[received.index(b"HTTP/1.1", 1) :]
    assert_envelope(_parse(second, closed), 408, "REQUEST_TIMEOUT")


def test_a_websocket_upgrade_is_served_as_plain_http(server: Server) -> None:
    upgrade = (
        b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    plain = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
    for sent in (upgrade, plain + upgrade):  # first on its connection, and after another request
        with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
            sock.sendall(sent)
            received = b""
            while received.count(b"HTTP/1.1 ") < sent.count(b"GET"):
                chunk = sock.recv(65536)
                assert chunk, received
                received += chunk
        assert received.count(b"HTTP/1.1 200 OK") == sent.count(b"GET"), received


def test_line_breaks_trickled_after_a_request_do_not_hold_the_connection(server: Server) -> None:
    # The parser skips CRLFs between requests and began no request, so no head timer ran, and the
    # keep-alive timer stopped at the first byte: a CRLF a second held the connection for good.
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        received = sock.recv(65536)
        assert received.startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 10  # the server's header timeout is 1 s
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                sock.sendall(b"\r\n")
            except OSError:
                closed = True
                break
            ready, _, _ = select.select([sock], [], [], 0.3)
            if ready:
                chunk = sock.recv(65536)
                received += chunk
                closed = not chunk
    assert closed
    assert b"408 Request Timeout" in received


def test_a_head_request_gets_its_head_alone_and_the_connection_goes_on(server: Server) -> None:
    # A response's head waits for its body to go out in one send; a HEAD answer has no body to wait for.
    first = request("HEAD", "/healthz", [], close=False)
    second = request("GET", "/healthz", [])
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(first)
        alone = b""
        while not alone.endswith(b"\r\n\r\n"):  # the head, and nothing after it
            chunk = sock.recv(65536)
            assert chunk, f"closed after {alone!r}"
            alone += chunk
        sock.sendall(second)
        rest, closed = _read_all(sock)
    assert alone.startswith(b"HTTP/1.1 200 OK")
    assert closed
    answer = _parse(rest, closed)
    assert (answer.status, answer.json) == (200, {"status": "ok"})


def test_head_on_an_api_route_is_its_get_without_the_body(server: Server, tenant: Tenant) -> None:
    # RFC 9110 §9.3.2: the same status and headers as GET (Content-Length included), no body; the
    # next request on the connection is read right after the head.
    for path, campaigns in (
        ("/v5/offers?limit=1", False),
        ("/v5/campaigns/nope", True),
        ("/openapi.json", False),
    ):
        get = exchange(server, request("GET", path, credentials(tenant, campaigns=campaigns)))
        head = request("HEAD", path, credentials(tenant, campaigns=campaigns), close=False)
        then = request("GET", "/healthz", [])
        with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
            sock.sendall(head + then)
            received, closed = _read_all(sock)
        assert closed
        head_part, _, rest = received.partition(b"\r\n\r\n")
        answer = _parse(head_part + b"\r\n\r\n", False)
        assert answer.status == get.status, path
        assert answer.headers["content-type"] == get.headers["content-type"], path
        assert answer.headers["content-length"] == str(len(get.body)), path
        assert rest.startswith(b"HTTP/1.1 200 OK"), (path, rest[:80])
        assert _parse(rest, closed).json == {"status": "ok"}


def test_405_names_head_beside_get(server: Server, tenant: Tenant) -> None:
    answer = exchange(server, request("DELETE", "/v5/offers", credentials(tenant)))
    assert_envelope(answer, 405, "METHOD_NOT_ALLOWED")
    assert answer.headers["allow"] == "GET, HEAD, POST"
    answer = exchange(server, request("HEAD", "/v5/campaigns", credentials(tenant, campaigns=True)))
    assert (answer.status, answer.headers["allow"], answer.body) == (405, "POST", b"")


def _answers(raw: bytes, closed: bool) -> list[Answer]:
    """Every answer in `raw`, in order (the last one `closed` when the server closed after it)."""
    found = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        length = int(next(line.split(b":")[1] for line in lines if line.startswith(b"content-length")))
        raw = rest[length:]
        found.append(_parse(head + b"\r\n\r\n" + rest[:length], closed and not raw))
    return found


def _pipelined(server: Server, first: bytes, rest: bytes = b"") -> tuple[list[Answer], bool]:
    """Send `first` on one connection and, once its first answer is in (so that the server has read
    it all), `rest`; every answer, and whether the server closed after them."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(first)
        received = b""
        if rest:
            while b"\r\n\r\n" not in received:  # the first answer's head (its body with it)
                received += sock.recv(65536)
            with contextlib.suppress(OSError):
                sock.sendall(rest)
        more, closed = _read_all(sock)
    return _answers(received + more, closed), closed


def test_a_malformed_request_after_a_complete_one_is_answered_after_it(
    server: Server, tenant: Tenant
) -> None:
    # HTTP/1.1 answers pipelined requests in order: the complete create is processed and answered,
    # then the malformed request after it gets its 400, and the connection closes.
    key = str(uuid.uuid4())
    create = request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN, close=False)
    answers, closed = _pipelined(server, create + b"GET /v5/off ers HTTP/1.1\r\n\r\n")
    assert [answer.status for answer in answers] == [201, 400]
    assert answers[1].error_code() == "BAD_REQUEST"
    assert closed
    again = exchange(server, request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN))
    assert again.headers.get("idempotent-replayed") == "true"  # it was processed


@pytest.mark.parametrize("split", ["same-read", "head-split", "body-then-head"])
def test_a_control_character_in_a_pipelined_head_is_503_html(
    server: Server, tenant: Tenant, split: str
) -> None:
    first = request("GET", "/v5/offers?limit=1", credentials(tenant), close=False)
    second = b"GET /v5/offers HTTP/1.1\r\nX-A: a\x00b\r\nHost: x\r\n\r\n"
    if split == "same-read":
        parts = [first + second]
    elif split == "head-split":
        cut = second.index(b"X-A")
        parts = [first + second[:cut], second[cut:]]
    else:  # a request with a body, then the bad head, in one read
        key = str(uuid.uuid4())
        parts = [
            request("POST", "/v5/campaigns", create_headers(tenant, key), CAMPAIGN, close=False) + second
        ]
    answers, closed = _pipelined(server, *parts)
    assert [answer.status for answer in answers][:-1] in ([200], [201])
    assert_gateway_503(answers[-1])
    assert closed


def test_an_idle_connection_is_kept_for_the_configured_time(database_url: str, tenant: Tenant) -> None:
    # HERALD_KEEPALIVE_SECONDS: behind a balancer keeping connections for 60 s, a server closing
    # them after the framework's 5 s raced the balancer's next request on each.
    served = serve({**_env(database_url), "HERALD_KEEPALIVE_SECONDS": "3600"}, workers=1)
    try:
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
            head = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
            sock.sendall(head)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            # Past the framework's own 5 s; a closed connection reads b"" at once.
            sock.settimeout(6.5)
            with pytest.raises(TimeoutError):
                sock.recv(1)
            sock.settimeout(30)
            sock.sendall(head)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        served.kill()
