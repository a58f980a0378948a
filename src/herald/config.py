"""Settings, read from `HERALD_*` environment variables (and `.env`).

A plain dataclass, not a pydantic model: every command of the command line reads it, and importing
pydantic with pydantic-settings took a third of `herald keys list` (benchmarks/README.md, "Command-line
start-up"). The precedence is pydantic-settings' own: the constructor's arguments, then the
environment (names case-insensitive), then `.env` in the working directory, then the defaults.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

_PREFIX = "herald_"
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


@dataclass(init=False)
class Settings:
    database_url: str = "sqlite+aiosqlite:///./herald.db"
    redis_url: str | None = None
    # Deployments may match the header names of their clients (`X-<token>-Request-Id`, `<token>-APPKEY`).
    header_token: str = "SVC"
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
    log_level: str = "info"
    # "json": one JSON object per log line; anything else: readable `key=value` lines.
    log_format: str = "text"
    # GET /metrics (Prometheus text); "off" removes the route (404).
    metrics: bool = True
    # On SIGTERM, in-flight requests get this long to finish before connections are closed.
    shutdown_timeout_seconds: int = 30
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
            if name in given:
                value = _coerce(name, str(spec.type), given[name])
            elif name in read:
                value = _coerce(name, str(spec.type), read[name])
            else:
                value = spec.default
            setattr(self, name, value)

    @cached_property
    def request_id_header(self) -> str:
        return f"X-{self.header_token}-Request-Id"

    @cached_property
    def app_key_header(self) -> str:
        return f"{self.header_token}-APPKEY"

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
    raise ValueError(f"setting {name} (HERALD_{name.upper()}): {value!r} is not a valid {base}")
