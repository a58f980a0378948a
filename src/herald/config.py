"""Settings, read from `HERALD_*` environment variables (and `.env`).

A plain dataclass, not a pydantic model: every command of the command line reads it, and importing
pydantic with pydantic-settings took a third of `herald keys list` (benchmarks/README.md, "Command-line
start-up"). The precedence is pydantic-settings' own: the constructor's arguments, then the
environment (names case-insensitive), then `.env` in the working directory, then the defaults.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

_PREFIX = "herald_"
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
# The bounds a number must keep to mean anything: sizes, timeouts, intervals and counts are positive;
# these two may also be 0, which they document (read on every request; never pause).
_MAY_BE_ZERO = frozenset({"credentials_cache_seconds", "delivery_error_threshold", "delivery_turn_seconds"})
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# Upper bounds where a larger value breaks the arithmetic of moments (a lease of 1e11 seconds is past
# the year 9999): a week.
_AT_MOST = {"delivery_lease_seconds": 7 * 86400}
# RFC 9110 `token`: what may stand in a header name (`X-<token>-Request-Id`, `<token>-APPKEY`).
_HEADER_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
# Documentation (the OpenAPI document, the error catalog) is written with this token's header names.
DEFAULT_HEADER_TOKEN = "SVC"
_DATABASE_SCHEMES = ("sqlite+aiosqlite://", "postgresql+asyncpg://")
# Any SQLite URL (`sqlite:///herald.db` too): Herald opens SQLite with its own driver whatever it names.
_SQLITE_URL = re.compile(r"sqlite(\+\w+)?://")


class SettingsError(ValueError):
    """A setting whose value is not one Herald can run with: one line naming it, its value and what
    it should be (the command line prints it as it is, and stops before doing anything)."""


@dataclass(init=False)
class Settings:
    database_url: str = "sqlite+aiosqlite:///./herald.db"
    redis_url: str | None = None
    # Deployments may match the header names of their clients (`X-<token>-Request-Id`, `<token>-APPKEY`).
    header_token: str = DEFAULT_HEADER_TOKEN
    # Public address used in links (`doc_url`, OpenAPI `servers`); unset: the request's own scheme and host.
    base_url: str | None = None
    max_body_bytes: int = 1024 * 1024
    max_json_depth: int = 32
    # Bounds `herald serve` puts on a request at the socket (herald.http.server): the size of its
    # request line and header fields (431 past it), the time to receive its head and its body (408).
    max_header_bytes: int = 64 * 1024
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 60.0
    # How long a process keeps an API key's row and its workspace's settings (herald.workspaces.credentials):
    # the bound on how late a revoked key, a changed scope, rate limit or feature flag takes effect.
    credentials_cache_seconds: float = 1.0
    # Connections a process keeps open (PostgreSQL: its limit too, so processes times this must stay
    # under the server's max_connections; SQLite: as many again in a burst). An API request holds
    # one from its first statement to its end, so this is about the number of requests a process
    # has in flight at once; with fewer, requests wait for one (or, with an overflow, connections
    # are opened and closed all the time, each a handshake with the server).
    db_pool_size: int = 20
    # PostgreSQL: how long opening a connection may take (a server that accepts and never answers
    # is answered 503 after this, instead of after asyncpg's own 60 s).
    db_connect_timeout_seconds: float = 10.0
    # PostgreSQL: how long one statement may wait for the server's answer (a server, or a network
    # path, that holds its connections open and stops answering: without it a request waited for
    # as long as the server did, and answered nothing; with it, 503 after this). Above any statement
    # Herald runs on a healthy server (the largest: a chunk of an audience written, seconds).
    db_statement_timeout_seconds: float = 60.0
    log_level: str = "info"
    # "json": one JSON object per log line; anything else: readable `key=value` lines.
    log_format: str = "text"
    # GET /metrics (Prometheus text); "off" removes the route (404).
    metrics: bool = True
    # On SIGTERM, in-flight requests get this long to finish before connections are closed.
    shutdown_timeout_seconds: int = 30
    # How long an idle kept-alive connection stays open for the client's next request. Behind a
    # load balancer that keeps connections to its servers, set it above the balancer's idle
    # timeout: a server closing first races the balancer's next request on that connection.
    keepalive_seconds: int = 5
    # Run the scheduled-transitions worker inside the API process (`herald serve` turns it on for a
    # one-process SQLite deployment; elsewhere run `herald worker`).
    in_process_worker: bool = False
    worker_interval_seconds: float = 15.0
    # Fernet key(s) that encrypt connector secrets at rest: comma-separated, the first encrypts and
    # every one decrypts (rotation). Without it, connectors that carry secrets cannot be stored.
    secret_key: str | None = field(default=None, repr=False)
    # Default time limit for one delivery attempt (SMTP session or webhook call), in seconds.
    delivery_timeout_seconds: float = 10.0
    # Webhook requests a worker has in flight at once, each on a kept-alive connection of its own.
    # A campaign's windows take half of them each, two out at once: with fewer, a window's two
    # transactions are shared by too few messages (benchmarks/README.md, seventeenth pass).
    delivery_concurrency: int = 32
    # SMTP connections a worker has open at once: mail relays commonly refuse more per client.
    delivery_smtp_connections: int = 8
    # A campaign message that fails transiently (SMTP 4xx, webhook 5xx/408/429, no connection, a
    # timeout) is attempted again after `delivery_retry_seconds`, doubling each time up to
    # `delivery_retry_max_seconds`, at most `delivery_max_attempts` attempts in all; then FAILED.
    delivery_max_attempts: int = 5
    delivery_retry_seconds: float = 30.0
    delivery_retry_max_seconds: float = 3600.0
    # This many failed attempts in a row through one connector (in one worker's run) pause the
    # execution with the reason, instead of burning through the audience; 0 never pauses.
    delivery_error_threshold: int = 20
    # A user claimed this long ago by a worker that has not settled it belongs to a worker that
    # died: another worker takes it over (read on the worker's clock).
    delivery_lease_seconds: float = 300.0
    # A campaign's dispatch gives way after this long once other work was woken meanwhile (a
    # publish, an event firing a trigger): the tick goes on to it and the dispatch goes on at the
    # next tick, at once. A dispatch alone sends to its end.
    delivery_turn_seconds: float = 0.25
    # Sandbox time travel and multi-process tests: read "now" from this file (epoch seconds).
    clock_file: str | None = None

    def __init__(self, **given: Any) -> None:
        """`Settings()` reads the environment; a keyword argument replaces what it would read."""
        known = {f.name: f for f in dataclasses.fields(self)}
        unknown = given.keys() - known.keys()
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        read = {**_dotenv(), **_environment()}
        for name, spec in known.items():
            if name in given or name in read:
                raw = given[name] if name in given else read[name]
                value = _coerce(name, str(spec.type), raw)
                _check(name, value, raw)
            else:
                value = spec.default
            setattr(self, name, value)

    @cached_property
    def request_id_header(self) -> str:
        return f"X-{self.header_token}-Request-Id"

    @cached_property
    def app_key_header(self) -> str:
        return f"{self.header_token}-APPKEY"

    def with_header_names(self, text: str) -> str:
        """`text`, written with the default token's header names, naming this deployment's."""
        if self.header_token == DEFAULT_HEADER_TOKEN:
            return text
        return text.replace(f"X-{DEFAULT_HEADER_TOKEN}-Request-Id", self.request_id_header).replace(
            f"{DEFAULT_HEADER_TOKEN}-APPKEY", self.app_key_header
        )

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def _environment() -> dict[str, str]:
    return {
        name.lower().removeprefix(_PREFIX): value
        for name, value in os.environ.items()
        if name.lower().startswith(_PREFIX)
    }


def _dotenv() -> dict[str, str]:
    if not os.path.isfile(".env"):
        return {}
    from dotenv import dotenv_values  # only when there is a file to read

    return {
        name.lower().removeprefix(_PREFIX): value
        for name, value in dotenv_values(".env", encoding="utf-8").items()
        if name.lower().startswith(_PREFIX) and value is not None
    }


def _coerce(name: str, kind: str, value: Any) -> Any:
    """`value` (a string from the environment, or what the caller gave) as the field's type, with the
    conversions pydantic made: numbers from strings, booleans from on/off, yes/no, true/false, 1/0."""
    if value is None and kind.endswith(" | None"):
        return None
    base = kind.removesuffix(" | None")
    try:
        if base == "str" and isinstance(value, str):
            return value
        if base == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
        elif base == "int" and not isinstance(value, bool | float):
            return int(value)
        elif base == "float" and not isinstance(value, bool):
            return float(value)
    except ValueError:
        pass
    if base in ("int", "float"):
        raise _invalid(name, value, _number(name, base))
    raise _invalid(name, value, "on or off (true/false, yes/no, 1/0)" if base == "bool" else f"a {base}")


def _number(name: str, base: str) -> str:
    kind = "a whole number" if base == "int" else "a finite number"
    if name in _MAY_BE_ZERO:
        return f"{kind} >= 0"
    return f"{kind} >= 1" if base == "int" else f"{kind} > 0"


def _check(name: str, value: Any, raw: Any) -> None:
    """Refuse a value of the right type that Herald cannot run with (see `_MAY_BE_ZERO`); `raw` is
    what was given, repeated in the error."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        low_ok = value >= 0 if name in _MAY_BE_ZERO else value > 0
        if not (math.isfinite(value) and low_ok):
            raise _invalid(name, raw, _number(name, "int" if isinstance(value, int) else "float"))
        if name in _AT_MOST and value > _AT_MOST[name]:
            raise _invalid(name, raw, f"a number of seconds up to {_AT_MOST[name]:,}")
    elif name == "header_token" and not _HEADER_TOKEN.fullmatch(value):
        raise _invalid(name, raw, "a non-empty header token (letters, digits, !#$%&'*+-.^_`|~)")
    elif name == "log_level" and value.lower() not in _LOG_LEVELS:
        raise _invalid(name, raw, f"one of {', '.join(_LOG_LEVELS)}")
    elif name == "redis_url":
        _check_redis_url(value)
    elif name == "base_url" and not _is_base_url(value):
        raise _invalid(name, raw, "an http:// or https:// URL (scheme, host, optional port and path)")
    elif name == "secret_key" and not _are_fernet_keys(value):
        # The value is a secret: not repeated.
        raise SettingsError(
            "HERALD_SECRET_KEY is not valid: expected Fernet keys, comma-separated (32 url-safe base64 "
            "bytes each); make one with `herald connectors keygen`"
        )
    elif name == "database_url" and not (value.startswith(_DATABASE_SCHEMES) or _SQLITE_URL.match(value)):
        raise _invalid(name, _shown_url(value), f"a URL starting {' or '.join(_DATABASE_SCHEMES)}")
    elif name == "database_url" and value.startswith("postgresql"):
        _check_postgresql_url(value)


