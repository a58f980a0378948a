"""The seam between sending and personalization: content prepared once, rendered per recipient.

- `prepare_content` (in a read session): checks the content's templates and loads what they name;
  raises ValidationFailed for what the content itself gets wrong.
- `personalize_content` (no session held): the prepared content rendered for one recipient;
  raises RenderError when it cannot be, for this recipient.
Only the messages a test sends are prepared (`pruned_content`), so narrowed-away content costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.schemas.common import Channel


class RenderError(Exception):
    """The content cannot be rendered for this recipient; the message says where and why."""


@dataclass(frozen=True)
class PreparedContent:
    campaign_content: dict[str, Any]


Path = tuple[str, ...]


def pruned_content(messages: Iterable[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """A `campaign_content` holding only these message objects, each at its path
    (paths start at `campaign_content`)."""
    root: dict[str, Any] = {}
    for path, message in messages:
        node = root
        for part in path[1:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = message
    return root


def message_at(campaign_content: Mapping[str, Any], path: Path) -> dict[str, Any]:
    node: Any = campaign_content
    for part in path[1:]:
        node = node[part]
    assert isinstance(node, dict)
    return node


async def prepare_content(
    session: AsyncSession, workspace_id: str, channel: Channel, campaign_content: dict[str, Any]
) -> PreparedContent:
    return PreparedContent(campaign_content)


async def personalize_content(
    prepared: PreparedContent, user: Mapping[str, Any], event: Mapping[str, Any]
) -> dict[str, Any]:
    """The content for one recipient. `user` is empty for an address that is not a known user."""
    return render_unpersonalized(prepared)


def render_unpersonalized(prepared: PreparedContent) -> dict[str, Any]:
    """Substitutes nothing: the content goes out exactly as written."""
    return prepared.campaign_content
