"""C9 Personalized preview (contract §5): content rendered for one user; nothing sent or stored.

The lookups run in a read session that is closed before content APIs are called and texts are
rendered, so a preview never holds a database transaction (on SQLite, the write lock) while it waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from herald.errors import NotFound, ValidationFailed
from herald.personalization import content_api, personalize, users
from herald.personalization.content_api import Resolver
from herald.personalization.schemas import parse_preview


@dataclass(frozen=True, slots=True)
class Preview:
    personalized_content: dict[str, Any]
    missing: list[dict[str, str]]


async def preview(
    reader: async_sessionmaker[AsyncSession],
    workspace_id: str,
    raw: object,
    *,
    resolver: Resolver = content_api.system_resolver,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Preview:
    body, problems = parse_preview(raw)
    raw_content = raw.get("campaign_content") if isinstance(raw, dict) else None
    problems += [problem for problem in personalize.syntax_problems(raw_content) if problem not in problems]
    if body is None or problems:
        raise ValidationFailed(problems)
    content = body.campaign_content.model_dump(mode="json", exclude_unset=True)
    identification = body.user_identification
    async with reader() as session:
        prepared = await personalize.prepare(session, workspace_id, body.channel, content)
        user = await users.find_user(session, workspace_id, identification.type, identification.value)
        if user is None:
            raise NotFound(
                f"No user with {identification.type.value} '{identification.value}' exists in the workspace.",
                target="user_identification",
            )
        values = users.attribute_values(user)
    result = await personalize.personalize(
        prepared, values, body.event_attributes or {}, resolver=resolver, transport=transport
    )
    return Preview(result.content, [item.as_json() for item in result.missing])
