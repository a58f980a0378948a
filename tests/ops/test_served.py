"""Operating a served process: /metrics, request logs, /readyz, and a SIGTERM that drains.

Each test talks HTTP to a real `herald serve` process on loopback (the test database of the run:
SQLite, or PostgreSQL + Redis when HERALD_TEST_* are set) and reads its stderr log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from fastapi import FastAPI

from herald import migrate as migrations
from herald.delivery.config import ConnectorInput
from tests.delivery.builders import CAMPAIGNS, TEST_PATH, inline_email
from tests.delivery.servers import MailSink, SmtpServer, free_port, start_smtp
from tests.factories import Tenant, add_connector
from tests.offers.builders import OFFERS, offer_body
from tests.ops.served import access_lines, json_lines, log_lines, server_env, tenant, value
from tests.personalization.helpers import PREVIEW, add_resources, add_user, push_body
from tests.system.cluster import Server, serve

OPEN = {"campaign_create": "1000/second", "campaign_ops": "1000/second", "preview": "1000/second"}


@dataclass
class Served:
    server: Server
    log: Path
    tenant: Tenant
    smtp: SmtpServer
    postgres: bool

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(f"{self.server.url}{path}", timeout=30, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(f"{self.server.url}{path}", timeout=30, **kwargs)


def _smtp_connector(smtp: SmtpServer) -> Any:
    async def setup(app: FastAPI, made: Tenant) -> None:
        await add_connector(
            app,
            made,
            ConnectorInput("mail", "CUSTOM_SMTP", host="127.0.0.1", port=smtp.port, security="none"),
        )
        await add_user(app, made, "u1", email="ana@example.com", push_id="push-1")
        # Loopback without allow_private: refused, and the refusal is logged during the preview.
        await add_resources(app, made, apis={"weather": {"url": f"http://127.0.0.1:{free_port()}/w"}})

    return setup


@pytest.fixture(scope="module")
def served(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    smtp = start_smtp()
    made = tenant(database_url, rate_limits=OPEN, setup=_smtp_connector(smtp))
    log = tmp_path_factory.mktemp("served") / "stderr.log"
    with log.open("wb") as stderr:
        server = serve(server_env(database_url, log_format="json"), workers=1, stderr=stderr)
    try:
        yield Served(server, log, made, smtp, database_url.startswith("postgresql"))
    finally:
        server.kill()
        smtp.controller.stop()


def _request_id() -> str:
    return str(uuid.uuid4())


class TestMetrics:
    def test_requests_are_counted_by_route_template_and_status(self, served: Served) -> None:
        headers = served.tenant.headers()
        for _ in range(3):
            assert served.get(OFFERS, headers=headers).status_code == 200
        campaign_headers = served.tenant.headers(campaigns=True)
        assert served.get(f"{CAMPAIGNS}/{'0' * 24}", headers=campaign_headers).status_code == 404
        assert served.get(OFFERS).status_code == 401
        assert served.get("/no/such/route").status_code == 404

        text = served.get("/metrics").text
        assert value(text, "herald_http_requests_total", method="GET", route="/v5/offers", status="200") >= 3
        assert (
            value(text, "herald_http_requests_total", route="/v5/campaigns/{campaign_id}", status="404") >= 1
        )
        assert value(text, "herald_http_requests_total", route="/v5/offers", status="401") >= 1
        assert value(text, "herald_http_requests_total", route="unmatched", status="404") >= 1
        # Raw paths never become labels.
        assert "0" * 24 not in text
        assert (
            value(text, "herald_http_request_duration_seconds_count", method="GET", route="/v5/offers") >= 3
        )
        assert value(text, "herald_http_request_duration_seconds_bucket", route="/v5/offers", le="+Inf") >= 3

    def test_rate_limit_refusals_are_counted_by_bucket(self, served: Served, database_url: str) -> None:
        limited = tenant(database_url, rate_limits={"offers_read": "2/minute"})
        before = value(served.get("/metrics").text, "herald_rate_limit_refusals_total", bucket="offers_read")
        statuses = [served.get(OFFERS, headers=limited.headers()).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        after = value(served.get("/metrics").text, "herald_rate_limit_refusals_total", bucket="offers_read")
        assert after == before + 1

    def test_idempotent_replays_are_counted(self, served: Served) -> None:
        headers = served.tenant.write_headers()
        body = offer_body(datetime.now(UTC), f"Replay_{uuid.uuid4().hex[:8]}")
        first = served.post(OFFERS, json=body, headers=headers)
        again = served.post(OFFERS, json=body, headers=headers)
        assert (first.status_code, again.status_code) == (201, 201)
        assert again.headers["Idempotent-Replayed"] == "true"
        text = served.get("/metrics").text
        assert value(text, "herald_idempotent_replays_total", method="POST", route="/v5/offers") >= 1

    def test_sends_queue_depth_and_pool_are_shown(self, served: Served) -> None:
        text = served.get("/metrics").text
        sent_before = value(text, "herald_sends_total", status="SENT")
        response = served.post(
            TEST_PATH,
            json=inline_email("EMAIL", "ana@example.com"),
            headers=served.tenant.write_headers(campaigns=True),
        )
        assert response.status_code == 200, response.text
        assert len(served.smtp.received) >= 1
        text = served.get("/metrics").text
        assert value(text, "herald_sends_total", status="SENT") == sent_before + 1
        assert [
            name for name in ("herald_worker_due_transitions", "herald_outbox_pending") if name not in text
        ] == []
        assert value(text, "herald_db_pool_size", pool="write") > 0
        assert "herald_db_pool_checked_out" in text
        if served.postgres:  # the driver's own pool (reads on the driver: the test send's, O1's)
            assert value(text, "herald_db_pool_size", pool="direct") > 0
            assert value(text, "herald_db_pool_checked_out", pool="direct") == 0  # each given back

    def test_metrics_and_probes_need_no_credentials_and_are_documented(self, served: Served) -> None:
        response = served.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        paths = served.get("/openapi.json").json()["paths"]
        assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
        assert set(paths["/readyz"]["get"]["responses"]) >= {"200", "503"}
        assert "/healthz" in paths

    @pytest.mark.parametrize("page", ["/docs", "/redoc"])
    def test_documentation_pages_load_nothing_from_elsewhere(self, served: Served, page: str) -> None:
        # A self-hosted deployment may have no way out (an air-gapped network), and a reader's
        # visit is nobody else's business: every script, style and icon comes from Herald.
        answer = served.get(page)
        html = answer.text
        # The browser is told so too: the ReDoc bundle's footer links an image on its maker's CDN.
        policy = answer.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy
        assert "img-src 'self' data:;" in policy
        assert "http" not in policy
        linked = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
        assert linked
        assert all(url.startswith("/") and not url.startswith("//") for url in linked), linked
        assert "https://" not in html
        assert "http://" not in html.replace("http://www.w3.org", "")
        for url in linked:
            response = served.get(url)
            assert response.status_code == 200, url
            assert response.headers["content-type"].split(";")[0] in {
                "text/javascript",
                "application/javascript",
                "text/css",
                "image/png",
            }, url
        # Only the files the pages link to: nothing else of the package's directory.
        for other in ("/docs/assets/__init__.py", "/docs/assets/..%2Fcore.py", "/docs/assets/"):
            assert served.get(other).status_code == 404, other

    @pytest.mark.parametrize("encoding", ["gzip", "identity"])
    def test_documentation_assets_are_compressed_and_revalidated(self, served: Served, encoding: str) -> None:
        # The Swagger UI bundle is 1.4 MB: a reader taking gzip gets it compressed, and a cached
        # copy is revalidated by its ETag without sending it again.
        url = "/docs/assets/swagger-ui-bundle.js"
        plain = served.get(url, headers={"Accept-Encoding": "identity"})
        first = served.get(url, headers={"Accept-Encoding": encoding})
        assert first.status_code == 200
        assert first.content == plain.content  # httpx undoes the gzip
        assert first.headers.get("content-encoding") == (encoding if encoding == "gzip" else None)
        if encoding == "gzip":
            assert int(first.headers["content-length"]) < len(plain.content) / 2
        assert "Accept-Encoding" in first.headers["vary"]
        etag = first.headers["etag"]
        again = served.get(url, headers={"Accept-Encoding": encoding, "If-None-Match": f'"other", W/{etag}'})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["etag"] == etag
        assert "max-age" in again.headers["cache-control"]
        changed = served.get(url, headers={"Accept-Encoding": encoding, "If-None-Match": '"other"'})
        assert changed.status_code == 200
        assert changed.content == plain.content

    @pytest.mark.parametrize("refusing", ["gzip;q=0, identity", "identity, gzip;q=0", "*;q=0, identity"])
    def test_a_reader_refusing_gzip_gets_the_asset_as_it_is(self, served: Served, refusing: str) -> None:
        answer = served.get("/docs/assets/swagger-ui.css", headers={"Accept-Encoding": refusing})
        assert answer.status_code == 200
        assert "content-encoding" not in answer.headers


class TestLogs:
    def test_each_request_has_one_json_line_with_route_status_workspace_and_request_id(
        self, served: Served
    ) -> None:
        request_id = _request_id()
        headers = {**served.tenant.headers(campaigns=True), "X-SVC-Request-Id": request_id}
        response = served.get(f"{CAMPAIGNS}/{'1' * 24}", headers=headers)
        assert response.status_code == 404

        lines = json_lines(served.log)  # every line of the log parses as JSON
        [line] = access_lines(lines, request_id)  # one line per request: uvicorn's own is off
        assert {key: line[key] for key in ("method", "route", "status", "workspace_id")} == {
            "method": "GET",
            "route": "/v5/campaigns/{campaign_id}",
            "status": 404,
            "workspace_id": served.tenant.workspace_id,
        }
        assert line["duration_ms"] >= 0
        assert [entry for entry in lines if entry["logger"] == "uvicorn.access"] == []

    def test_a_request_without_an_id_is_logged_with_the_id_it_was_answered_with(self, served: Served) -> None:
        response = served.get("/healthz")
        [line] = access_lines(json_lines(served.log), response.headers["X-SVC-Request-Id"])
        assert (line["route"], line["status"], line["workspace_id"]) == ("/healthz", 200, None)

    def test_lines_written_while_serving_a_request_carry_its_request_id(self, served: Served) -> None:
        request_id = _request_id()
        body = push_body({"android": {"title": "[{{ ContentApi['weather'].summary }}]", "message": "m"}})
        headers = {**served.tenant.headers(campaigns=True), "X-SVC-Request-Id": request_id}
        assert served.post(PREVIEW, json=body, headers=headers).status_code == 200

        during = [line for line in json_lines(served.log) if line["logger"] == "herald.personalization"]
        assert [line["request_id"] for line in during if "weather" in line["message"]][-1:] == [request_id]


class TestReadiness:
    def test_ready_when_the_database_is_at_head(self, served: Served) -> None:
        response = served.get("/readyz")
        assert response.status_code == 200
        assert response.json()["checks"]["database"] == "ok"
        assert response.json()["checks"]["migrations"] == "ok"
        assert served.get("/healthz").json() == {"status": "ok"}

    def test_not_ready_on_a_database_a_newer_release_migrated_and_says_so(self, tmp_path: Path) -> None:
        """Its advice is the newer release, not `herald migrate`: this release's cannot go there."""
        path = tmp_path / "ahead.db"
        migrations.upgrade(f"sqlite+aiosqlite:///{path}")
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            connection.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_release'")
        with (tmp_path / "stderr.log").open("wb") as stderr:
            server = serve(
                server_env(f"sqlite+aiosqlite:///{path}"), workers=1, stderr=stderr, probe="/healthz"
            )
        try:
            response = httpx.get(f"{server.url}/readyz", timeout=30)
        finally:
            server.kill()
        assert response.status_code == 503
        found = response.json()["checks"]["migrations"]
        assert found.startswith("at 9999_from_a_newer_release, newer than this release's head ")
        assert "run the newer release" in found
        assert "herald migrate" not in found

    def test_not_ready_off_head_or_without_redis_and_no_metrics_when_off(self, tmp_path: Path) -> None:
        empty = tmp_path / "empty.db"
        empty.touch()
        env = server_env(
            f"sqlite+aiosqlite:///{empty}", redis_url=f"redis://127.0.0.1:{free_port()}/0", metrics="off"
        )
        with (tmp_path / "stderr.log").open("wb") as stderr:
            server = serve(env, workers=1, stderr=stderr, probe="/healthz")
        try:
            response = httpx.get(f"{server.url}/readyz", timeout=30)
            assert response.status_code == 503
            body = response.json()
            assert (body["status"], body["failed"]) == ("unavailable", ["migrations", "redis"])
            assert body["checks"]["database"] == "ok"
            assert httpx.get(f"{server.url}/metrics", timeout=30).status_code == 404
            assert "/metrics" not in httpx.get(f"{server.url}/openapi.json", timeout=30).json()["paths"]
        finally:
            server.kill()
        # The text format: readable key=value lines, with the request id.
        [line] = [line for line in log_lines(tmp_path / "stderr.log") if "route=/readyz" in line]
        assert "method=GET" in line
        assert "status=503" in line
        assert f"request_id={response.headers['X-SVC-Request-Id']}" in line


