"""Workspace personalization resources: creating and listing them (CLI, demo) and loading them by name.

Everything a template will run is checked when it is stored, so a stored resource always parses.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.db import INTEGER_MAX
from herald.personalization.compiling import check_template
from herald.personalization.content_api import MAX_TIMEOUT_SECONDS, ApiConfig, url_problems
from herald.personalization.models import ContentApi, ContentBlock, CustomTemplate, ProductSet
from herald.personalization.render import Block
from herald.workspaces.service import AdminError, get_workspace

R = TypeVar("R", ContentBlock, ProductSet, ContentApi)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
BLOCK_KINDS = ("text", "html")
TEMPLATE_CHANNELS = ("PUSH", "EMAIL")
MAX_PRODUCT_SET_ITEMS = 1000


def _check_name(kind: str, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise AdminError(
            f"{kind} name must be 1-200 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}.{index}" if path else str(index))


def _check_templates(value: Any, what: str) -> None:
    for path, text in _strings(value, ""):
        problem = check_template(text) if "{" in text else None
        if problem is not None:
            raise AdminError(f"{what}{f' at {path}' if path else ''}: {problem}")


async def _existing(
    session: AsyncSession, model: type[R], workspace_id: str, name: str, replace: bool
) -> R | None:
    await get_workspace(session, workspace_id)
    row = await session.get(model, (workspace_id, name))
    if row is not None and not replace:
        raise AdminError(f"'{name}' already exists in workspace {workspace_id} (use --replace to change it)")
    return row


# -- content blocks ---------------------------------------------------------------------------


async def create_content_block(
    session: AsyncSession,
    now: datetime,
    workspace_id: str,
    name: str,
    body: str,
    kind: str = "text",
    *,
    replace: bool = False,
) -> ContentBlock:
    _check_name("content block", name)
    if kind not in BLOCK_KINDS:
        raise AdminError(f"kind must be one of {', '.join(BLOCK_KINDS)}")
    _check_templates(body, f"content block '{name}'")
    row = await _existing(session, ContentBlock, workspace_id, name, replace)
    if row is None:
        row = ContentBlock(workspace_id=workspace_id, name=name, created_at=now)
        session.add(row)
    row.kind, row.body, row.updated_at = kind, body, now
    await session.flush()
    return row


async def list_content_blocks(session: AsyncSession, workspace_id: str) -> Sequence[ContentBlock]:
    query = select(ContentBlock).where(ContentBlock.workspace_id == workspace_id).order_by(ContentBlock.name)
    return (await session.scalars(query)).all()


# -- product sets -----------------------------------------------------------------------------


async def create_product_set(
    session: AsyncSession, now: datetime, workspace_id: str, name: str, items: Any, *, replace: bool = False
) -> ProductSet:
    _check_name("product set", name)
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise AdminError("a product set is a JSON array of objects")
    if len(items) > MAX_PRODUCT_SET_ITEMS:
        raise AdminError(f"a product set holds at most {MAX_PRODUCT_SET_ITEMS} items")
    row = await _existing(session, ProductSet, workspace_id, name, replace)
    if row is None:
        row = ProductSet(workspace_id=workspace_id, name=name, created_at=now)
        session.add(row)
    row.items, row.updated_at = items, now
    await session.flush()
    return row


async def list_product_sets(session: AsyncSession, workspace_id: str) -> Sequence[ProductSet]:
    query = select(ProductSet).where(ProductSet.workspace_id == workspace_id).order_by(ProductSet.name)
    return (await session.scalars(query)).all()


# -- content APIs -----------------------------------------------------------------------------


async def create_content_api(
    session: AsyncSession,
    now: datetime,
    workspace_id: str,
    name: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_seconds: float = 2.0,
    allow_private: bool = False,
    method: str = "GET",
    replace: bool = False,
) -> ContentApi:
    _check_name("content API", name)
    problems = url_problems(url)
    if problems:
        raise AdminError(problems[0])
    _check_templates(url, f"content API '{name}' URL")
    if method.upper() != "GET":
        raise AdminError("content APIs are called with GET")
    if not 0 < timeout_seconds <= MAX_TIMEOUT_SECONDS:
        raise AdminError(f"timeout must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds")
    row = await _existing(session, ContentApi, workspace_id, name, replace)
    if row is None:
        row = ContentApi(workspace_id=workspace_id, name=name, created_at=now)
        session.add(row)
    row.url, row.method, row.headers = url, "GET", dict(headers or {})
    row.timeout_seconds, row.allow_private, row.updated_at = timeout_seconds, allow_private, now
    await session.flush()
    return row


async def list_content_apis(session: AsyncSession, workspace_id: str) -> Sequence[ContentApi]:
    query = select(ContentApi).where(ContentApi.workspace_id == workspace_id).order_by(ContentApi.name)
    return (await session.scalars(query)).all()


# -- custom templates -------------------------------------------------------------------------


def _template_problem(channel: str, body: Any) -> str | None:
    if not isinstance(body, dict):
        return "a template body is a JSON object shaped like the content it completes"
    if channel == "EMAIL" and not isinstance(body.get("html_content"), str):
        return "an EMAIL template needs 'html_content' (text)"
    if channel == "PUSH" and not isinstance(body.get("basic_details"), dict):
        return "a PUSH template needs 'basic_details' (an object with e.g. title and message)"
    return None


async def create_custom_template(
    session: AsyncSession,
    now: datetime,
    workspace_id: str,
    template_id: str,
    channel: str,
    body: Any,
    name: str | None = None,
) -> CustomTemplate:
    """Store a template; an existing id gets a new version (older versions stay usable)."""
    _check_name("template", template_id)
    channel = channel.upper()
    if channel not in TEMPLATE_CHANNELS:
        raise AdminError(f"channel must be one of {', '.join(TEMPLATE_CHANNELS)}")
    problem = _template_problem(channel, body)
    if problem is not None:
        raise AdminError(problem)
    _check_templates(body, f"template '{template_id}'")
    await get_workspace(session, workspace_id)
    latest = await load_custom_template(session, workspace_id, template_id)
    if latest is not None and latest.channel != channel:
        raise AdminError(f"template '{template_id}' is a {latest.channel} template")
    row = CustomTemplate(
        workspace_id=workspace_id,
        id=template_id,
        version=(latest.version + 1) if latest else 1,
        channel=channel,
        name=name or template_id,
        body=body,
        created_at=now,
    )
    session.add(row)
    await session.flush()
    return row


async def list_custom_templates(session: AsyncSession, workspace_id: str) -> Sequence[CustomTemplate]:
    query = (
        select(CustomTemplate)
        .where(CustomTemplate.workspace_id == workspace_id)
        .order_by(CustomTemplate.id, CustomTemplate.version)
    )
    return (await session.scalars(query)).all()


async def load_custom_template(
    session: AsyncSession, workspace_id: str, template_id: str, version: int | None = None
) -> CustomTemplate | None:
    """A template's given version, or its latest."""
    if version is not None and not 1 <= version <= INTEGER_MAX:
        return None  # no stored version has this number (and the driver cannot compare it)
    query = select(CustomTemplate).where(
        CustomTemplate.workspace_id == workspace_id, CustomTemplate.id == template_id
    )
    if version is not None:
        query = query.where(CustomTemplate.version == version)
    query = query.order_by(CustomTemplate.version.desc()).limit(1)
    return (await session.scalars(query)).first()


# -- loading by name, for rendering -----------------------------------------------------------


async def load_blocks(session: AsyncSession, workspace_id: str, names: Collection[str]) -> dict[str, Block]:
    if not names:
        return {}
    query = select(ContentBlock).where(
        ContentBlock.workspace_id == workspace_id, ContentBlock.name.in_(names)
    )
    return {row.name: Block(row.kind, row.body) for row in await session.scalars(query)}


async def load_product_sets(
    session: AsyncSession, workspace_id: str, names: Collection[str]
) -> dict[str, Any]:
    if not names:
        return {}
    query = select(ProductSet).where(ProductSet.workspace_id == workspace_id, ProductSet.name.in_(names))
    return {row.name: row.items for row in await session.scalars(query)}


async def load_content_apis(
    session: AsyncSession, workspace_id: str, names: Collection[str]
) -> dict[str, ApiConfig]:
    if not names:
        return {}
    query = select(ContentApi).where(ContentApi.workspace_id == workspace_id, ContentApi.name.in_(names))
    return {
        row.name: ApiConfig(row.name, row.url, dict(row.headers), row.timeout_seconds, row.allow_private)
        for row in await session.scalars(query)
    }
