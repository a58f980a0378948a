"""Cheap checks on raw requests, applied before any routing or parsing."""

from __future__ import annotations

import json
import math
import re
import sys
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import unquote_to_bytes

from herald.control_characters import has_control_character
from herald.problems import Problem, join_path

# A JSON string, escapes included (the unrolled form: a run of plain bytes at a time, not one
# alternation per byte, which cost 0.1 ms on a 2 KB campaign body).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Every byte but a quote and a bracket, for `bytes.translate` to delete.
_NOT_QUOTE_OR_BRACKET = bytes(byte for byte in range(256) if byte not in b'"[]{}')
# An opening bracket as the signed byte +1, a closing one as -1 (0xff).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


_CONTROL_CHARACTER = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def has_control_characters(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """True when any header name or value holds an ASCII control character (HTAB aside)."""
    # One scan over all the bytes (a space cannot hide a control character; it is not one).
    return _CONTROL_CHARACTER.search(b" ".join(part for header in headers for part in header)) is not None


@dataclass(frozen=True, slots=True)
class HeaderProblem:
    """Why a request's head is refused: the answer's status and code, and the header at fault."""

    status: int
    code: str
    message: str
    header: str


# The one transfer coding a request may use (RFC 9112 §7): `herald serve` decodes chunked framing,
# nothing else (a gzip body would reach the handlers as bytes that are not JSON).
_CHUNKED = b"chunked"
# The content coding of a body read as sent (RFC 9110 §8.4.1).
_IDENTITY = b"identity"
# The one expectation a server meets (RFC 9110 §10.1.1); its token is case-insensitive.
_CONTINUE = b"100-continue"
# A Host header's value (RFC 9112 §3.2: a server MUST answer 400 to an invalid one): uri-host
# [":" port] of RFC 3986, an IP literal in brackets or a name of unreserved characters,
# percent-escapes and sub-delims (empty when the target has no authority).
_HOST = re.compile(rb"(?:\[[0-9A-Za-z:._~!$&'()*+,;=%-]+\]|[0-9A-Za-z._~!$&'()*+,;=%-]*)(?::[0-9]*)?")


# RFC 9110 §9, RFC 5789 (PATCH) and the HTTP QUERY method (a safe GET with a body, which clients
# and API checkers already send): the methods a resource may answer 405 to. Any other method,
# however well formed, is one Herald implements nowhere: 501 (RFC 9110 §9.1, §15.6.2).
KNOWN_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY"}
)
# A method is a token (RFC 9110 §5.6.2): one or more of these.
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def is_token(text: bytes) -> bool:
    """Whether `text` is an RFC 9110 token: a well-formed method name, known or not."""
    return _TOKEN.fullmatch(text) is not None


def header_problem(
    headers: Iterable[tuple[bytes, bytes]], singular: frozenset[bytes], http_version: str
) -> HeaderProblem | None:
    """Why the request's headers are refused, or None: a header that carries one value given twice
    (`singular`: lower-case names), or no `Host` on HTTP/1.1 (RFC 9112 §3.2), 400; a transfer
    coding other than chunked, 501 (RFC 9112 §6.1); a content coding other than identity, 415
    (RFC 9110 §15.5.16); an expectation other than 100-continue, 417
    (RFC 9110 §10.1.1). Two `Authorization` headers were read as the first: a proxy in front
    reading the last would have authenticated someone else."""
    seen: set[bytes] = set()
    host = False
    for name, value in headers:
        if name == b"host":
            host = True
            if not _HOST.fullmatch(value.strip()):
                message = "The Host header must be a host name or address, with an optional port."
                return HeaderProblem(400, "BAD_REQUEST", message, "host")
        if name in singular:
            if name in seen:
                text = name.decode("latin-1")
                return HeaderProblem(400, "BAD_REQUEST", f"The {text} header must be given once.", text)
            seen.add(name)
        elif name == b"transfer-encoding" and (unknown := _other_coding(value, _CHUNKED)):
            message = f"The transfer coding '{unknown}' is not supported; send the body as is or chunked."
            return HeaderProblem(501, "NOT_IMPLEMENTED", message, "transfer-encoding")
        elif name == b"content-encoding" and (unknown := _other_coding(value, _IDENTITY)):
            # The body is read as sent: a compressed one would be judged as bytes that are not JSON,
            # or read as JSON it does not hold (RFC 9110 §8.4.1 lets a server refuse a coding).
            message = f"The content coding '{unknown}' is not supported; send the body uncompressed."
            return HeaderProblem(415, "UNSUPPORTED_MEDIA_TYPE", message, "content-encoding")
        elif name == b"expect" and value.strip().lower() != _CONTINUE:
            message = "The only expectation this server meets is 100-continue."
            return HeaderProblem(417, "EXPECTATION_FAILED", message, "expect")
    if not host and http_version == "1.1":
        return HeaderProblem(400, "BAD_REQUEST", "An HTTP/1.1 request must carry a Host header.", "host")
    return None


