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

import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
