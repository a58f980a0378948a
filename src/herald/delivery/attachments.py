"""E-mail attachments (`campaign_content.content.email.attachments`, whose items' shape the
contract leaves open). A file the mail carries is an object with its bytes inline:
`{file_name, content, content_type?}` (`name` for `file_name` too), `content` in base64 (RFC 4648,
the standard alphabet), its media type guessed from the name when not given. Any other object (a
`{name, url}` link, say) is kept as written and given to webhook e-mail connectors as is; an SMTP
mail carries the inline files only (Herald fetches nothing on a campaign's behalf).

The one home of what an attachment is: the publish and test-send checks (`problems`, through
`campaigns.validation.sendable`: an object holding `content` must be a file that can be carried)
and the SMTP message (`files`). Attachments travel inside the request body, so its limit (1 MiB)
bounds them; they go to every recipient alike (a file name may be personalized, as any text).
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from herald.control_characters import has_control_character
from herald.problems import Problem, join_path

_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*")
_UNKNOWN_TYPE = "application/octet-stream"
SHAPE = "an object {file_name, content (the file's bytes in base64), content_type (optional)}"
_NAMES = ("file_name", "name")


@dataclass(frozen=True)
class File:
    name: str
    maintype: str
    subtype: str
    data: bytes


def problems(attachments: Any, path: Sequence[str | int]) -> list[Problem]:
    """What keeps each attachment at `path` (the `attachments` list) from being sent."""
    if attachments is None:
        return []
    if not isinstance(attachments, list):
        return [Problem("INVALID_TYPE", join_path(*path), f"'attachments' is a list of {SHAPE}.")]
    found: list[Problem] = []
    for index, item in enumerate(attachments):
        found += _item_problems(item, (*path, index))
    return found


def _item_problems(item: Any, path: tuple[str | int, ...]) -> list[Problem]:
    if not isinstance(item, dict) or "content" not in item:
        return []  # not a file to carry: kept as written (see the module's docstring)
    found: list[Problem] = []
    key = _name_key(item)
    name = item.get(key)
    if name is None or name == "":
        found.append(Problem("REQUIRED_FIELD_MISSING", join_path(*path, key), f"'{key}' is required."))
    elif not _is_file_name(name):
        message = f"'{key}' is a name without '/', '\\' or control characters."
        found.append(Problem("INVALID_TYPE", join_path(*path, key), message))
    if _decoded(item["content"]) is None:
        message = "'content' is the file's bytes in base64 (RFC 4648, standard alphabet)."
        found.append(Problem("INVALID_TYPE", join_path(*path, "content"), message))
    media_type = item.get("content_type")
    if media_type is not None and not _is_file_type(media_type):
        # A multipart or message part cannot go in base64, as a file does (RFC 2045 §6.4).
        message = (
            "'content_type' is a file's media type such as 'application/pdf' (not multipart/ or message/)."
        )
        found.append(Problem("INVALID_TYPE", join_path(*path, "content_type"), message))
    return found


def _is_file_type(value: Any) -> bool:
    return (
        isinstance(value, str)
        and _MEDIA_TYPE.fullmatch(value) is not None
        and value.partition("/")[0].lower() not in ("multipart", "message")
    )


def _name_key(item: dict[str, Any]) -> str:
    return next((key for key in _NAMES if key in item), _NAMES[0])


def files(attachments: Any) -> list[File]:
    """The attachments of a message that passed `problems`, ready to be carried. Raises ValueError
    for one that does not (a campaign published before this rule, or changed behind it)."""
    if not attachments:
        return []
    if found := problems(attachments, ("attachments",)):
        # Publishing checked them; a personalized name may still render to one that is none.
        raise ValueError(f"{found[0].target}: {found[0].message}")
    made = []
    for item in attachments:
        if not isinstance(item, dict) or "content" not in item:
            continue
        name = str(item[_name_key(item)])
        media_type = item.get("content_type") or _guessed_type(name)
        maintype, _, subtype = media_type.lower().partition("/")
        data = _decoded(item["content"])
        assert data is not None  # checked above
        made.append(File(name, maintype, subtype, data))
    return made


def _guessed_type(name: str) -> str:
    """The media type a file name suggests, when it is one a file can go as (`.eml` suggests
    message/rfc822, which cannot go in base64)."""
    guessed = mimetypes.guess_type(name)[0]
    return guessed if guessed is not None and _is_file_type(guessed) else _UNKNOWN_TYPE


def _is_file_name(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(value.strip())
        and not has_control_character(value)
        and "/" not in value
        and "\\" not in value
    )


def _decoded(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):  # ValueError: not ASCII
        return None
