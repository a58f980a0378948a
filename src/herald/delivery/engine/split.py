"""Deterministic per-user choices of an execution (pure): rank, control group, global control
group, variation, locale, tracking parameters.

Every choice derives from a hash of (campaign, user), so the same user lands on the same side on
every evaluation. The control group is not "hash below p" (that is only right on average: ±1 point
on 10,000 users fails one time in twenty at 50 %) but "the ⌊p·N⌉ users with the smallest hash":
exact by construction, still decided by the user's hash alone once the audience is known. MANUAL
variations are cut the same way, in a second order (the variation key), over the users the control
group leaves: each gets its percentage of them to one user.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from html import unescape
from html.entities import html5
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import BaseModel

from herald.delivery.engine.rank import GLOBAL_CONTROL, GLOBAL_CONTROL_BUCKETS, rank_of


def in_global_control(workspace_id: str, customer_id: str, percentage: float | None) -> bool:
    """Whether the user is in the workspace's global control group: a hash of (workspace, user)
    alone, so the same users are held out of every campaign, whatever its audience."""
    if not percentage:
        return False
    bucket = rank_of(workspace_id, customer_id, GLOBAL_CONTROL) % GLOBAL_CONTROL_BUCKETS
    return bucket < float(percentage) * GLOBAL_CONTROL_BUCKETS / 100


def control_group_size(audience: int, percentage: float | None) -> int:
    """How many of `audience` users the control group holds: the share rounded to the nearest user."""
    if not percentage or audience <= 0:
        return 0
    return min(audience, int(audience * float(percentage) / 100 + 0.5))


# A user's variation key: a second, independent order over the audience (the control group takes the
# smallest ranks; the key reads the rank's low bits). SQL computes it the same way (`rank % M`).
VARIATION_MODULUS = 2**31 - 1

VariationKey = tuple[int, str]  # (rank % VARIATION_MODULUS, customer id): ties broken by the id


def variation_key(rank: int, customer_id: str) -> VariationKey:
    return rank % VARIATION_MODULUS, customer_id


def split_sizes(total: int, shares: Sequence[tuple[str, float]]) -> list[int]:
    """How many of `total` users each variation gets: cumulative shares rounded to the nearest
    user, so each variation is within one user of its percentage and the sizes add up to `total`."""
    sizes: list[int] = []
    cumulative, edge = 0.0, 0
    for index, (_, percentage) in enumerate(shares):
        cumulative += float(percentage)
        upper = total if index == len(shares) - 1 else min(total, int(total * cumulative / 100 + 0.5))
        sizes.append(max(0, upper - edge))
        edge = max(edge, upper)
    return sizes


def variation_bounds_at(total: int, shares: Sequence[tuple[str, float]]) -> list[int]:
    """The 0-based positions (in variation-key order) of the last user of every variation but the
    last; -1 for an empty leading variation."""
    positions: list[int] = []
    edge = 0
    for size in split_sizes(total, shares)[:-1]:
        edge += size
        positions.append(edge - 1)
    return positions


def share_bounds(shares: Sequence[tuple[str, float]]) -> list[VariationKey | None]:
    """Bounds cutting the variation keys' range by the cumulative shares (for an audience that is
    never complete, where `variation_bounds_at` has no N to cut)."""
    bounds: list[VariationKey | None] = []
    cumulative = 0.0
    for _, percentage in shares[:-1]:
        cumulative += float(percentage)
        bounds.append((int(VARIATION_MODULUS * cumulative / 100), "\U0010ffff"))
    return bounds


def variation_for(key: VariationKey, bounds: Sequence[VariationKey | None], names: Sequence[str]) -> str:
    """The variation of the user with `key`: the first whose bound (the key of its last user) is at or
    after it. `bounds[i]` None means variation i is empty."""
    for name, bound in zip(names, bounds, strict=False):
        if bound is not None and key <= bound:
            return name
    return names[-1]


def assign_variations(
    campaign_id: str, users: Sequence[str], shares: Sequence[tuple[str, float]]
) -> dict[str, str]:
    """The split of `users` (the audience left after hold-outs) over `shares`, as the engine makes it:
    users in variation-key order, cut at `variation_bounds_at`."""
    ordered = sorted(variation_key(rank_of(campaign_id, user), user) for user in users)
    bounds = [ordered[i] if i >= 0 else None for i in variation_bounds_at(len(ordered), shares)]
    names = [name for name, _ in shares]
    return {
        user: variation_for(variation_key(rank_of(campaign_id, user), user), bounds, names) for user in users
    }


def _tag_of(locale: str) -> str:
    """A locale as a comparable language tag: `zh_TW`, `zh-tw` and ` zh-TW ` are one locale."""
    return locale.strip().replace("_", "-").lower()


def locale_for(user_locale: object, locales: Sequence[str], default: str) -> str:
    """The campaign locale matching the user's `locale` attribute (exactly, else by language), or
    `default`; either side may write a locale with `_` or `-`, in any case."""
    if not isinstance(user_locale, str) or not user_locale.strip():
        return default
    wanted = _tag_of(user_locale)
    for locale in locales:
        if _tag_of(locale) == wanted:
            return locale
    language = wanted.split("-")[0]
    for locale in locales:
        if _tag_of(locale).split("-")[0] == language:
            return locale
    return default


# What browsers strip from both ends of a URL before parsing it (C0 controls and space).
_URL_PADDING = "".join(chr(code) for code in range(0x21))


def utm_of(params: BaseModel | None) -> dict[str, str]:
    """A campaign's `utm_params` as the parameters its messages' links get (none when absent)."""
    if params is None:
        return {}
    return {key: str(value) for key, value in params.model_dump(exclude_none=True).items()}


def tagged(message: dict[str, Any], email: bool, utm: Mapping[str, str]) -> dict[str, Any]:
    """`message` with `utm` added to its links, as a copy (the content it comes from may be shared
    by other users' messages); `message` itself when there is nothing to add (a copy per message
    cost more than rendering it). The links: an e-mail's HTML links, a push message's click URL and
    button URLs (a button opens its URL as the notification's click does). Live sends and test
    sends tag alike, so a test shows the links a user will get."""
    if not utm:
        return message
    message = copy.deepcopy(message)
    if email:
        html = message.get("html_content")
        if isinstance(html, str):
            message["html_content"] = html_with_utm(html, utm)
        return message
    visible = message.get("basic_details")
    if isinstance(visible, dict) and isinstance(visible.get("default_click_action_value"), str):
        visible["default_click_action_value"] = with_utm(visible["default_click_action_value"], utm)
    buttons = message.get("buttons")
    for button in buttons if isinstance(buttons, list) else []:
        if isinstance(button, dict) and isinstance(button.get("click_action_value"), str):
            button["click_action_value"] = with_utm(button["click_action_value"], utm)
    return message


def with_utm(url: str, utm: Mapping[str, str]) -> str:
    """`url` with the tracking parameters added; keys the URL already has are kept as they are.
    Only http(s) URLs are tagged (a deep link or `mailto:` is left alone).

    The parameters are spliced into the URL's own text (before its fragment) rather than the URL
    rebuilt by `urlunsplit`, which would normalise it (scheme case, an empty `?` or `#`). Padding
    around the URL is dropped from a tagged one: a browser ignores it, but `?…` after it would not be."""
    stripped = web_address(url)
    if not utm or stripped is None:
        return url
    base, hash_mark, fragment = stripped.partition("#")
    _, question_mark, query = base.partition("?")
    present = {key for key, _ in parse_qsl(query, keep_blank_values=True)}
    added = [(key, value) for key, value in utm.items() if key not in present]
    if not added:
        return url
    separator = "?" if not question_mark else "" if query == "" or query.endswith("&") else "&"
    return f"{base}{separator}{urlencode(added)}{hash_mark}{fragment}"


def web_address(url: str) -> str | None:
    """`url` without the padding a browser ignores around it, when it is an http(s) link (its
    scheme in any case, or none: `//host/path` opens with the page's own, http or https); None
    otherwise. What a link is for the tracking parameters and for the e-mail's plain-text part alike."""
    stripped = url.strip(_URL_PADDING)
    try:
        parts = urlsplit(stripped)
    except ValueError:  # e.g. an unclosed `[` in the host: not a URL to tag
        return None
    scheme = parts.scheme.lower()
    web = scheme in ("http", "https") or (not scheme and stripped.startswith("//") and bool(parts.netloc))
    return stripped if web else None


# --- Email HTML -------------------------------------------------------------------------------------
# The `<a>`/`<area>` start tags are found by HTMLParser, then their `href` value is located in the
# tag's text by the tokenizer HTMLParser itself uses (html.parser's `tagfind_tolerant` and
# `attrfind_tolerant`, copied: they are not public), so the value rewritten is exactly the one the
# parser (and a browser) reads as `href`, never `data-href` or text inside another attribute's value.
_TAG_NAME = re.compile(r"([a-zA-Z][^\t\n\r\f />\x00]*)(?:\s|/(?!>))*")
_ATTRIBUTE = re.compile(
    r"((?<=['\"\s/])[^\s/>][^\s/=>]*)(\s*=+\s*"
    r"('[^']*'|\"[^\"]*\"|(?!['\"])[^>\s]*))?(?:\s|/(?!>))*"
)
# A character reference, as `html.unescape` finds them.
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")


class _Links(HTMLParser):
    """Finds the `<a>` and `<area>` start tags with their offsets in the source."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=False)
        # getpos() counts lines by "\n" only; str.splitlines() would also break at \r, \x0c,
        # \x1c-\x1e, \x85, \u2028, \u2029 and put every later tag at the wrong offset.
        self._line_starts = [0, *(match.end() for match in re.finditer("\n", html))]
        self.tags: list[tuple[int, str]] = []
        self._html = html
        # The parser waits for the end of a `&#` that starts no character reference (`&#<a ...`)
        # and then reads all that follows as text, its links included; a browser reads `&#` as
        # text. Fed as `&_` (the same length, so every offset holds), it is read as text too.
        self.feed(_BARE_CHARREF.sub("&_", html))
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("a", "area"):
            line, column = self.getpos()
            start = self._line_starts[line - 1] + column
            # The tag as written in the document (the parser saw `&#` as `&_`).
            self.tags.append((start, self._html[start : start + len(self.get_starttag_text() or "")]))


# `&#` that does not begin a character reference (`&#38;`, `&#x26;`).
_BARE_CHARREF = re.compile(r"&#(?![0-9]|[xX][0-9a-fA-F])")


def html_with_utm(html: str, utm: Mapping[str, str]) -> str:
    """The HTML with `utm` added to the href of every link (the rest of the document untouched)."""
    if not utm:
        return html
    out: list[str] = []
    cursor = 0
    for start, tag in _Links(html).tags:
        if start < cursor or not html.startswith(tag, start):
            continue  # not where the parser said (never expected): leave it rather than splice over text
        out.append(html[cursor:start])
        out.append(_retag(tag, utm))
        cursor = start + len(tag)
    out.append(html[cursor:])
    return "".join(out)


def _retag(tag: str, utm: Mapping[str, str]) -> str:
    """The start tag with `utm` added to its `href` (the first one: the one a browser follows)."""
    span = _href_span(tag)
    if span is None:
        return tag
    start, end = span
    raw = tag[start:end]
    quote = raw[0] if raw[:1] in ("'", '"') else ""
    url = _unescape_attribute(raw[1:-1] if quote else raw)
    tagged = with_utm(url, utm)
    if tagged == url:
        return tag
    # An unquoted value is written back double-quoted: no character of the URL can end it there.
    quote = quote or '"'
    return f"{tag[:start]}{quote}{_escape_attribute(tagged, quote)}{quote}{tag[end:]}"


def _href_span(tag: str) -> tuple[int, int] | None:
    """Where the value of the tag's first `href` attribute (with its quotes) is, if it has one."""
    name = _TAG_NAME.match(tag, 1)
    at = name.end() if name else len(tag)
    while at < len(tag):
        attribute = _ATTRIBUTE.match(tag, at)
        if not attribute:
            return None
        if attribute.group(1).lower() == "href":
            return attribute.span(3) if attribute.group(2) and attribute.group(3) else None
        at = attribute.end()
    return None


def _unescape_attribute(value: str) -> str:
    """`value` with its character references decoded the way a browser decodes an attribute value:
    like `html.unescape`, except that a named reference without `;` followed by `=` or a letter or
    digit stays as written (`?a=1&region=eu` is not `?a=1®ion=eu`)."""
    return _CHARREF.sub(_decode_reference, value)


def _decode_reference(match: re.Match[str]) -> str:
    reference = match.group(1)
    if reference.startswith("#") or reference in html5:
        return unescape(match.group(0))
    # The longest entity name it starts with (a legacy one, written without `;`), as `unescape` does.
    for length in range(len(reference) - 1, 1, -1):
        if reference[:length] in html5:
            following = reference[length]
            if following == "=" or (following.isascii() and following.isalnum()):
                return match.group(0)
            return html5[reference[:length]] + reference[length:]
    return match.group(0)


def _escape_attribute(value: str, quote: str) -> str:
    """`value` written in an attribute quoted with `quote`: `&` and that quote as references."""
    escaped = value.replace("&", "&amp;")
    return escaped.replace('"', "&quot;") if quote == '"' else escaped.replace("'", "&#39;")
