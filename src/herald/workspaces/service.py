"""Workspace administration (used by the CLI, the demo and tests) and API-key authentication."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.workspaces.credentials import KEY_PREFIX, secret_hash
from herald.workspaces.errors import AdminError as AdminError  # raised here; its callers import it here
from herald.workspaces.errors import unknown_workspace
from herald.workspaces.features import FEATURES
from herald.workspaces.models import ApiKey, OfferTemplate, Tag, Workspace
from herald.workspaces.names import check_id, check_name
from herald.workspaces.scopes import Scope

# The columns' lengths (`herald.workspaces.models`): SQLite does not enforce them, PostgreSQL does.
ID_LENGTH = 64
NAME_LENGTH = 200


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    secret: str  # shown once; only its hash is stored


def new_workspace_id() -> str:
    # Upper-case alphanumerics, like the app ids clients already handle.
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    return "".join(secrets.choice(alphabet) for _ in range(16))


async def create_workspace(
    session: AsyncSession,
    now: datetime,
    name: str,
    workspace_id: str | None = None,
    features: dict[str, bool] | None = None,
) -> Workspace:
    # An id given empty is refused below (1-64 characters), not replaced by a generated one.
    workspace_id = new_workspace_id() if workspace_id is None else workspace_id
    # ASCII only: the C* routes take the id in the SVC-APPKEY header, whose values are Latin-1 (an
    # `isalnum` id such as 工作 could be created, and never used there). No ':' either (Basic auth).
    check_id("workspace id", workspace_id, ID_LENGTH)
    check_name("workspace name", name, NAME_LENGTH)
    if await session.get(Workspace, workspace_id) is not None:
        raise AdminError(f"workspace {workspace_id} already exists")
    workspace = Workspace(
        id=workspace_id, name=name, features=dict(features or {}), rate_limits={}, delivery={}, created_at=now
    )
    session.add(workspace)
    await session.flush()
    return workspace


async def get_workspace(session: AsyncSession, workspace_id: str, *, for_update: bool = False) -> Workspace:
    """The workspace; `for_update` locks its row until the transaction ends, for a read-modify-write
    of its settings (two concurrent `features set` of different flags must both land)."""
    workspace = await session.get(
        Workspace, workspace_id, with_for_update=for_update, populate_existing=for_update
    )
    if workspace is None:
        raise unknown_workspace(workspace_id)
    return workspace


async def create_api_key(
    session: AsyncSession, now: datetime, workspace_id: str, scopes: Sequence[Scope], name: str = "default"
) -> IssuedKey:
    check_name("key name", name, NAME_LENGTH)
    await get_workspace(session, workspace_id)
    if not scopes:
        raise AdminError("an API key needs at least one scope")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(24)
    key = ApiKey(
        workspace_id=workspace_id,
        id=key_id,
        name=name,
        scopes=sorted({str(scope) for scope in scopes}),
        secret_hash=secret_hash(secret),
        created_at=now,
    )
    session.add(key)
    await session.flush()
    return IssuedKey(key=key, secret=f"{KEY_PREFIX}_{key_id}_{secret}")


async def revoke_api_key(
    session: AsyncSession, now: datetime, workspace_id: str, key_id: str
) -> tuple[ApiKey, bool]:
    """The key, revoked at `now` unless it was already (its first revocation's moment kept), and
    whether this call revoked it."""
    await get_workspace(session, workspace_id)  # an unknown workspace is said as such, first
    key = await session.get(ApiKey, (workspace_id, key_id))
    if key is None:
        raise AdminError(f"no key {key_id} in workspace {workspace_id}")
    if key.revoked_at is not None:
        return key, False
    key.revoked_at = now
    await session.flush()
    return key, True


async def set_feature(session: AsyncSession, workspace_id: str, flag: str, on: bool) -> Workspace:
    if flag not in FEATURES:
        raise AdminError(f"unknown feature {flag!r}; known: {', '.join(FEATURES)}")
    workspace = await get_workspace(session, workspace_id, for_update=True)
    workspace.features = {**(workspace.features or {}), flag: on}
    await session.flush()
    return workspace


async def set_rate_limit(
    session: AsyncSession, workspace_id: str, bucket: str, spec: str | None
) -> Workspace:
    """Override one bucket's windows (e.g. "1000/minute;10000/hour"); `None` restores the default."""
    # Imported here: the HTTP layer depends on workspaces, not the other way round.
    from herald.http.limits import BUCKETS, validate_limit_spec

    if bucket not in BUCKETS:
        raise AdminError(f"unknown bucket {bucket!r}; known: {', '.join(BUCKETS)}")
    if spec is not None:
        try:
            validate_limit_spec(spec)
        except ValueError as exc:
            raise AdminError(str(exc)) from exc
    workspace = await get_workspace(session, workspace_id, for_update=True)
    limits = dict(workspace.rate_limits or {})
    if spec is None:
        limits.pop(bucket, None)
    else:
        limits[bucket] = spec
    workspace.rate_limits = limits
    await session.flush()
    return workspace


async def create_tag(
    session: AsyncSession, now: datetime, workspace_id: str, name: str, tag_id: str | None = None
) -> Tag:
    check_name("tag name", name, NAME_LENGTH)
    if tag_id is not None:
        check_id("tag id", tag_id, ID_LENGTH)
    await get_workspace(session, workspace_id)
    tag = Tag(workspace_id=workspace_id, id=tag_id or secrets.token_hex(12), name=name, created_at=now)
    if await session.get(Tag, (workspace_id, tag.id)) is not None:
        raise AdminError(f"tag {tag.id} already exists")
    session.add(tag)
    await session.flush()
    return tag


async def list_tags(session: AsyncSession, workspace_id: str) -> Sequence[Tag]:
    query = select(Tag).where(Tag.workspace_id == workspace_id).order_by(Tag.created_at, Tag.id)
    return (await session.scalars(query)).all()


async def create_template(
    session: AsyncSession,
    now: datetime,
    workspace_id: str,
    template_id: str,
    label: str,
    template_type: Sequence[str],
    fields: Sequence[str] = (),
) -> OfferTemplate:
    check_name("template id", template_id, ID_LENGTH)
    check_name("template label", label, NAME_LENGTH)
    # O4 lists them as the template's `template_type`: identifiers, at least one (e.g. json).
    if not template_type:
        raise AdminError("a template needs at least one type")
    for kind in template_type:
        check_id("template type", kind, ID_LENGTH)
    for field in fields:
        check_name("template field name", field, NAME_LENGTH)
    await get_workspace(session, workspace_id)
    if await session.get(OfferTemplate, (workspace_id, template_id)) is not None:
        raise AdminError(f"template {template_id} already exists")
    template = OfferTemplate(
        workspace_id=workspace_id,
        id=template_id,
        label=label,
        template_type=list(template_type),
        fields=list(fields),
        created_at=now,
    )
    session.add(template)
    await session.flush()
    return template


async def list_templates(session: AsyncSession, workspace_id: str) -> Sequence[OfferTemplate]:
    query = select(OfferTemplate).where(OfferTemplate.workspace_id == workspace_id)
    return (await session.scalars(query.order_by(OfferTemplate.id))).all()
