"""The routes that document the API: `/openapi.json`, `/docs`, `/redoc` and the error catalog `/errors`.

Served by Herald rather than by FastAPI's defaults so that the document's `servers` names the address
the reader used (or `HERALD_BASE_URL`): the document itself is built once per process. Both the
document and the catalog name the headers with the deployment's token (`HERALD_HEADER_TOKEN`).
The pages' scripts, styles and icon are served by Herald too (`/docs/assets`, from the
fastapi-offline package): a self-hosted deployment's pages load nothing from a CDN.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from herald.errors import NotFound
from herald.http import base_url, error_catalog

OPENAPI_URL = "/openapi.json"
ASSETS_URL = "/docs/assets"
# The pages may load nothing from elsewhere: the ReDoc bundle's footer links an image on its
# maker's CDN, which the reader's browser fetched (telling a third party the page was read). Their
# own inline script and styles, and the workers and images ReDoc makes in the page, stay allowed.
# "Try it out" reads the API at the page's own origin, or at `HERALD_BASE_URL`'s.
_PAGE_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'{api}"
)
# The assets change with Herald's dependencies only: a day in the reader's cache, then revalidated
# by their ETag (304 while unchanged).
_CACHE_CONTROL = "public, max-age=86400"
# The files the pages link to, by name: nothing else of the package's directory is served.
_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}


def install(app: FastAPI) -> None:
    settings = app.state.herald.settings
    error_page = settings.with_header_names(error_catalog.PAGE)
    policy = {"Content-Security-Policy": _page_policy(settings.base_url)}

    def policed(page: HTMLResponse) -> HTMLResponse:
        page.headers.update(policy)
        return page

    @app.get(OPENAPI_URL, include_in_schema=False)
    async def openapi_document(request: Request) -> JSONResponse:
        document: dict[str, Any] = app.openapi()
        server = {"url": base_url.of_request(settings.base_url, request.scope)}
        return JSONResponse({**document, "servers": [server]})

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return policed(
            get_swagger_ui_html(
                openapi_url=OPENAPI_URL,
                title=f"{app.title} - docs",
                swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            )
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return policed(
            get_redoc_html(
                openapi_url=OPENAPI_URL,
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )

    @app.get(ASSETS_URL + "/{name}", include_in_schema=False)
    async def docs_asset(name: str, request: Request) -> Response:
        if name not in _ASSETS:
            raise NotFound()
        return _asset(name).response(request)

    @app.get("/errors", include_in_schema=False)
    async def errors() -> HTMLResponse:
        return HTMLResponse(error_page)


@dataclass(frozen=True)
class _Asset:
    """One of the pages' files, read once per process: as it is, and gzipped for the readers that
    take it (the Swagger UI bundle goes from 1.4 MB to under 0.4 MB)."""

    media_type: str
    body: bytes
    gzipped: bytes
    etag: str

    def response(self, request: Request) -> Response:
        gzip_taken = _takes_gzip(request.headers.get("accept-encoding", ""))
        # One ETag per representation: a cache holding the gzipped bytes revalidates those.
        etag = f'"{self.etag}-gzip"' if gzip_taken else f'"{self.etag}"'
        headers = {"Cache-Control": _CACHE_CONTROL, "ETag": etag, "Vary": "Accept-Encoding"}
        if _matches(request.headers.get("if-none-match"), etag):
            return Response(status_code=304, headers=headers)
        if gzip_taken:
            headers["Content-Encoding"] = "gzip"
            return Response(self.gzipped, media_type=self.media_type, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


@functools.cache
def _asset(name: str) -> _Asset:
    body = (files("fastapi_offline") / "static" / name).read_bytes()
    digest = hashlib.sha256(body).hexdigest()[:32]
    return _Asset(_ASSETS[name], body, gzip.compress(body, mtime=0), digest)


def _takes_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding takes gzip: named, or `*`, with a quality above 0 (RFC 9110
    §12.5.3: `gzip;q=0` refuses it)."""
    qualities: dict[str, float] = {}
    for item in accept_encoding.lower().split(","):
        coding, _, parameters = item.partition(";")
        quality = 1.0
        for parameter in parameters.split(";"):
            name, _, value = parameter.strip().partition("=")
            if name == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        qualities[coding.strip()] = quality
    return qualities.get("gzip", qualities.get("x-gzip", qualities.get("*", 0.0))) > 0


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an If-None-Match names `etag` (weakly compared, as RFC 9110 asks of it) or is `*`."""
    if not if_none_match:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)


def _page_policy(base_url: str | None) -> str:
    if not base_url:
        return _PAGE_POLICY.format(api="")
    parts = urlsplit(base_url)
    return _PAGE_POLICY.format(api=f" {parts.scheme}://{parts.netloc}")