def _other_coding(value: bytes, supported: bytes) -> str | None:
    """The first coding of the header list `value` that is not `supported` (case-insensitive; a
    list's empty elements count for nothing, RFC 9110 §5.6.1), or None."""
    codings = (coding for part in value.split(b",") if (coding := part.strip().lower()))
    unknown = next((coding for coding in codings if coding != supported), None)
    return unknown.decode("latin-1") if unknown is not None else None


def query_problems(query_string: bytes) -> list[Problem]:
    """One INVALID_TYPE problem per query parameter whose name or value, percent-decoded, is not UTF-8
    or holds a control character (every route's query string is checked here, before any handler
    reads it). Split as Starlette splits it (`&`, then the first `=`, `+` for space), so the target
    names the parameter the route would have read."""
    problems: list[Problem] = []
    for field in query_string.split(b"&"):
        if not field:
            continue
        raw_name, _, raw_value = field.partition(b"=")
        name_bytes = unquote_to_bytes(raw_name.replace(b"+", b" "))
        value_bytes = unquote_to_bytes(raw_value.replace(b"+", b" "))
        name = name_bytes.decode("utf-8", "replace")
        try:
            text = name_bytes.decode("utf-8") + value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(
                Problem("INVALID_TYPE", name, "Must be UTF-8 text (percent-escapes of UTF-8 bytes).")
            )
            continue
        if has_control_character(text):
            problems.append(Problem("INVALID_TYPE", name, "Must not contain control characters."))
    return list(dict.fromkeys(problems))  # a parameter repeated with one fault: named once


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True when the JSON text nests arrays/objects deeper than `limit` (strings are skipped)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    # Byte-level passes only (a regular expression's replacement per string cost ~50 µs on a 2 KB
    # campaign body): escapes out, so that no escaped quote ends a string (an escaped backslash is
    # taken first, as a reader pairs them left to right), then quotes and brackets alone. Between
    # the quotes, even pieces are outside strings; an unterminated string's rest counts as outside.
    structure = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_QUOTE_OR_BRACKET)
    pieces = structure.split(b'"')
    outside = pieces[::2] if len(pieces) % 2 else [*pieces[::2], pieces[-1]]
    steps = array("b", b"".join(outside).translate(_STEPS))
    return max(accumulate(steps), default=0) > limit


_NON_FINITE = re.compile(rb"(?<![A-Za-z0-9_])-?(?:NaN|Infinity)(?![A-Za-z0-9_])")


def has_non_finite_number(body: bytes) -> bool:
    """True when the JSON text uses NaN or Infinity outside strings (Python reads them; JSON has no
    such numbers, and no database column takes them)."""
    if b"NaN" not in body and b"Infinity" not in body:
        return False
    return bool(_NON_FINITE.search(_JSON_STRING.sub(b'""', body)))


def is_utf8(body: bytes) -> bool:
    """JSON text is UTF-8 (RFC 8259). Python's JSON reader decodes with `surrogatepass`, so without
    this check surrogates encoded as UTF-8 bytes would become text that cannot be stored."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# `\u0000` as an escape: after an even run of backslashes (`\\u0000` is a backslash, then text).
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def has_escaped_nul(body: bytes) -> bool:
    """JSON strings may spell NUL as \\u0000; no stored text may hold it (PostgreSQL refuses it)."""
    return b"\\u0000" in body and _NUL_ESCAPE.search(body) is not None


# A number a double cannot hold is written with a long exponent or hundreds of digits; a string
# that looks like one is told apart by reading the body (`infinite_number_path`).
_HUGE_NUMBER = re.compile(rb"\d(?:\.\d*)?[eE][+-]?\d{3,}|\d{309,}")


def infinite_number_path(body: bytes) -> str | None:
    """The dot path ("" for the body itself) of a number too large for a double (`1e400`, or a
    whole number of 400 digits): JSON readers make it infinity, which no column stores (it became
    null, and unset an attribute), and a whole number is read as the double it equals
    (`json_numbers.wide_as_doubles`), which there is not. None when there is none, or the body is
    not readable JSON (refused on its own account)."""
    if _HUGE_NUMBER.search(body) is None:
        return None
    return _number_path(body, _beyond_a_double)


class NotAJsonNumber(ValueError):
    """NaN or Infinity (the constant), which Python's JSON reader takes for numbers."""


