"""Walking `campaign_content`: every text that may hold an expression, and custom template slots.

Paths are dot paths from the request body root (`campaign_content.content.push.android.basic_details.title`).
Only `campaign_content.content` holds message text; `locales` and `variation_details` are settings.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from herald.problems import join_path

Path = tuple[str | int, ...]
CONTENT_ROOT: Path = ("campaign_content", "content")
HTML_KEYS = frozenset({"html_content"})


def is_html(path: Path) -> bool:
    """E-mail bodies are HTML: values inserted into them are escaped."""
    return bool(path) and path[-1] in HTML_KEYS


def texts(value: Any, path: Path = CONTENT_ROOT) -> Iterator[tuple[Path, str]]:
    """Every string inside `value` with its path (`value` is the JSON below `path`)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from texts(item, (*path, index))


def has_expression(text: str) -> bool:
    # Jinja's delimiters all start with "{"; a text without one renders to itself.
    return "{" in text


def template_slots(value: Any, path: Path = CONTENT_ROOT) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every message object naming a `custom_template_id` (Push platform objects, Email objects)."""
    if isinstance(value, dict):
        if isinstance(value.get("custom_template_id"), str):
            yield path, value
            return
        for key, item in value.items():
            yield from template_slots(item, (*path, key))


def fill_from(target: dict[str, Any], template_body: dict[str, Any]) -> None:
    """Copy the template's fields into `target` where it has none (nested objects merged)."""
    for key, value in template_body.items():
        if key not in target or target[key] is None:
            target[key] = copy.deepcopy(value)
        elif isinstance(target[key], dict) and isinstance(value, dict):
            fill_from(target[key], value)


def dotted(path: Path) -> str:
    return join_path(*path)
