"""Real servers on 127.0.0.1 for delivery tests: an SMTP server (aiosmtpd) and an HTTP receiver.

Both record what they received before they answer, so once a send has returned, the record is
there: tests never wait or sleep.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# The login of the shared test SMTP server (plain SMTP may carry AUTH in tests: it is loopback).
SMTP_USER, SMTP_PASSWORD = "mailer", "smtp-password-never-shown"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---- SMTP ------------------------------------------------------------------------------------


@dataclass
class ReceivedMail:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    mail_options: list[str] = field(default_factory=list)  # the MAIL command's (SMTPUTF8, BODY=)
    raw: bytes = b""  # the data as it came

    @property
    def html(self) -> str:
        part = self.message.get_body(("html",))
        assert part is not None
        return str(part.get_content())  # type: ignore[attr-defined]

    @property
    def text(self) -> str:
        part = self.message.get_body(("plain",))
        assert part is not None
        return str(part.get_content())  # type: ignore[attr-defined]


@dataclass
class MailSink:
    received: list[ReceivedMail] = field(default_factory=list)
    # Set to an SMTP reply such as "550 mailbox unavailable" to refuse recipients.
    refuse_rcpt: str | None = None
    # Replies for single recipients, by address: refuse a cc while the To address is accepted.
    refuse_addresses: dict[str, str] = field(default_factory=dict)
    sessions: int = 0  # EHLOs seen: one per connection (no STARTTLS here re-greets)

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        self.sessions += 1
        session.host_name = hostname
        return responses

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if self.refuse_rcpt:
            return self.refuse_rcpt
        if address in self.refuse_addresses:
            return self.refuse_addresses[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.received.append(
            ReceivedMail(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                parsed,
                list(envelope.mail_options),
                envelope.content,
            )
        )
        return "250 Message accepted"


@dataclass
class SmtpServer:
    host: str
    port: int
    sink: MailSink
    controller: Controller

    @property
    def received(self) -> list[ReceivedMail]:
        return self.sink.received


def start_smtp(
    *,
    tls_context: ssl.SSLContext | None = None,
    implicit_tls: bool = False,
    credentials: tuple[str, str] | None = None,
    smtputf8: bool = False,
) -> SmtpServer:
    """An SMTP server; with `tls_context` it offers STARTTLS (required), or speaks TLS at once.
    `smtputf8`: it offers SMTPUTF8 (and refuses the MAIL command that asks for it otherwise)."""
    sink = MailSink()
    kwargs: dict[str, Any] = {"enable_SMTPUTF8": smtputf8}
    if tls_context is not None and implicit_tls:
        kwargs["ssl_context"] = tls_context
    elif tls_context is not None:
        kwargs.update(tls_context=tls_context, require_starttls=True)
    if credentials is not None:

        def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            ok = (
                isinstance(data, LoginPassword)
                and (data.login.decode(), data.password.decode()) == credentials
            )
            return AuthResult(success=ok, handled=False)

        # PLAIN only: the client then reports a refusal at once instead of trying LOGIN next.
        kwargs.update(
            authenticator=authenticate,
            # Over plain SMTP the login is offered but not demanded (aiosmtpd warns otherwise).
            auth_required=tls_context is not None,
            auth_require_tls=tls_context is not None,
            auth_exclude_mechanism=["LOGIN"],
        )
    port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    return SmtpServer("127.0.0.1", port, sink, controller)


@dataclass
class Certificate:
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def self_signed_certificate(directory: Path) -> Certificate:
    """A certificate for localhost and 127.0.0.1 that is its own CA (pass it as the CA bundle)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=365 * 30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return Certificate(cert_file, key_file)


# ---- HTTP ------------------------------------------------------------------------------------


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class HttpReceiver:
    server: ThreadingHTTPServer
    thread: threading.Thread
    received: list[ReceivedRequest] = field(default_factory=list)
    # What the receiver answers: status, and headers (e.g. Location for a redirect).
    status: int = 204
    answer_headers: dict[str, str] = field(default_factory=dict)
    # While `gate` is set (`hold`), each request is kept unanswered until it opens; `entered` tells
    # that one has arrived, `held` how many wait at it now.
    gate: threading.Event | None = None
    entered: threading.Event = field(default_factory=threading.Event)
    held: int = 0
    _held_lock: threading.Lock = field(default_factory=threading.Lock)

    def _wait_at(self, gate: threading.Event) -> None:
        with self._held_lock:
            self.held += 1
        self.entered.set()
        try:
            gate.wait(timeout=30)
        finally:
            with self._held_lock:
                self.held -= 1

    def hold(self) -> None:
        self.entered.clear()
        self.gate = threading.Event()

    def release(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self.gate = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hooks/herald"

    def reset(self) -> None:
        self.release()
        self.received.clear()
        self.status = 204
        self.answer_headers = {}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class _Receiving(ThreadingHTTPServer):
    # The standard library listens with a backlog of 5: a worker opening its lanes' connections at
    # once (8 and more) on a loaded machine met connections reset before their request was read,
    # which a real receiver's backlog would have taken.
    request_queue_size = 128


def start_http_receiver() -> HttpReceiver:
    receiver: HttpReceiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            receiver.received.append(ReceivedRequest(self.path, dict(self.headers.items()), body))
            gate = receiver.gate
            if gate is not None:
                receiver._wait_at(gate)
            self.send_response(receiver.status)
            for name, value in receiver.answer_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    server = _Receiving(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    receiver = HttpReceiver(server, thread)
    thread.start()
    return receiver
