"""Gateway behaviour every surface shares: auth refusals, request ids, routing errors, body limits."""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import pytest
from fastapi import FastAPI

from herald.http.guards import has_control_characters, has_lone_surrogate, query_problems
from herald.http.server import header_section_has_control_character
from herald.workspaces.scopes import Scope
from tests.factories import Tenant, add_key

OFFERS = "/v5/offers"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class TestAuthentication:
    async def test_missing_credentials_is_401_er001_as_text_plain(self, client: httpx.AsyncClient) -> None:
        response = await client.get(OFFERS)
        assert response.status_code == 401
        assert response.headers["content-type"].startswith("text/plain")
        body = json.loads(response.text)
        assert body["code"] == "ER001"
        assert set(body) == {"code", "target", "message"}
        # RFC 9110 §11.6.1: a 401 names the scheme to authenticate with.
        assert response.headers["WWW-Authenticate"] == 'Basic realm="Herald", charset="UTF-8"'

    async def test_wrong_secret_is_401(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        response = await client.get(OFFERS, headers=_basic(tenant.workspace_id, tenant.secret + "x"))
        assert response.status_code == 401

    async def test_key_of_another_workspace_is_401(
        self, client: httpx.AsyncClient, tenant: Tenant, other_tenant: Tenant
    ) -> None:
        response = await client.get(OFFERS, headers=_basic(other_tenant.workspace_id, tenant.secret))
        assert response.status_code == 401

    async def test_not_basic_scheme_is_401(self, client: httpx.AsyncClient) -> None:
        response = await client.get(OFFERS, headers={"Authorization": "Bearer abc"})
        assert response.status_code == 401

    async def test_garbage_base64_is_401(self, client: httpx.AsyncClient) -> None:
        response = await client.get(OFFERS, headers={"Authorization": "Basic !!!"})
        assert response.status_code == 401

    async def test_missing_scope_is_403_er007_as_text_plain(
        self, app: FastAPI, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        writer_only = await add_key(app, tenant, [Scope.OFFERS_WRITE])
        response = await client.get(OFFERS, headers=writer_only.headers())
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("text/plain")
        assert json.loads(response.text)["code"] == "ER007"
        assert "WWW-Authenticate" not in response.headers  # authenticated: another key would not help

    async def test_valid_key_with_scope_is_admitted(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        response = await client.get(OFFERS, headers=tenant.headers())
        assert response.status_code == 200


class TestGatewayChecks:
    async def test_control_characters_in_headers_are_503_html(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        headers = [*tenant.headers().items(), ("X-Note", "a\x01b")]
        response = await client.get(OFFERS, headers=headers)
        assert response.status_code == 503
        assert response.headers["content-type"].startswith("text/html")

    async def test_request_id_is_echoed_and_used_in_response_id(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        generated = uuid.uuid4()
        # Echoed as written, in either case of hex the document's pattern allows.
        for request_id in (str(generated), str(generated).upper()):
            response = await client.get(OFFERS, headers={**tenant.headers(), "X-SVC-Request-Id": request_id})
            assert response.headers["X-SVC-Request-Id"] == request_id
            assert response.json()["response_id"] == f"resp_{request_id}"

    async def test_request_id_is_generated_when_absent(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.get(OFFERS, headers=tenant.headers())
        generated = response.headers["X-SVC-Request-Id"]
        assert uuid.UUID(generated).version == 4
        assert response.json()["response_id"] == f"resp_{generated}"

    async def test_request_id_that_is_not_a_uuid_is_400(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.get(OFFERS, headers={**tenant.headers(), "X-SVC-Request-Id": "nope"})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "VALIDATION_FAILED"
        assert error["details"][0] == {
            "code": "INVALID_TYPE",
            "target": "X-SVC-Request-Id",
            "message": "Not a UUID v4.",
        }

    @pytest.mark.parametrize(
        "request_id",
        [
            "0123456789ab4def8123456789abcdef",  # 32 bare digits
            "{01234567-89ab-4def-8123-456789abcdef}",
            "urn:uuid:01234567-89ab-4def-8123-456789abcdef",
            "urn:0123456789ab4def8123456789abcdef",  # 36 characters, as the hyphenated form
            "0123456789ab4def8123456789abcdef----",
            "01234567-89ab-4def-c123-456789abcdef",  # another variant
            "01234567-89ab-1def-8123-456789abcdef",  # another version
        ],
    )
    async def test_only_the_hyphenated_form_the_document_states_is_a_request_id(
        self, client: httpx.AsyncClient, tenant: Tenant, request_id: str
    ) -> None:
        response = await client.get(OFFERS, headers={**tenant.headers(), "X-SVC-Request-Id": request_id})
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["code"] == "INVALID_TYPE"
        assert response.headers["X-SVC-Request-Id"] != request_id  # a fresh id of ours
        assert response.json()["response_id"] == f"resp_{response.headers['X-SVC-Request-Id']}"

    async def test_credentials_are_judged_before_the_request_id(self, client: httpx.AsyncClient) -> None:
        response = await client.get(OFFERS, headers={"X-SVC-Request-Id": "nope"})
        assert response.status_code == 401

    async def test_unsupported_method_is_405_whatever_the_headers_and_body(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        headers = {**tenant.headers(), "X-SVC-Request-Id": "", "Content-Type": "text/plain"}
        for method in ("TRACE", "DELETE", "PUT"):
            response = await client.request(method, OFFERS, headers=headers, content=b"{not json")
            assert response.status_code == 405, (method, response.text)
            assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
            assert response.headers["allow"] == "GET, HEAD, POST"

    async def test_a_method_implemented_nowhere_is_501_before_the_path_or_credentials(
        self, client: httpx.AsyncClient
    ) -> None:
        for method, path in (("PROPFIND", OFFERS), ("PURGE", "/v5/nothing-here"), ("BREW", "/healthz")):
            response = await client.request(method, path)
            assert response.status_code == 501, (method, response.text)
            assert response.json()["error"]["code"] == "NOT_IMPLEMENTED"
            assert (
                response.json()["error"]["message"]
                == f"The method {method} is not implemented by this server."
            )
        # QUERY (a safe method with a body) is a method clients know: 405, naming the path's own.
        response = await client.request("QUERY", OFFERS)
        assert (response.status_code, response.headers["allow"]) == (405, "GET, HEAD, POST")

    async def test_405_names_the_methods_of_every_route_on_the_path(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.delete("/v5/campaigns/abc", headers=tenant.headers())
        assert response.status_code == 405
        assert response.headers["allow"] == "GET, HEAD, PATCH"

    async def test_405_on_a_literal_path_names_only_its_own_methods(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        # `/v5/campaigns/meta` also matches `/v5/campaigns/{campaign_id}`; the resource is the literal one.
        # GET, HEAD, PATCH too: the literal path's answer, not C2's 404 for a campaign "meta".
        for path in ("/v5/campaigns/meta", "/v5/campaigns/search", "/v5/campaigns/test"):
            for method in ("OPTIONS", "GET", "HEAD", "PATCH"):
                response = await client.request(method, path, headers=tenant.headers(campaigns=True))
                assert response.status_code == 405, (method, path)
                assert response.headers["allow"] == "POST", (method, path)

    async def test_unknown_route_is_404_envelope(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/v5/nothing-here")
        assert response.status_code == 404
        body = response.json()
        assert body["error"]["code"] == "NOT_FOUND"
        assert body["response_id"].startswith("resp_")
        assert body["error"]["doc_url"].endswith("/errors#NOT_FOUND")

    async def test_wrong_method_is_405_envelope(self, client: httpx.AsyncClient) -> None:
        response = await client.delete(OFFERS)
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


class TestBodies:
    async def test_oversize_body_is_413(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        body = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
        response = await client.post(
            OFFERS, content=body, headers={**tenant.write_headers(), "Content-Type": "application/json"}
        )
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"

    async def test_wrong_content_type_is_400_bad_request(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        response = await client.post(
            OFFERS, content=b"name=x", headers={**tenant.write_headers(), "Content-Type": "text/plain"}
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_deep_json_is_400(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        body = b'{"a":' * 40 + b"1" + b"}" * 40
        response = await client.post(
            OFFERS, content=body, headers={**tenant.write_headers(), "Content-Type": "application/json"}
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_nul_in_strings_is_400(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        response = await client.post(
            OFFERS,
            content=b'{"name": "a\\u0000b"}',
            headers={**tenant.write_headers(), "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_body_that_is_not_utf8_is_400(self, client: httpx.AsyncClient, tenant: Tenant) -> None:
        # ED A0 80 is a surrogate encoded as UTF-8: Python's JSON reader would let it through.
        for text in (b"\xff", b"\xed\xa0\x80"):
            response = await client.post(
                f"/v1/customer/{tenant.workspace_id}",
                content=b'{"type": "customer", "customer_id": "c1", "attributes": {"a": "' + text + b'"}}',
                headers={**tenant.headers(), "Content-Type": "application/json"},
            )
            assert response.status_code == 400
            assert response.json()["error"]["code"] == "BAD_REQUEST"

    @pytest.mark.parametrize(
        ("body", "target"),
        [
            (
                b'{"type": "customer", "customer_id": "c1", "attributes": {"first_name": "A\\ud800"}}',
                "attributes.first_name",
            ),
            (b'{"type": "customer", "customer_id": "c\\udfff", "attributes": {}}', "customer_id"),
            (
                b'{"type": "customer", "customer_id": "c1", "attributes": {"k\\ud83d": 1}}',
                "attributes.k\\ud83d",
            ),
        ],
    )
    async def test_lone_surrogate_escape_is_400_at_its_field(
        self, client: httpx.AsyncClient, tenant: Tenant, body: bytes, target: str
    ) -> None:
        response = await client.post(
            f"/v1/customer/{tenant.workspace_id}",
            content=body,
            headers={**tenant.headers(), "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "BAD_REQUEST"
        assert response.json()["error"]["target"] == target


@pytest.mark.parametrize(
    ("body", "lone"),
    [
        (rb'"\ud800"', True),
        (rb'"\udc00"', True),
        (rb'"\ude00\ud83d"', True),
        (rb'"\ud83d\ude00\ud83d"', True),
        (rb'"\ud800\n\udc00"', True),
        (rb'"\ud800x\udc00"', True),
        (rb'"\\\ud800"', True),
        (rb'"\ud83d\ude00"', False),
        (rb'"\uD83D\uDE00"', False),
        (rb'"\\ud800"', False),
        (rb'"\u00e9"', False),
    ],
)
def test_lone_surrogate_escapes_are_found(body: bytes, lone: bool) -> None:
    assert has_lone_surrogate(body) is lone


def test_control_characters_are_every_ascii_control_but_tab() -> None:
    for byte in range(256):
        control = (byte < 0x20 and byte != 0x09) or byte == 0x7F
        assert has_control_characters([(b"x-name", b"a" + bytes([byte]) + b"b")]) is control, byte
        assert has_control_characters([(b"x-" + bytes([byte]), b"value")]) is control, byte


class TestNonFiniteNumbers:
    async def test_nan_and_infinity_are_400_on_every_surface(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        for path, token in (("/v5/offers", b"NaN"), ("/v5/campaigns", b"-Infinity")):
            response = await client.post(
                path,
                content=b'{"priority": ' + token + b', "name": "NaN Infinity"}',
                headers={**tenant.write_headers(campaigns=True), "Content-Type": "application/json"},
            )
            assert response.status_code == 400
            assert response.json()["error"]["code"] == "BAD_REQUEST"

    async def test_the_words_inside_strings_are_fine(self) -> None:
        from herald.http.guards import has_non_finite_number

        assert not has_non_finite_number(b'{"name": "NaN Infinity"}')
        assert has_non_finite_number(b'{"a": [1, NaN]}')


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        (b"name_contains=a%00b", ["name_contains"]),
        (b"tags=a&tags=b%01", ["tags"]),
        (b"a%00b=1", ["a\x00b"]),
        (b"id=%ff&limit=2", ["id"]),
        (b"id=caf%C3", ["id"]),
        (b"q=a%09b", ["q"]),
        (b"q=a+b&r=%E2%98%83&&s=", []),
        (b"q=%zz", []),  # not an escape: read as the text it is
    ],
)
def test_query_problems_name_each_bad_parameter(query: bytes, refused: list[str]) -> None:
    assert [problem.target for problem in query_problems(query)] == refused


@pytest.mark.parametrize(
    ("head", "control"),
    [
        (b"GET / HTTP/1.1\r\nX-A: a\x01b\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nX-A: a\nb\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nX-\x7f: ab\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nX-A: a\tb\r\n\r\n", False),
        (b"GET / HTTP/1.1\r\nX-A: ab\r", False),  # half a line end, the rest not yet received
        (b"GET /\x01 HTTP/1.1\r\nX-A: ab\r\n\r\n", False),  # a malformed request line
        (b"GET / HTTP/1.1\nX-A: a\x01b\n\n", False),  # no CRLF: it is all one malformed line
        (b"GET / HTTP/1.1\r\nX-A: ab\r\n\r\n\x01body", False),  # after the head
    ],
)
def test_header_section_control_characters(head: bytes, control: bool) -> None:
    assert header_section_has_control_character(head) is control
