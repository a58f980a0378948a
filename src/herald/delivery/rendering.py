"""The seam between sending and personalization: one message rendered for one recipient.

`render_message` is the only place test sends turn a content object into what a recipient gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.schemas.common import Channel


@dataclass(frozen=True)
class RenderInput:
    workspace_id: str
    channel: Channel
    path: tuple[str, ...]  # of the message object from the body root, for error targets
    message: dict[str, Any]
    user: dict[str, Any] | None  # profile with overrides applied; None: not a known user
    event: dict[str, Any]


class RenderError(Exception):
    """A message that cannot be rendered for this recipient; `target` is the field's dot path."""

    def __init__(self, target: str, message: str) -> None:
        super().__init__(message)
        self.target = target
        self.message = message


async def render_message(session: AsyncSession, item: RenderInput) -> dict[str, Any]:
    """The message with every personalization expression resolved for `item.user`."""
    return render_unpersonalized(item)


def render_unpersonalized(item: RenderInput) -> dict[str, Any]:
    """Substitutes nothing: the content goes out exactly as written."""
    return dict(item.message)