@dataclass
class HeldSink(MailSink):
    """Holds each message until the test releases it, telling the test when one arrived."""

    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.arrived.set()
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 60)
        return await super().handle_DATA(server, session, envelope)


@contextlib.contextmanager
def _test_send_held_then_sigterm(
    database_url: str, tmp_path: Path, **env: str
) -> Iterator[tuple[Server, HeldSink, Callable[[], httpx.Response]]]:
    """A served process (its settings and `env`) whose test send is held at the SMTP server, then
    sent SIGTERM: the process, the sink (whose `release` lets the mail through) and the answer."""
    sink = HeldSink()
    port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    held = SmtpServer("127.0.0.1", port, sink, controller)
    made = tenant(database_url, rate_limits=OPEN, setup=_smtp_connector(held))
    with (tmp_path / "stderr.log").open("wb") as stderr:
        server = serve({**server_env(database_url), **env}, workers=1, stderr=stderr)
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                httpx.post,
                f"{server.url}{TEST_PATH}",
                json=inline_email("EMAIL", "ana@example.com"),
                headers=made.write_headers(campaigns=True),
                timeout=60,
            )
            assert sink.arrived.wait(60), "the test send never reached the SMTP server"
            os.kill(server.process.pid, signal.SIGTERM)
            yield server, sink, lambda: answer.result(timeout=60)
    finally:
        sink.release.set()
        server.kill()
        controller.stop()