class BeyondADouble(ValueError):
    """A number no double holds, at `path` (`infinite_number_path`)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def _not_a_json_number(constant: str) -> Any:
    raise NotAJsonNumber(constant)


def read_json_text(text: str) -> Any:
    """`text` read as the API reads a body's numbers, for what reads JSON outside a request (the
    command line): NaN and Infinity refused (`NotAJsonNumber`), a number no double holds refused
    (`BeyondADouble`), a whole number beyond 64 bits the double nearest it. Any other fault raises
    as `json.loads` does (a JSONDecodeError; a ValueError for more digits than it reads)."""
    from herald.json_numbers import wide_as_doubles  # (it loads pydantic; a request has it already)

    value = json.loads(text, parse_constant=_not_a_json_number)
    raw = text.encode()
    if (path := infinite_number_path(raw)) is not None:
        raise BeyondADouble(path)
    return wide_as_doubles(value, raw)


def _beyond_a_double(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return type(value) is int and abs(value) > sys.float_info.max


def _number_path(body: bytes, wanted: Callable[[Any], bool]) -> str | None:
    """The dot path of the first value of the JSON body that is `wanted` (a number no column
    holds), once a pattern over the bytes has said one may be there; None as for
    `infinite_number_path`."""
    try:
        found = _path_to(json.loads(body), wanted)
    except (ValueError, RecursionError):
        return None
    return None if found is None else join_path(*found)


def nul_path(body: bytes) -> str | None:
    """The dot path of the first string (or key) of the JSON body holding NUL (`has_escaped_nul`),
    for the error to name; None when the body is not readable JSON, or is that string itself."""
    return _string_path(body, lambda text: "\x00" in text)


def surrogate_path(body: bytes) -> str | None:
    """The dot path of the first string (or key) of the JSON body holding an unpaired surrogate
    (`has_lone_surrogate`: Python's reader keeps one as a character of its own); None as for
    `nul_path`."""
    return _string_path(body, lambda text: any(_is_surrogate(character) for character in text))


def _string_path(body: bytes, bad: Callable[[str], bool]) -> str | None:
    try:
        found = _path_to(json.loads(body), lambda value: isinstance(value, str) and bad(value))
    except (ValueError, RecursionError):  # not JSON (refused on its own account), or nested too deep
        return None
    if not found:
        return None
    return join_path(*(_escaped(part) if isinstance(part, str) else part for part in found))


def _is_surrogate(character: str) -> bool:
    return 0xD800 <= ord(character) <= 0xDFFF


def _escaped(key: str) -> str:
    """A key as the path names it: NUL and unpaired surrogates as JSON escapes (an answer cannot
    carry them)."""
    return "".join(
        f"\\u{ord(character):04x}" if character == "\x00" or _is_surrogate(character) else character
        for character in key
    )


def _path_to(
    value: Any, wanted: Callable[[Any], bool], path: tuple[str | int, ...] = ()
) -> tuple[str | int, ...] | None:
    """The path of the first value, or object key, of a JSON document that is `wanted` (depth first)."""
    if wanted(value):
        return path
    items: Iterable[tuple[str | int, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, item in items:
        if isinstance(key, str) and wanted(key):
            return (*path, key)
        found = _path_to(item, wanted, (*path, key))
        if found is not None:
            return found
    return None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def has_lone_surrogate(body: bytes) -> bool:
    """JSON strings may spell UTF-16 surrogates as \\uD800-\\uDFFF; only a high one directly followed
    by a low one names a character. Python's JSON reader keeps a lone one as text that cannot be
    encoded (no database stores it, no response can carry it)."""
    if not _SURROGATE_ESCAPE.search(body):
        return False
    high_ends_at: int | None = None  # just past an unpaired high surrogate
    for escape in _ESCAPE.finditer(body):  # left to right: an escaped backslash is consumed whole
        unit = int(escape.group(1), 16) if escape.group(1) else None
        is_low = unit is not None and 0xDC00 <= unit <= 0xDFFF
        if high_ends_at is not None:
            if not (is_low and escape.start() == high_ends_at):
                return True
            high_ends_at = None
        elif is_low:
            return True
        elif unit is not None and 0xD800 <= unit <= 0xDBFF:
            high_ends_at = escape.end()
    return high_ends_at is not None


CONTENT_TYPE = "Content-Type"


def json_content_type_problem(value: str) -> str | None:
    """Why a body sent with Content-Type `value` is not read as JSON, or None: the media type is
    JSON's (or a `+json` one), and a `charset` it names is UTF-8, the only one JSON text has (RFC
    8259 §8.1; a body declared UTF-16 or Latin-1 was read as UTF-8 all the same)."""
    media_type, _, parameters = value.partition(";")
    media_type = media_type.strip().lower()
    if not (
        media_type == "application/json"
        or (media_type.startswith("application/") and media_type.endswith("+json"))
    ):
        return "The request body must be JSON, sent with Content-Type: application/json."
    for parameter in parameters.split(";"):
        name, _, given = parameter.partition("=")
        if name.strip().lower() == "charset" and given.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return f"The request body must be UTF-8 JSON; charset={given.strip()} is not read."
    return None


# A UUID v4 as the request-id and Idempotency-Key headers take it: the hyphenated text form, hex of
# either case, version nibble 4, RFC 9562 variant (10xx). The OpenAPI document states this pattern
# (`herald.http.openapi.UUID4`): no other spelling `uuid.UUID` reads (32 bare digits, braces, a
# `urn:uuid:` prefix) is accepted, so what is echoed back is what the document promises.
UUID4_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"
_UUID4 = re.compile(UUID4_PATTERN)


def parse_uuid4(value: str) -> str | None:
    """The canonical (lower-case) form of a UUID v4 written as `UUID4_PATTERN` says, or None."""
    return value.lower() if _UUID4.fullmatch(value) else None
