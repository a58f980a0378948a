"""Deterministic per-user choices of an execution (pure): rank, control group, global control
group, variation, locale, tracking parameters.

Every choice derives from a hash of (campaign, user), so the same user lands on the same side on
every evaluation. The control group is not "hash below p" (that is only right on average: ±1 point
on 10,000 users fails one time in twenty at 50 %) but "the ⌊p·N⌉ users with the smallest hash":
exact by construction, still decided by the user's hash alone once the audience is known.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

RANK_BITS = 62  # fits a signed BIGINT on every engine
_BUCKETS = 10_000


def rank_of(campaign_id: str, customer_id: str, purpose: str = "rank") -> int:
    digest = hashlib.sha256(f"{purpose}\x00{campaign_id}\x00{customer_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - RANK_BITS)


def in_global_control(workspace_id: str, customer_id: str, percentage: float | None) -> bool:
    """Whether the user is in the workspace's global control group: a hash of (workspace, user)
    alone, so the same users are held out of every campaign, whatever its audience."""
    if not percentage:
        return False
    bucket = rank_of(workspace_id, customer_id, "global-control") % _BUCKETS
    return bucket < float(percentage) * _BUCKETS / 100


def control_group_size(audience: int, percentage: float | None) -> int:
    """How many of `audience` users the control group holds: the share rounded to the nearest user."""
    if not percentage or audience <= 0:
        return 0
    return min(audience, int(audience * float(percentage) / 100 + 0.5))


def variation_for(campaign_id: str, customer_id: str, shares: Sequence[tuple[str, float]]) -> str:
    """The variation a user gets: `shares` are (variation, percentage) in order; the user's bucket
    (0..9,999, from its hash) falls in one of the cumulative ranges. A shortfall goes to the last."""
    bucket = rank_of(campaign_id, customer_id, "variation") % _BUCKETS
    edge = 0.0
    for variation, percentage in shares:
        edge += float(percentage) * _BUCKETS / 100
        if bucket < edge:
            return variation
    return shares[-1][0]


def locale_for(user_locale: object, locales: Sequence[str], default: str) -> str:
    """The campaign locale matching the user's `locale` attribute (exactly, else by language), or
    `default`."""
    if not isinstance(user_locale, str) or not user_locale:
        return default
    wanted = user_locale.replace("_", "-").lower()
    for locale in locales:
        if locale.lower() == wanted:
            return locale
    language = wanted.split("-")[0]
    for locale in locales:
        if locale.lower().split("-")[0] == language:
            return locale
    return default


def with_utm(url: str, utm: Mapping[str, str]) -> str:
    """`url` with the tracking parameters added; keys the URL already has are kept as they are.
    Only http(s) URLs are tagged (a deep link or `mailto:` is left alone)."""
    if not utm:
        return url
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return url
    existing = parse_qsl(parts.query, keep_blank_values=True)
    present = {key for key, _ in existing}
    added = [(key, value) for key, value in utm.items() if key not in present]
    if not added:
        return url
    query = f"{parts.query}&{urlencode(added)}" if parts.query else urlencode(added)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


class _Links(HTMLParser):
    """Finds the `href` values of `<a>` and `<area>` tags with their positions in the source."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.spans: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("a", "area") and any(name == "href" and value for name, value in attrs):
            line, column = self.getpos()
            self.spans.append((self._offset(line, column), self.get_starttag_text() or ""))

    def _offset(self, line: int, column: int) -> int:
        return sum(self._lines[: line - 1]) + column

    def feed_text(self, html: str) -> None:
        self._lines = [len(part) for part in html.splitlines(keepends=True)]
        self.feed(html)
        self.close()


def html_with_utm(html: str, utm: Mapping[str, str]) -> str:
    """The HTML with `utm` added to the href of every link (the rest of the document untouched)."""
    if not utm:
        return html
    finder = _Links()
    finder.feed_text(html)
    out: list[str] = []
    cursor = 0
    for start, tag in finder.spans:
        out.append(html[cursor:start])
        out.append(_retag(tag, utm))
        cursor = start + len(tag)
    out.append(html[cursor:])
    return "".join(out)


def _retag(tag: str, utm: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        quote, url = match.group(2), match.group(3)
        unescaped = url.replace("&amp;", "&")
        tagged = with_utm(unescaped, utm)
        if tagged == unescaped:
            return match.group(0)
        return f"{match.group(1)}{quote}{tagged.replace('&', '&amp;')}{quote}"

    return re.sub(r"""(\bhref\s*=\s*)(["'])(.*?)\2""", replace, tag, count=1, flags=re.IGNORECASE | re.DOTALL)