def test_sigterm_lets_the_request_in_flight_finish_then_exits_0(database_url: str, tmp_path: Path) -> None:
    with _test_send_held_then_sigterm(database_url, tmp_path) as (server, sink, answer):
        # The server stops listening but keeps serving the request in flight.
        sink.release.set()
        response = answer()
        assert response.status_code == 200, response.text
        assert response.json()["data"]["data"] == {"EMAIL_default_variation_1": {"status": "SENT"}}
        assert server.process.wait(timeout=60) == 0
        assert len(sink.received) == 1


def test_a_request_still_in_flight_when_the_shutdown_time_ends_is_answered_503(
    database_url: str, tmp_path: Path
) -> None:
    # Past HERALD_SHUTDOWN_TIMEOUT_SECONDS the server cancels what is in flight: the client got
    # the server's bare "500 Internal Server Error" (text/plain, no request id), which says the
    # request met a defect; it is told to retry, in the envelope.
    settings = {"HERALD_SHUTDOWN_TIMEOUT_SECONDS": "1"}
    with _test_send_held_then_sigterm(database_url, tmp_path, **settings) as (server, _, answer):
        response = answer()
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert response.json()["response_id"] == f"resp_{response.headers['X-SVC-Request-Id']}"
        assert response.headers["connection"] == "close"
        assert server.process.wait(timeout=60) == 0
