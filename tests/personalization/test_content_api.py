"""Content APIs: called only as configured, against a real local receiver; private targets refused."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI

from herald.personalization import content_api
from herald.personalization.content_api import ApiConfig, FetchFailed, is_public, url_problems
from herald.workspaces.service import AdminError
from tests.factories import Tenant
from tests.personalization.helpers import add_resources, add_user, render_title, title_of

TITLE_PATH = "campaign_content.content.push.android.basic_details.title"


@dataclass
class Receiver:
    base: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:  # keep test output clean
            pass

        def _send(
            self, status: int, body: bytes, content_type: str = "application/json", **headers: str
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            receiver.requests.append(
                {"path": url.path, "query": parse_qs(url.query), "headers": dict(self.headers)}
            )
            if url.path == "/weather":
                city = parse_qs(url.query).get("city", ["?"])[0]
                self._send(
                    200, json.dumps({"summary": "Sunny", "city": city, "days": [{"high": 21}]}).encode()
                )
            elif url.path == "/nulls":
                self._send(200, json.dumps({"summary": None, "days": [1, 2], "sunny": True}).encode())
            elif url.path == "/redirect":
                self._send(302, b"", Location=f"{receiver.base}/weather")
            elif url.path == "/html":
                self._send(200, b"<html>not json</html>", "text/html")
            elif url.path == "/big":
                self._send(200, json.dumps({"blob": "x" * 300_000}).encode())
            elif url.path == "/error":
                self._send(500, b'{"error": "boom"}')
            elif url.path == "/slow":
                receiver.release.wait(10)
                self._send(200, b"{}")
            else:
                self._send(404, b"{}")

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    state = Receiver(base=f"http://127.0.0.1:{port}")
    server.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()
    thread.join()


async def _api(app: FastAPI, tenant: Tenant, url: str, **options: Any) -> None:
    await add_resources(app, tenant, apis={"weather": {"url": url, **options}})


class TestAllowedReceiver:
    async def test_answer_fields_are_rendered(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await _api(
            app, workspace, f"{receiver.base}/weather", allow_private=True, headers={"X-Api-Key": "k1"}
        )
        response = await render_title(
            client, workspace, "{{ ContentApi['weather'].summary }} {{ ContentApi['weather'].days[0].high }}"
        )
        assert response.status_code == 200, response.text
        assert title_of(response) == "Sunny 21"
        assert response.json()["data"]["missing"] == []
        assert len(receiver.requests) == 1
        assert receiver.requests[0]["headers"]["X-Api-Key"] == "k1"

    async def test_the_url_is_personalized_and_values_are_encoded(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await add_user(app, workspace, "u2", city="São Paulo/../admin?x=1&y")
        await _api(app, workspace, f"{receiver.base}/weather?city={{{{ user.city }}}}", allow_private=True)
        response = await render_title(client, workspace, "{{ ContentApi['weather'].city }}", user="u2")
        assert title_of(response) == "São Paulo/../admin?x=1&y"
        assert receiver.requests[0]["path"] == "/weather"
        assert receiver.requests[0]["query"] == {"city": ["São Paulo/../admin?x=1&y"]}

    async def test_a_missing_field_of_the_answer_is_reported(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await _api(app, workspace, f"{receiver.base}/weather", allow_private=True)
        response = await render_title(client, workspace, "{{ ContentApi['weather'].wind }}")
        assert response.json()["data"]["missing"] == [
            {"field": TITLE_PATH, "expression": "ContentApi['weather'].wind"}
        ]

    async def test_a_null_field_of_the_answer_is_reported_and_values_read_as_json(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await _api(app, workspace, f"{receiver.base}/nulls", allow_private=True)
        template = "[{{ ContentApi['weather'].summary }}|{{ ContentApi['weather'].days }}|{{ ContentApi['weather'].sunny }}]"
        response = await render_title(client, workspace, template)
        assert title_of(response) == "[|[1,2]|true]"
        assert response.json()["data"]["missing"] == [
            {"field": TITLE_PATH, "expression": "ContentApi['weather'].summary"}
        ]

    async def test_the_api_is_called_once_per_preview_however_often_it_is_used(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await _api(app, workspace, f"{receiver.base}/weather", allow_private=True)
        template = "{{ ContentApi['weather'].summary }}{{ ContentApi['weather'].city }}"
        response = await render_title(client, workspace, template)
        assert response.status_code == 200
        assert len(receiver.requests) == 1

    async def test_an_unused_api_is_not_called(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await _api(app, workspace, f"{receiver.base}/weather", allow_private=True)
        await render_title(client, workspace, "{{ user.first_name }}")
        assert receiver.requests == []

    @pytest.mark.parametrize("path", ["/redirect", "/html", "/big", "/error", "/missing"])
    async def test_an_unusable_answer_leaves_the_value_missing(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver, path: str
    ) -> None:
        await _api(app, workspace, f"{receiver.base}{path}", allow_private=True)
        response = await render_title(client, workspace, "[{{ ContentApi['weather'].summary }}]")
        assert response.status_code == 200, response.text
        assert title_of(response) == "[]"
        assert response.json()["data"]["missing"] == [
            {"field": TITLE_PATH, "expression": "ContentApi['weather']"}
        ]
        # A redirect is not followed: the receiver saw one request, not a second one to /weather.
        assert [request["path"] for request in receiver.requests] == [path]

    async def test_a_slow_api_times_out_and_leaves_the_value_missing(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver
    ) -> None:
        await _api(app, workspace, f"{receiver.base}/slow", allow_private=True, timeout_seconds=0.2)
        response = await render_title(client, workspace, "[{{ ContentApi['weather'].summary }}]")
        assert response.status_code == 200
        assert title_of(response) == "[]"


class TestPrivateTargets:
    @pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
    async def test_loopback_is_refused_without_allow_private(
        self, app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, receiver: Receiver, host: str
    ) -> None:
        await _api(app, workspace, receiver.base.replace("127.0.0.1", host) + "/weather")
        response = await render_title(client, workspace, "[{{ ContentApi['weather'].summary }}]")
        assert response.status_code == 200
        assert title_of(response) == "[]"
        assert response.json()["data"]["missing"] == [
            {"field": TITLE_PATH, "expression": "ContentApi['weather']"}
        ]
        assert receiver.requests == []

    @pytest.mark.parametrize(
        ("address", "public"),
        [
            ("8.8.8.8", True),
            ("2001:4860:4860::8888", True),
            ("127.0.0.1", False),
            ("10.1.2.3", False),
            ("172.16.0.1", False),
            ("192.168.1.1", False),
            ("169.254.169.254", False),
            ("100.64.0.1", False),
            ("0.0.0.0", False),
            ("240.0.0.1", False),
            ("224.0.0.1", False),
            ("255.255.255.255", False),
            ("::1", False),
            ("::", False),
            ("fe80::1", False),
            ("fc00::1", False),
            ("::ffff:127.0.0.1", False),
            ("::ffff:10.0.0.1", False),
            ("2002:7f00:1::1", False),
            ("ff02::1", False),
        ],
    )
    def test_only_global_unicast_addresses_are_public(self, address: str, public: bool) -> None:
        assert is_public(ipaddress.ip_address(address)) is public

    async def test_a_host_with_any_private_address_is_refused(self) -> None:
        async def resolver(_host: str, _port: int) -> list[str]:
            return ["93.184.216.34", "10.0.0.7"]

        api = ApiConfig("x", "https://api.example.com/v1", {}, 1.0)
        with pytest.raises(FetchFailed, match=r"10\.0\.0\.7"):
            await content_api.fetch(api, api.url, resolver)

    async def test_the_request_goes_to_the_checked_address_with_the_original_host(self) -> None:
        seen: list[httpx.Request] = []

        def answer(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, json={"ok": True})

        async def resolver(_host: str, _port: int) -> list[str]:
            return ["93.184.216.34"]

        api = ApiConfig("x", "https://api.example.com:8443/v1?q=1", {"Authorization": "Bearer t"}, 1.0)
        assert await content_api.fetch(api, api.url, resolver, httpx.MockTransport(answer)) == {"ok": True}
        request = seen[0]
        assert str(request.url) == "https://93.184.216.34:8443/v1?q=1"
        assert request.headers["Host"] == "api.example.com:8443"
        assert request.headers["Authorization"] == "Bearer t"
        assert request.extensions["sni_hostname"] == "api.example.com"


class TestConfiguration:
    @pytest.mark.parametrize(
        ("url", "ok"),
        [
            ("https://api.example.com/weather?city={{ user.city }}", True),
            ("http://127.0.0.1:8080/x", True),
            ("https://{{ user.host }}/x", False),
            ("https://api.{{ user.x }}.com/x", False),
            ("https://user:{{ user.password }}@api.example.com/", False),
            ("ftp://example.com/x", False),
            ("file:///etc/passwd", False),
            ("example.com/x", False),
            ("https:///x", False),
        ],
    )
    def test_url_host_must_be_literal_http(self, url: str, ok: bool) -> None:
        assert (url_problems(url) == []) is ok

    @pytest.mark.parametrize(
        "options",
        [
            {"url": "https://{{ user.host }}/x"},
            {"url": "https://example.com/x", "timeout_seconds": 6},
            {"url": "https://example.com/x", "timeout_seconds": 0},
            {"url": "https://example.com/x", "method": "POST"},
            {"url": "https://example.com/{{ user.x"},
        ],
    )
    async def test_bad_configurations_are_refused(
        self, app: FastAPI, workspace: Tenant, options: dict[str, Any]
    ) -> None:
        with pytest.raises(AdminError):
            await _api(app, workspace, **options)
