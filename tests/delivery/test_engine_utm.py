"""UTM tagging of Email HTML links and push URLs: where the href is, how its value is read and
written back, and that nothing else of the document moves."""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.delivery.engine.split import html_with_utm, with_utm

UTM = {"utm_source": "herald", "utm_medium": "email"}
TAGS = "utm_source=herald&amp;utm_medium=email"

# Characters str.splitlines() breaks at that HTMLParser does not count as a new line.
LINE_BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


# --- the link's position (non-LF line breaks) ---------------------------------------------------------


@pytest.mark.parametrize("line_break", LINE_BREAKS)
def test_a_line_break_htmlparser_does_not_count_moves_no_tag(line_break: str) -> None:
    html = (
        f"<p>Hello Ann{line_break}Lee</p>\n<p>Price{line_break} now</p>\n"
        '<p><a href="https://shop.example/sale">Sale</a></p>\n'
    )
    assert html_with_utm(html, UTM) == (
        f"<p>Hello Ann{line_break}Lee</p>\n<p>Price{line_break} now</p>\n"
        f'<p><a href="https://shop.example/sale?{TAGS}">Sale</a></p>\n'
    )


def test_crlf_documents_keep_their_line_endings() -> None:
    html = '<p>a</p>\r\n<a href="https://a.example/">x</a>\r\n<a href="https://b.example/">y</a>\r\n'
    assert html_with_utm(html, UTM) == (
        f'<p>a</p>\r\n<a href="https://a.example/?{TAGS}">x</a>\r\n<a href="https://b.example/?{TAGS}">y</a>\r\n'
    )


# --- character references in the href --------------------------------------------------------------


@pytest.mark.parametrize("text", ["&#", "&#x", "&#q"])
def test_a_bare_ampersand_hash_before_a_link_leaves_the_link_a_link(text: str) -> None:
    # Found by the property below: the parser read everything after such a `&#` as text.
    html = f'{text}<a href="https://shop.example/">Shop</a>'
    assert html_with_utm(html, UTM) == (
        f'{text}<a href="https://shop.example/?utm_source=herald&amp;utm_medium=email">Shop</a>'
    )


def test_a_numeric_reference_is_not_read_as_a_fragment() -> None:
    html = '<a id="L1" href="https://shop.example/welcome?name=O&#39;Brien&src=mail">hi</a>'
    assert html_with_utm(html, UTM) == (
        f'<a id="L1" href="https://shop.example/welcome?name=O\'Brien&amp;src=mail&amp;{TAGS}">hi</a>'
    )


def test_an_encoded_ampersand_keeps_the_parameter_after_it() -> None:
    for encoded in ("&#38;", "&#x26;", "&amp;"):
        html = f'<a href="https://shop.example/list?a=1{encoded}b=2">x</a>'
        assert html_with_utm(html, UTM) == f'<a href="https://shop.example/list?a=1&amp;b=2&amp;{TAGS}">x</a>'


def test_the_value_is_escaped_again_for_its_quotes() -> None:
    double = '<a href="https://a.example/?q=&quot;x&quot;&amp;n=O\'B">x</a>'
    assert (
        html_with_utm(double, UTM)
        == f'<a href="https://a.example/?q=&quot;x&quot;&amp;n=O\'B&amp;{TAGS}">x</a>'
    )
    single = "<a href='https://a.example/?q=\"x\"&amp;n=O&#39;B'>x</a>"
    assert (
        html_with_utm(single, UTM) == f"<a href='https://a.example/?q=\"x\"&amp;n=O&#39;B&amp;{TAGS}'>x</a>"
    )


def test_a_legacy_reference_before_a_letter_or_equals_is_text_in_an_attribute() -> None:
    # A browser reads `&region=eu` in an attribute literally (not `®ion`), `&not=1` too.
    html = '<a href="https://a.example/?a=1&region=eu&not=1&copy">x</a>'
    assert html_with_utm(html, UTM) == (
        f'<a href="https://a.example/?a=1&amp;region=eu&amp;not=1\u00a9&amp;{TAGS}">x</a>'
    )


# --- which attribute is the href ----------------------------------------------------------------------


