"""The routes that document the API: `/openapi.json`, `/docs`, `/redoc` and the error catalog `/errors`.

Served by Herald rather than by FastAPI's defaults so that the document's `servers` names the address
the reader used (or `HERALD_BASE_URL`): the document itself is built once per process. Both the
document and the catalog name the headers with the deployment's token (`HERALD_HEADER_TOKEN`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse

from herald.http import base_url, error_catalog

OPENAPI_URL = "/openapi.json"


def install(app: FastAPI) -> None:
    settings = app.state.herald.settings
    error_page = settings.with_header_names(error_catalog.PAGE)

    @app.get(OPENAPI_URL, include_in_schema=False)
    async def openapi_document(request: Request) -> JSONResponse:
        document: dict[str, Any] = app.openapi()
        server = {"url": base_url.of_request(settings.base_url, request.scope)}
        return JSONResponse({**document, "servers": [server]})

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{app.title} - docs")

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=OPENAPI_URL, title=f"{app.title} - ReDoc")

    @app.get("/errors", include_in_schema=False)
    async def errors() -> HTMLResponse:
        return HTMLResponse(error_page)
