"""The seam between sending and personalization: content prepared once, rendered per recipient.

- `prepare_content` (in a read session): the content's templates checked, custom templates filled
  in, and the content blocks, product sets and content APIs they name loaded
  (`herald.personalization.personalize.prepare`); raises ValidationFailed (INVALID_TEMPLATE, ...).
- `personalize_content` (no session held): the prepared content rendered for one recipient, with the
  same sandbox and limits as the C9 preview; raises RenderError when it cannot be, for this recipient.
Only the messages a test sends are prepared (`pruned_content`), so narrowed-away content costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.schemas.common import Channel
from herald.errors import Unprocessable
from herald.personalization import personalize
from herald.personalization.fields import Path as FieldsPath
from herald.problems import Problem


class RenderError(Exception):
    """The content cannot be rendered for this recipient; the message says where and why.
    `partly`: what could be rendered, when each failed text failed alone (see `rendered_for`)."""

    def __init__(self, message: str, partly: personalize.PartlyRendered | None = None) -> None:
        super().__init__(message)
        self.partly = partly

    def rendered_for(self, path: Path) -> dict[str, Any] | RenderError:
        """For the message object at `path` (from `campaign_content`): the content as rendered
        when none of the failed texts lies in that message (another platform's message failed),
        else the error of its own failures alone."""
        partly = self.partly
        if partly is None:
            return self
        inner = path[2:]  # below `campaign_content.content`
        own = [
            detail
            for where, detail in zip(partly.failed, partly.error.details, strict=True)
            if tuple(where[: len(inner)]) == inner
        ]
        return RenderError(_reasons(own)) if own else partly.content


@dataclass(frozen=True)
class PreparedContent:
    prepared: personalize.Prepared

    @property
    def campaign_content(self) -> dict[str, Any]:
        """As written, with custom templates filled in (what an unrenderable send shows)."""
        return self.prepared.content


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


async def custom_templates(
    session: AsyncSession, workspace_id: str, channel: Channel, campaign_content: dict[str, Any]
) -> tuple[dict[FieldsPath, dict[str, Any]], list[Problem]]:
    """The bodies of the custom templates the content names, by message path, and the problems of
    those the workspace does not hold (`personalize.custom_templates`)."""
    return await personalize.custom_templates(session, workspace_id, channel.value, campaign_content)


async def prepare_content(
    session: AsyncSession,
    workspace_id: str,
    channel: Channel,
    campaign_content: dict[str, Any],
    templates: dict[FieldsPath, dict[str, Any]] | None = None,
) -> PreparedContent:
    """`personalize.prepare`; `templates` as it takes them."""
    prepared = await personalize.prepare(session, workspace_id, channel.value, campaign_content, templates)
    return PreparedContent(prepared)


async def personalize_content(
    prepared: PreparedContent, user: Mapping[str, Any], event: Mapping[str, Any]
) -> dict[str, Any]:
    """The content for one recipient. `user` is empty for an address that is not a known user:
    every user expression then renders as missing (empty, or its `default`)."""
    try:
        result = await personalize.personalize(prepared.prepared, user, event)
    except Unprocessable as exc:
        raise _render_error(exc) from None
    return result.content


async def personalize_contents(
    items: Sequence[tuple[PreparedContent, Mapping[str, Any], Mapping[str, Any]]],
) -> list[dict[str, Any] | RenderError]:
    """`personalize_content` for many (content, recipient, event) at once (one worker-thread hop):
    each one's content, or the RenderError saying why it cannot be rendered for them."""
    done = await personalize.personalize_many([(item.prepared, user, event) for item, user, event in items])
    found_of: list[dict[str, Any] | RenderError] = []
    for found in done:
        if isinstance(found, personalize.Personalized):
            found_of.append(found.content)
        elif isinstance(found, personalize.PartlyRendered):
            found_of.append(RenderError(str(_render_error(found.error)), found))
        else:
            found_of.append(_render_error(found))
    return found_of


def _render_error(exc: Unprocessable) -> RenderError:
    return RenderError(_reasons(exc.details) or exc.message)


def _reasons(details: Iterable[Problem]) -> str:
    """Where and why each text failed, as a message's failure reason names them."""
    return "; ".join(f"{detail.target}: {detail.message}" for detail in details)
