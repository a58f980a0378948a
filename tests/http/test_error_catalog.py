"""`GET /errors`: the catalog every `doc_url` points into, generated from `herald.codes`; and `doc_url`
names the address the request came to unless HERALD_BASE_URL is set."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from herald import errors
from herald.codes import BY_CODE, CODES
from herald.config import Settings
from herald.main import create_app
from tests.factories import Tenant, make_tenant

SOURCE = Path(__file__).parents[2] / "src" / "herald"
_CODE = r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*|ER\d{3})"'
# Every way the source names a code: a problem or custom Pydantic error, a gateway refusal, an error
# class's `code` (alone or in a tuple assignment with status and message), a code set on an error.
USES = [
    re.compile(r"\b(?:Problem|PydanticCustomError|GatewayRefusal)\(\s*(?:\d+,\s*)?" + _CODE),
    re.compile(r"\bcode\s*(?:,\s*\w+\s*)*=\s*(?:\d+\s*,\s*)?" + _CODE),
    re.compile(r"\.code\s*=\s*[\w.]+\s*,\s*" + _CODE),
]


# `Replay` rides the error path to send a stored answer again; its code never reaches a client.
NOT_ANSWERED = {"REPLAY"}


def codes_used_in_source() -> set[str]:
    found: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        text = path.read_text()
        for pattern in USES:
            found |= {match.group(1) for match in pattern.finditer(text)}
    return found - NOT_ANSWERED


def error_classes(base: type[errors.HeraldError] = errors.HeraldError) -> list[type[errors.HeraldError]]:
    classes = [base]
    for subclass in base.__subclasses__():
        classes += error_classes(subclass)
    return classes


def test_every_code_the_source_uses_is_in_the_catalog() -> None:
    used = codes_used_in_source()
    assert {"ER001", "ER007", "VALIDATION_FAILED", "NOT_EDITABLE", "CONFLICT", "HTTP_ERROR"} <= used
    assert used - set(BY_CODE) == set()


def test_error_classes_agree_with_the_catalog() -> None:
    for cls in error_classes():
        if ("code" in vars(cls) or cls is errors.HeraldError) and cls.code not in NOT_ANSWERED:
            entry = BY_CODE[cls.code]
            assert (entry.kind, entry.status) == ("error", cls.status), cls


def test_each_code_is_listed_once_with_a_meaning() -> None:
    assert len(BY_CODE) == len(CODES)
    for entry in CODES:
        assert entry.meaning
        assert 400 <= entry.status < 600
        assert (entry.kind == "detail") == bool(entry.within), entry.code
        for within in filter(None, (part.strip() for part in entry.within.split(","))):
            assert BY_CODE[within].kind == "error"


async def test_the_catalog_page_has_an_anchor_per_code(client: httpx.AsyncClient) -> None:
    response = await client.get("/errors")  # no credentials: it is documentation
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    anchors = set(re.findall(r'<section id="([A-Z0-9_]+)"', response.text))
    assert anchors == set(BY_CODE)
    section = response.text.split('<section id="OFFER_NOT_FOUND">')[1].split("</section>")[0]
    assert "404" in section
    assert "No offering with this id" in section
    assert "&quot;doc_url&quot;" in section


async def test_the_catalog_names_the_configured_header_token(settings: Settings) -> None:
    app = create_app(dataclasses.replace(settings, header_token="ACME"))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as reader:
            response = await reader.get("/errors")
    finally:
        await app.state.herald.aclose()
    assert response.status_code == 200
    assert "or ACME-APPKEY is not the Basic username" in response.text
    assert "SVC" not in response.text


@pytest.fixture
async def unset_app(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(dataclasses.replace(settings, base_url=None))
    yield app
    await app.state.herald.aclose()


async def _not_found(app: FastAPI, tenant: Tenant, base_url: str) -> dict[str, str]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as reader:
        response = await reader.patch(
            "/v5/offers/offer_0123456789abcdef01234567",
            json={"updated_by": "a@example.com"},
            headers=tenant.write_headers(),
        )
    assert response.status_code == 404, response.text
    error: dict[str, str] = response.json()["error"]
    return error


async def test_doc_url_names_the_host_the_request_came_to(unset_app: FastAPI) -> None:
    tenant = await make_tenant(unset_app)
    error = await _not_found(unset_app, tenant, "http://herald.test:8123")
    assert error["doc_url"] == "http://herald.test:8123/errors#OFFER_NOT_FOUND"


async def test_doc_url_uses_the_configured_base_url(app: FastAPI, tenant: Tenant) -> None:
    error = await _not_found(app, tenant, "http://herald.test:8123")
    assert error["doc_url"] == "http://testserver/errors#OFFER_NOT_FOUND"  # the settings' base_url


async def test_middleware_refusals_name_the_request_host_too(unset_app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=unset_app)
    async with httpx.AsyncClient(transport=transport, base_url="https://herald.test:8443") as reader:
        response = await reader.post("/v5/offers", content=b"x" * (2 * 1024 * 1024))
    assert response.status_code == 413
    assert response.json()["error"]["doc_url"] == "https://herald.test:8443/errors#PAYLOAD_TOO_LARGE"