def test_data_href_before_the_href_is_left_alone() -> None:
    html = '<a data-href="https://track.example/x" href="https://shop.example/three">x</a>'
    assert html_with_utm(html, UTM) == (
        f'<a data-href="https://track.example/x" href="https://shop.example/three?{TAGS}">x</a>'
    )


def test_href_text_inside_another_attribute_is_left_alone() -> None:
    html = '<a title="see href=\'https://x.example/\'" href="https://shop.example/four">x</a>'
    assert html_with_utm(html, UTM) == (
        f'<a title="see href=\'https://x.example/\'" href="https://shop.example/four?{TAGS}">x</a>'
    )


def test_an_unquoted_href_is_tagged_and_written_quoted() -> None:
    html = "<a href=https://shop.example/five>x</a> <a class=b HREF = https://shop.example/six/>y</a>"
    assert html_with_utm(html, UTM) == (
        f'<a href="https://shop.example/five?{TAGS}">x</a> <a class=b HREF = "https://shop.example/six/?{TAGS}">y</a>'
    )


def test_only_the_first_href_is_tagged() -> None:
    html = '<a href="https://a.example/" href="https://b.example/">x</a>'
    assert html_with_utm(html, UTM) == f'<a href="https://a.example/?{TAGS}" href="https://b.example/">x</a>'


def test_whitespace_around_the_url_does_not_end_up_before_the_query() -> None:
    html = '<a href="https://shop.example/seven ">x</a><a href="\n\t https://shop.example/eight#f\n">y</a>'
    assert html_with_utm(html, UTM) == (
        f'<a href="https://shop.example/seven?{TAGS}">x</a><a href="https://shop.example/eight?{TAGS}#f">y</a>'
    )


def test_areas_and_self_closed_links_are_tagged_other_tags_not() -> None:
    html = (
        '<area shape="rect" href="https://a.example/"><a href="https://b.example/"/>'
        '<link href="https://c.example/s.css"><img src="https://d.example/i.png">'
        "<script>var s = '<a href=\"https://e.example/\">';</script>"
    )
    assert html_with_utm(html, UTM) == (
        f'<area shape="rect" href="https://a.example/?{TAGS}"><a href="https://b.example/?{TAGS}"/>'
        '<link href="https://c.example/s.css"><img src="https://d.example/i.png">'
        "<script>var s = '<a href=\"https://e.example/\">';</script>"
    )


# --- what is left alone -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "href",
    ["mailto:x@example.com", "tel:+331234", "#top", "/relative?x=1", "shop://sale", "", "https://[::1/"],
)
def test_links_that_are_not_http_are_untouched(href: str) -> None:
    html = f'<p><a href="{href}">x</a><a name="n">y</a><a href>z</a></p>'
    assert html_with_utm(html, UTM) == html


def test_a_link_with_all_the_keys_is_untouched() -> None:
    html = "<a href='https://a.example/?utm_medium=own&#38;utm_source=own'>x</a>"
    assert html_with_utm(html, UTM) == html


TAGGED = "utm_source=herald&utm_medium=email"


@pytest.mark.parametrize(
    ("url", "tagged"),
    [
        ("HTTPS://SHOP.EXAMPLE/UPPER", f"HTTPS://SHOP.EXAMPLE/UPPER?{TAGGED}"),  # not normalised
        ("https://a.example/x?", f"https://a.example/x?{TAGGED}"),
        ("https://a.example/x??", f"https://a.example/x??&{TAGGED}"),
        ("https://a.example/x?a=1&", f"https://a.example/x?a=1&{TAGGED}"),
        ("https://a.example/x#a?b", f"https://a.example/x?{TAGGED}#a?b"),
        ("https://a.example/x?#", f"https://a.example/x?{TAGGED}#"),
        (" https://a.example/x\n", f"https://a.example/x?{TAGGED}"),  # padding dropped when tagged
        (" https://a.example/?utm_source=a&utm_medium=b ", " https://a.example/?utm_source=a&utm_medium=b "),
        ("http://[::1", "http://[::1"),  # not a URL urlsplit can read
    ],
)
def test_with_utm_keeps_the_url_text_as_written(url: str, tagged: str) -> None:
    assert with_utm(url, UTM) == tagged


# --- property: nothing outside the href values moves ----------------------------------------------------


