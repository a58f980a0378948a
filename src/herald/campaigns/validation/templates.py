"""Personalization syntax: the default checker and the walk over every text that may hold one.

The personalization package plugs its sandboxed Jinja parser in through `check_template`; until
then `balanced_delimiters` catches the common slip, an expression or tag left open.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pydantic import BaseModel, JsonValue

from herald.campaigns.schemas.content import EmailCampaignContent, PushCampaignContent
from herald.campaigns.schemas.filters import UserAttributeFilter
from herald.campaigns.validation.content import CONTENT_ROOT
from herald.campaigns.validation.context import Context
from herald.campaigns.validation.filters import campaign_filter_groups, walk_filters
from herald.problems import Problem, join_path

_OPENERS = {"{{": "}}", "{%": "%}"}
_OPENER = re.compile(r"\{\{|\{%")

Path = tuple[str | int, ...]


def balanced_delimiters(text: str) -> str | None:
    """None when every `{{` and `{%` is closed and not empty; else what is wrong.

    Stray closers are ignored on purpose: `}}` and `%}` outside an expression are plain text to
    Jinja, and inline CSS such as `{width:100%}` is common in HTML bodies.
    """
    position = 0
    while match := _OPENER.search(text, position):
        opener = match.group()
        closer = _OPENERS[opener]
        end = text.find(closer, match.end())
        if end == -1:
            return f"'{opener}' at position {match.start()} is never closed with '{closer}'."
        inner = text[match.end() : end]
        nested = _OPENER.search(inner)
        if nested:
            return f"'{nested.group()}' opens inside another expression at position {match.end() + nested.start()}."
        if not inner.strip():
            return f"Empty '{opener} {closer}' at position {match.start()}."
        position = end + len(closer)
    return None


def _strings(value: JsonValue, path: Path) -> Iterator[tuple[Path, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, index))


def _content_texts(ctx: Context) -> Iterator[tuple[Path, str]]:
    content = ctx.campaign.campaign_content
    objects: list[tuple[Path, BaseModel]] = []
    if isinstance(content, PushCampaignContent):
        for entry_path, platforms in content.entries():
            objects += [((*CONTENT_ROOT, *entry_path, key), obj) for _, key, obj in platforms.by_platform()]
    elif isinstance(content, EmailCampaignContent):
        objects += [((*CONTENT_ROOT, *entry_path), obj) for entry_path, obj in content.entries()]
    for path, obj in objects:
        yield from _strings(obj.model_dump(mode="json", exclude_unset=True), path)


def _dynamic_filter_values(ctx: Context) -> Iterator[tuple[Path, str]]:
    for group, group_path in campaign_filter_groups(ctx):
        for item, path in walk_filters(group, group_path):
            if isinstance(item, UserAttributeFilter) and item.is_dynamic_value:
                yield from _strings(item.value, (*path, "value"))


def check_personalization(ctx: Context) -> list[Problem]:
    """Every text that may carry an expression must parse (contract C4)."""
    problems: list[Problem] = []
    for path, text in (*_content_texts(ctx), *_dynamic_filter_values(ctx)):
        if "{" not in text:
            continue  # nothing to parse; spares the plugged-in parser most of the work
        error = ctx.check_template(text)
        if error is not None:
            problems.append(Problem("INVALID_TEMPLATE", join_path(*path), error))
    return problems
