"""Authentication and scopes: Basic credentials, the app-key header, gateway-style refusals."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request

from herald.control_characters import has_control_character
from herald.workspaces import credentials
from herald.workspaces.credentials import CredentialsCache, KeyView, WorkspaceView
from herald.workspaces.scopes import Scope


class GatewayRefusal(Exception):
    """401 ER001 / 403 ER007, answered in the gateway's own body format."""

    def __init__(self, status: int, code: str, target: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.target, self.message = status, code, target, message


def unauthenticated(message: str = "Authentication credentials are missing or invalid.") -> GatewayRefusal:
    return GatewayRefusal(401, "ER001", "Authentication Invalid", message)


def forbidden(scope: Scope) -> GatewayRefusal:
    return GatewayRefusal(403, "ER007", "Authorization Failed", f"The API key lacks the scope {scope}.")


@dataclass(frozen=True)
class Caller:
    workspace: WorkspaceView
    api_key: KeyView

    @property
    def workspace_id(self) -> str:
        return self.workspace.id


def basic_credentials(header: str | None) -> tuple[str, str]:
    if not header:
        raise unauthenticated()
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        raise unauthenticated()
    try:
        # A str with bytes past ASCII (headers are read as latin-1) raises a plain ValueError, bad
        # base64 binascii.Error and bad UTF-8 UnicodeDecodeError: all are ValueErrors, all are 401.
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except ValueError:
        raise unauthenticated() from None
    username, sep, password = decoded.partition(":")
    if not sep or not username or not password or has_control_character(decoded):
        # No workspace id or key holds a control character; PostgreSQL refuses NUL in a query.
        raise unauthenticated()
    return username, password


async def authenticate(
    request: Request,
    cache: CredentialsCache,
    session: Callable[[], AsyncSession],
    scope: Scope,
    app_key_header: str | None,
) -> Caller:
    """Who is calling, checked against `scope`. `app_key_header` is required on campaign surfaces.
    `session` is called only when the credentials are not in the cache."""
    workspace_id, secret = basic_credentials(request.headers.get("authorization"))
    if app_key_header is not None and request.headers.get(app_key_header) != workspace_id:
        raise unauthenticated(f"The {app_key_header} header must carry the workspace id.")

    async def load(workspace_id: str, key_id: str) -> credentials.Credentials | None:
        return await credentials.load(session(), workspace_id, key_id)

    found = await cache.verify(workspace_id, secret, load)
    if found is None:
        raise unauthenticated()
    if scope not in found.key.scopes:
        raise forbidden(scope)
    return Caller(workspace=found.workspace, api_key=found.key)