@dataclass
class Link:
    before: str  # `<a` and the attributes before href, up to `href=`
    url: str  # what the value means (decoded)
    value: str  # the value as written, quotes included
    after: str  # the rest of the start tag, the text and `</a>`


def _texts() -> st.SearchStrategy[str]:
    """Text between links: anything but `<`, with many line breaks of every kind."""
    pieces = st.one_of(
        st.sampled_from([*LINE_BREAKS, "\n", "\r\n", "&", "&amp;", ">", "href='https://x.example/'"]),
        st.characters(exclude_characters="<"),
    )
    return st.lists(pieces, max_size=12).map("".join)


_URL_CHARS = st.sampled_from([*"abcXYZ019-._~/=?", "'", '"', "&", " ", "\u00e9", "\u2028", "\x85", "%20"])


@st.composite
def _urls(draw: st.DrawFn) -> str:
    start = draw(
        st.sampled_from(
            [
                "https://shop.example/",
                "http://a.example",
                "HTTP://B.example/p",
                "mailto:x@",
                "#",
                "/rel",
                "app://x/",
            ]
        )
    )
    rest = "".join(draw(st.lists(_URL_CHARS, max_size=10)))
    fragment = draw(st.sampled_from(["", "#top", "#a?b=1"]))
    # Neither padding around the URL (stripped when tagged) nor an ambiguous `#` inside `rest`.
    return (start + rest + fragment).strip()


def _encode(draw: st.DrawFn, url: str, quote: str) -> str:
    """`url` written as an attribute value in `quote`, with references picked at random."""
    out = []
    for char in url:
        if char == "&":
            out.append(draw(st.sampled_from(["&amp;", "&#38;", "&#x26;"])))
        elif char == quote or (char in "'\"" and draw(st.booleans())):
            out.append(f"&#{ord(char)};")
        else:
            out.append(char)
    return f"{quote}{''.join(out)}{quote}"


@st.composite
def _links(draw: st.DrawFn) -> Link:
    url = draw(_urls())
    bare = not any(char in url for char in " \"'<>`&\u2028\x85")
    quote = draw(st.sampled_from(['"', "'", *([""] if bare else [])]))
    extra_before = draw(
        st.sampled_from(
            ["", ' data-href="https://t.example/"', " title=\"href='https://t.example/'\"", " id=x"]
        )
    )
    extra_after = draw(st.sampled_from(["", ' class="c"', " target=_blank", " data-x='href=y'"]))
    return Link(
        before=f"<a{extra_before} href=",
        url=url,
        value=_encode(draw, url, quote),
        after=f"{extra_after}>{draw(_texts())}</a>",
    )


def _written(url: str, quote: str) -> str:
    quote = quote or '"'
    escaped = url.replace("&", "&amp;")
    escaped = escaped.replace('"', "&quot;") if quote == '"' else escaped.replace("'", "&#39;")
    return f"{quote}{escaped}{quote}"


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.append(next(value or "" for name, value in attrs if name == "href"))


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(_texts(), min_size=1, max_size=6), links=st.lists(_links(), max_size=5))
def test_tagging_changes_the_href_values_only(texts: list[str], links: list[Link]) -> None:
    html, expected = texts[0], texts[0]
    for link, text in zip(links, [*texts[1:], *[""] * len(links)], strict=False):
        tagged = with_utm(link.url, UTM)
        value = (
            link.value
            if tagged == link.url
            else _written(tagged, link.value[:1] if link.value[:1] in "'\"" else "")
        )
        html += f"{link.before}{link.value}{link.after}{text}"
        expected += f"{link.before}{value}{link.after}{text}"

    result = html_with_utm(html, UTM)

    assert result == expected
    hrefs = _Hrefs()
    hrefs.feed(result)
    hrefs.close()
    assert len(hrefs.hrefs) == len(links)
    for href, link in zip(hrefs.hrefs, links, strict=True):
        if urlsplit(link.url).scheme.lower() in ("http", "https"):
            query = parse_qs(urlsplit(href).query)
            assert query["utm_source"] == ["herald"] or "utm_source=" in link.url
            assert query["utm_medium"] == ["email"] or "utm_medium=" in link.url
            assert href.startswith(link.url.partition("#")[0])
        else:
            assert href == link.url
