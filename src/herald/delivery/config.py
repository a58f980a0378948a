"""What a connector is made of, and the pure rules a new one must pass (contract §9).

Kinds: `CUSTOM_SMTP` speaks SMTP; every other type is a signed HTTPS webhook. `CUSTOM_API` carries
e-mail or push (its `channel`); `SENDGRID`, `AMAZON_SES`, `SPARKPOST`, `MANDRILL` and `NETCORE` are
accepted as the names of e-mail webhooks (a relay in front of that provider), so campaigns written
for them find a configured connector.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

import idna

from herald.campaigns.schemas.common import Channel
from herald.campaigns.schemas.connector import ConnectorType
from herald.control_characters import has_control_character
from herald.email_address import RECIPIENT_RULE, is_recipient_address


class Security(StrEnum):
    NONE = "none"  # plain SMTP (a local relay); never upgraded behind the user's back
    STARTTLS = "starttls"  # plain connection upgraded with STARTTLS, which is required
    TLS = "tls"  # TLS from the first byte (SMTPS)


DEFAULT_PORTS = {Security.NONE: 25, Security.STARTTLS: 587, Security.TLS: 465}
CONNECTOR_CHANNELS = (Channel.EMAIL, Channel.PUSH)
EMAIL_WEBHOOK_TYPES = frozenset(
    {
        ConnectorType.SENDGRID,
        ConnectorType.AMAZON_SES,
        ConnectorType.SPARKPOST,
        ConnectorType.MANDRILL,
        ConnectorType.NETCORE,
    }
)
MAX_TIMEOUT_SECONDS = 120.0
# Webhook batching: messages per POST (1, the default, is one message per POST).
MAX_BATCH_SIZE = 1000
# SMTP: messages one connection carries before it is closed and a new one opened.
DEFAULT_SESSION_MESSAGES = 100
MAX_SESSION_MESSAGES = 10_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,99}$")
_HOST = re.compile(r"^[A-Za-z0-9.\-:\[\]]+$")


def is_smtp(connector_type: str) -> bool:
    return connector_type == ConnectorType.CUSTOM_SMTP


@dataclass(frozen=True)
class ConnectorInput:
    """A connector as the administrator describes it (CLI); secrets are plain here, only here."""

    name: str
    type: str
    channel: str | None = None
    # SMTP
    host: str | None = None
    port: int | None = None
    security: str | None = None
    username: str | None = None
    password: str | None = None
    senders: tuple[str, ...] = ()
    ca_file: str | None = None
    session_messages: int | None = None  # messages per SMTP connection (DEFAULT_SESSION_MESSAGES)
    # webhook
    url: str | None = None
    secret: str | None = None
    timeout: float | None = None
    batch_size: int | None = None  # live messages per POST (1: one per POST)


@dataclass(frozen=True)
class CheckedConnector:
    """A connector that passed the rules: what may be shown, and what must be sealed."""

    name: str
    type: ConnectorType
    channel: Channel
    settings: dict[str, object] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_webhook_url(url: str) -> str | None:
    """None when `url` may receive webhooks; else why not. HTTPS, or HTTP to loopback only."""
    if has_control_character(url):
        # The URL parser drops a line break, so the requests would go where the listing does not say.
        return "the URL must not hold control characters"
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises for a port that is not a number in range
    except ValueError:
        return "the URL cannot be read"
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        return "the URL must be https://host/path"
    if parts.scheme == "http" and not _is_loopback(host):
        return "plain http is allowed only for loopback hosts (localhost, 127.0.0.1, ::1); use https"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL would be shown in listings; authenticate with the HMAC secret"
    if parts.fragment:
        return "the URL must not have a #fragment"
    return None


def shown_url(url: str) -> str:
    """The URL as listings and failure reasons show it: the query string may hold a token."""
    parts = urlsplit(url)
    shown = f"{parts.scheme}://{parts.netloc}{parts.path}"
    return shown + ("?…" if parts.query else "")


def _check_sender(value: str) -> str | None:
    # The rule of every address Herald sends to or from (`email_address.is_recipient_address`):
    # the relay decides what it takes, so a sandbox's sender at `localhost` or a `.test` domain is
    # as good as its users' addresses there.
    if value.startswith("@"):
        # A domain the connector's `from_address`es may have: `postmaster` at it must be one.
        if not is_recipient_address(f"postmaster{value}"):
            return f"'{value}' is not '@domain' ({RECIPIENT_RULE})"
        return None
    if not is_recipient_address(value):
        return f"'{value}' is not an e-mail address ({RECIPIENT_RULE})"
    return None


def sender_allowed(address: str, senders: Sequence[str]) -> bool:
    """Whether `address` is a verified sender: listed, or at a listed `@domain`. None listed: any."""
    if not senders:
        return True
    given = _comparable(address)
    for sender in senders:
        wanted = _comparable(sender)
        if given == wanted or (wanted.startswith("@") and given.endswith(wanted)):
            return True
    return False


def _comparable(address: str) -> str:
    """`address` (or `@domain`) as senders are compared: lower case, an internationalized domain
    in its ASCII form (`bücher.example` and `xn--bcher-kva.example` are one domain, and a server
    without SMTPUTF8 is sent the second)."""
    local, at, domain = address.strip().rpartition("@")
    if not domain.isascii():
        with contextlib.suppress(idna.IDNAError):
            domain = idna.encode(domain, uts46=True).decode("ascii")
    return f"{local}{at}{domain}".lower()


def not_a_verified_sender(address: str, senders: Sequence[str]) -> str:
    """Why a message from `address` is not sent through a connector with these verified senders:
    one wording for publish, C4, test sends and the send itself."""
    return f"'{address}' is not a verified sender of the connector ({', '.join(senders)})."


def _check_timeout(timeout: float | None, errors: list[str]) -> None:
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        errors.append(f"--timeout must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds")


def _channel(given: ConnectorInput, kind: ConnectorType, errors: list[str]) -> Channel:
    wanted = (given.channel or "EMAIL").upper()
    if wanted not in {c.value for c in CONNECTOR_CHANNELS}:
        errors.append("--channel must be email or push")
        return Channel.EMAIL
    channel = Channel(wanted)
    if channel is Channel.PUSH and kind is not ConnectorType.CUSTOM_API:
        errors.append(f"{kind.value} connectors carry e-mail; push goes through a CUSTOM_API webhook")
    return channel


def _ca_file_problem(path: str) -> str | None:
    """Why `path` cannot verify the SMTP server's certificate, or None: it is read as the sends will
    read it (a file holding no certificate was taken, and every send then failed)."""
    if not os.path.isfile(path):
        return f"--ca-file {path} is not a readable file"
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        return f"--ca-file {path} holds no certificate this server can use ({exc})"
    return None


def _check_smtp(given: ConnectorInput, errors: list[str]) -> tuple[dict[str, object], dict[str, str]]:
    if given.url or given.secret:
        errors.append("--url and --secret belong to webhook connectors, not CUSTOM_SMTP")
    host = (given.host or "").strip()
    if not host:
        errors.append("--host is required: the SMTP server's name or address, without a scheme")
    elif not _HOST.fullmatch(host):
        errors.append(f"--host {host!r} is not a server name or address (give it without a scheme)")
    try:
        security = Security((given.security or Security.STARTTLS.value).lower())
    except ValueError:
        errors.append("--security must be none, starttls or tls")
        security = Security.STARTTLS
    port = given.port if given.port is not None else DEFAULT_PORTS[security]
    if not 1 <= port <= 65535:
        errors.append("--port must be 1-65535")
    if bool(given.username) != bool(given.password):
        errors.append("--username and --password go together")
    errors.extend(problem for sender in given.senders if (problem := _check_sender(sender)))
    if given.ca_file and (problem := _ca_file_problem(given.ca_file)):
        errors.append(problem)
    if given.batch_size is not None:
        errors.append("--batch-size belongs to webhook connectors, not CUSTOM_SMTP")
    if given.session_messages is not None and not 1 <= given.session_messages <= MAX_SESSION_MESSAGES:
        errors.append(f"--session-messages must be 1-{MAX_SESSION_MESSAGES}")
    settings: dict[str, object] = {
        "host": host,
        "port": port,
        "security": security.value,
        "username": given.username or None,
        "senders": list(given.senders),
        "ca_file": given.ca_file or None,
        "timeout": given.timeout,
        "session_messages": given.session_messages,
    }
    return settings, ({"password": given.password} if given.password else {})


def _check_webhook(
    given: ConnectorInput, errors: list[str], generate_secret: str
) -> tuple[dict[str, object], dict[str, str]]:
    smtp_only = (given.host, given.port, given.security, given.username, given.password, given.ca_file)
    if any(value is not None for value in smtp_only) or given.senders or given.session_messages is not None:
        errors.append(
            "--host, --port, --security, --username, --password, --sender, --ca-file, --session-messages"
            " belong to CUSTOM_SMTP"
        )
    if given.batch_size is not None and not 1 <= given.batch_size <= MAX_BATCH_SIZE:
        errors.append(f"--batch-size must be 1-{MAX_BATCH_SIZE}")
    if not given.url:
        errors.append("--url is required for webhook connectors")
    elif problem := check_webhook_url(given.url):
        errors.append(f"--url: {problem}")
    secret = given.secret if given.secret is not None else generate_secret
    if len(secret) < 16:
        errors.append("--secret must be at least 16 characters (or leave it out to have one generated)")
    settings: dict[str, object] = {"url": given.url, "timeout": given.timeout, "batch_size": given.batch_size}
    return settings, {"hmac_secret": secret}


def check_connector(given: ConnectorInput, generate_secret: str) -> tuple[CheckedConnector | None, list[str]]:
    """Every problem with `given`, or the connector to store. `generate_secret` is used as the
    webhook's HMAC secret when none was given."""
    errors: list[str] = []
    if not _NAME.fullmatch(given.name):
        errors.append(
            "--name must be 1-100 letters, digits, spaces, '_', '.' or '-', starting with a letter or digit"
        )
    try:
        kind = ConnectorType(given.type.upper())
    except ValueError:
        errors.append(f"--type must be one of {', '.join(t.value for t in ConnectorType)}")
        return None, errors
    channel = _channel(given, kind, errors)
    _check_timeout(given.timeout, errors)
    if is_smtp(kind):
        settings, secrets = _check_smtp(given, errors)
    else:
        settings, secrets = _check_webhook(given, errors, generate_secret)
    if errors:
        return None, errors
    return CheckedConnector(given.name, kind, channel, settings, secrets), []