# The options of a PostgreSQL URL every connection Herald opens takes: the engine's (SQLAlchemy's
# asyncpg dialect, keyword arguments) and the plain ones' (asyncpg's DSN: the CLI's reads, the
# wake-up listener). Any other went to one as a keyword it refused, to the other as a server
# setting PostgreSQL refused. `ssl` and `sslmode` are one option (`herald.plain_sql` writes each
# connection's spelling).
POSTGRESQL_URL_OPTIONS = (
    "host", "port", "user", "password", "passfile", "database", "ssl", "sslmode",
    "target_session_attrs", "krbsrvname", "gsslib",
)  # fmt: skip


def _check_postgresql_url(value: str) -> None:
    from urllib.parse import parse_qsl

    shown = _shown_url(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - read for its check (a number within 0-65535)
    except ValueError as exc:
        raise SettingsError(f"HERALD_DATABASE_URL={shown!r} is not valid: {exc}") from None
    unknown = sorted({key for key, _ in parse_qsl(parts.query)} - set(POSTGRESQL_URL_OPTIONS))
    if unknown:
        raise SettingsError(
            f"HERALD_DATABASE_URL={shown!r} is not valid: unknown option {', '.join(unknown)} "
            f"(options: {', '.join(POSTGRESQL_URL_OPTIONS)})"
        )


def _check_redis_url(value: str) -> None:
    from redis.connection import parse_url  # only when one is configured

    try:
        options = parse_url(value)  # type: ignore[no-untyped-call]
    except ValueError as exc:  # the scheme, or an option's value (`?socket_timeout=abc`)
        raise SettingsError(f"HERALD_REDIS_URL={_shown_url(value)!r} is not valid: {exc}") from None
    negative = sorted(
        name for name, option in options.items() if isinstance(option, float) and not option > 0
    )
    if negative:  # a timeout of -1 made every request waiting on Redis a 503
        raise SettingsError(f"HERALD_REDIS_URL={_shown_url(value)!r} is not valid: {negative[0]} must be > 0")


def _shown_url(value: str) -> str:
    """A connection URL as an error repeats it: its scheme only (the rest may hold a password)."""
    return (value.partition("://")[0] + "://" if "://" in value else value[:20]) + "..."


def _is_base_url(value: str) -> bool:
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (raises for a port out of range)
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not parts.query
        and not parts.fragment
        and not any(char.isspace() or char in '"<>\\^`{|}' for char in value)
    )


def _are_fernet_keys(value: str) -> bool:
    """What `delivery.crypto.SecretBox` takes, checked without loading the cryptography package."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if not parts:
        return False
    for part in parts:
        try:
            if len(base64.urlsafe_b64decode(part.encode())) != 32:
                return False
        except (binascii.Error, ValueError):
            return False
    return True


def _invalid(name: str, value: Any, expected: str) -> SettingsError:
    return SettingsError(f"HERALD_{name.upper()}={str(value)!r} is not valid: expected {expected}")
