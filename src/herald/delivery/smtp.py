"""`CUSTOM_SMTP`: a rendered Email object as a MIME message, sent with aiosmtplib.

Security is what the connector says, never negotiated down: `none` sends in the clear (and does
not try STARTTLS), `starttls` requires the upgrade, `tls` speaks TLS from the first byte.
Certificates are verified (against `ca_file` when the connector names one).

Connections are kept (`SmtpSessions`, one per dispatcher: a worker's tick, a test-send request):
a message goes over an idle connection of its connector when there is one, so a campaign opens
a connection per message in flight, not per message, and each carries at most the connector's
`session_messages` (default 100) before it is closed, so no session lives for ever.

A message's time limit (the connector's `timeout`, else `HERALD_DELIVERY_TIMEOUT_SECONDS`) bounds
all of its sending: the connection when one is opened, and every command up to the final answer to
its data. A kept connection the server closed while it was idle is found out by the message's first
command, before the server answered anything of it: the message then goes over a new connection at
once. Once the server has answered a command of the message, a closed connection fails that attempt
(transient: the message is tried again after the backoff, as an attempt of its own), since the
server may have taken the message before it closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from email.errors import HeaderParseError
from email.header import Header
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from html import escape
from html.parser import HTMLParser
from typing import Any

import aiosmtplib
import idna
from aiosmtplib.email import extract_addresses, extract_recipients, extract_sender, flatten_message

from herald.control_characters import CONTROL
from herald.delivery import attachments
from herald.delivery.config import (
    DEFAULT_SESSION_MESSAGES,
    Security,
    not_a_verified_sender,
    sender_allowed,
)
from herald.delivery.engine.split import web_address
from herald.delivery.messages import Envelope, Outcome

# Failures of one message; anything else (connect, TLS, auth, timeouts) is the connector failing,
# and it is not tried again for the rest of the request.
_MESSAGE_ERRORS: tuple[type[aiosmtplib.SMTPResponseException], ...] = (
    aiosmtplib.SMTPRecipientRefused,
    aiosmtplib.SMTPSenderRefused,
    aiosmtplib.SMTPDataError,
)


# What the text/plain alternative leaves out, puts on lines of their own, and keeps apart.
_UNREAD = frozenset({"script", "style", "head", "title", "template"})
_BLOCKS = frozenset(
    {"address", "article", "aside", "blockquote", "br", "div", "footer", "h1", "h2", "h3", "h4", "h5", "h6"}
    | {"header", "hr", "li", "ol", "p", "pre", "section", "table", "tr", "ul"}
)
_CELLS = frozenset({"td", "th"})


class _TextOf(HTMLParser):
    """The readable text of an HTML body, for the text/plain alternative: blocks on lines of their
    own, table cells apart, each link's address after its text (a reader of the plain part can
    still follow it)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skipping = 0
        self._links: list[str | None] = []  # the address of each link open, innermost last

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _UNREAD:
            self._skipping += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")
        elif tag in _CELLS:
            self.parts.append(" ")
        elif tag == "a":
            # A web link as the tracking parameters see one (`HTTPS://…` and ` https://…` too).
            self._links.append(web_address(dict(attrs).get("href") or ""))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _UNREAD:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")
        elif tag in _CELLS:
            self.parts.append(" ")
        elif tag == "a" and self._links:
            href = self._links.pop()
            if href is not None and not self._skipping:
                self.parts.append(f" ({href})")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def plain_text(html: str) -> str:
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line) + "\n"


def _one_line(value: object) -> str:
    # A header value never spans lines: a CR or LF from content would inject headers. The other
    # control characters (a BEL, an ESC) are no text a header may carry (RFC 5322 §2.2): left out.
    return CONTROL.sub("", " ".join(str(value).split())) if value is not None else ""


# What opens an RFC 2047 encoded word. A header text holding one is decoded when the header is
# parsed: by the email package itself when a value is assigned (a user's first name of
# `=?utf-8?b?...?=` decoded to a CR LF and header lines of its choosing: `_one_line` had checked
# the text before), and by the recipient's mail reader. Such a text goes out encoded whole
# (RFC 2047 §5: text that could be taken for an encoded word is encoded), so that the reader
# shows the text the outbox records.
_ENCODED_WORD = "=?"
# A display name with a run this long could not be folded at its spaces: encoded words can (a
# header line holds at most 998 octets, RFC 5322 §2.1.1).
_LONGEST_WORD = 76


def _encoded(text: str, header: str) -> str:
    """`text` as encoded words, folded to the header's line length."""
    return Header(text, "utf-8", header_name=header).encode(linesep="\n")


def _set_subject(message: EmailMessage, subject: str) -> None:
    if _ENCODED_WORD in subject:
        message.set_raw("Subject", _encoded(subject, "Subject"))  # stored as encoded, not parsed
    else:
        message["Subject"] = subject


def _set_from(message: EmailMessage, name: str, address: str) -> None:
    """The From mailbox: a display name with commas, quotes, `<>` or `()` (and non-ASCII) encoded as
    one name. A `formataddr` string assigned to the header was parsed again, and a name such as
    `Shop, Inc. "Best" Ü` came out as two addresses. A name that could be taken for an encoded
    word, or with a run too long to fold (`_LONGEST_WORD`), is encoded whole, the address on a
    line of its own (`_ENCODED_WORD`)."""
    local_part = address.rpartition("@")[0]
    if not local_part.isascii():
        # The package builds no mailbox of a local part beyond ASCII (RFC 6532 allows it, under
        # SMTPUTF8, which `_send_on` then asks for): written as it goes, the name encoded.
        message.set_raw("From", f"{_encoded(name, 'From')}\n <{address}>" if name else address)
        return
    if _ENCODED_WORD in name or max(map(len, name.split()), default=0) > _LONGEST_WORD:
        message.set_raw("From", f"{_encoded(name, 'From')}\n <{address}>")
        return
    try:
        message["From"] = Address(display_name=name, addr_spec=address)
    except (ValueError, HeaderParseError, IndexError):
        message["From"] = formataddr((name, address))  # an address the parser refuses: as it was given


def _carried(address: str, smtputf8: bool) -> str | None:
    """`address` as the server carries it: as it is where the server offers SMTPUTF8 (or it is
    ASCII); else an internationalized domain in its ASCII form (IDNA), or None when the local part
    is not ASCII (no form of it is: RFC 6531 §3.2, the extension is never used with a server that
    does not offer it)."""
    if smtputf8 or address.isascii():
        return address
    local, at, domain = address.rpartition("@")
    if not at or not local.isascii():
        return None
    try:
        return f"{local}@{idna.encode(domain, uts46=True).decode('ascii')}"
    except idna.IDNAError:
        return None


def _needed(address: str, role: str, smtputf8: bool) -> str:
    carried = _carried(address, smtputf8)
    if carried is None:
        raise ValueError(
            f"the SMTP server does not offer SMTPUTF8, which the {role} address '{address}' needs"
        )
    return carried


def build_email(envelope: Envelope, smtputf8: bool = True) -> EmailMessage:
    """The MIME message for `envelope`. Test sends go to the test recipient only (no cc/bcc).
    `smtputf8`: whether the server takes addresses in UTF-8 (else each as `_carried`; a cc or bcc
    that cannot be is left out, as one the server refuses would be). Raises ValueError when the
    recipient's address would be read as another mailbox, the server cannot carry the sender's,
    the recipient's or the reply-to address, or a header would span lines."""
    content = envelope.message
    from_address = _needed(_one_line(content.get("from_address")), "sender", smtputf8)
    message = EmailMessage()
    _set_from(message, _one_line(content.get("sender_name")), from_address)
    recipient = _needed(_one_line(envelope.recipient.address), "recipient", smtputf8)
    message["To"] = recipient
    if content.get("reply_to_address"):
        message["Reply-To"] = _needed(_one_line(content["reply_to_address"]), "reply-to", smtputf8)
    if not envelope.is_test:
        for header, key in (("Cc", "cc_ids"), ("Bcc", "bcc_ids")):
            copies = [_carried(_one_line(address), smtputf8) for address in content.get(key) or ()]
            if kept := [address for address in copies if address is not None]:
                message[header] = ", ".join(kept)
    _set_subject(message, _one_line(content.get("subject")))
    message["Date"] = format_datetime(envelope.now)
    domain = from_address.rpartition("@")[2] or "herald.invalid"
    message["Message-ID"] = f"<{envelope.delivery_id}@{domain}>"
    message["X-Herald-Delivery"] = envelope.delivery_id
    if envelope.is_test:
        message["X-Herald-Test"] = "true"
    html = str(content.get("html_content") or "")
    message.set_content(plain_text(html))
    message.add_alternative(with_preheader(html, str(content.get("preview_text") or "")), subtype="html")
    for attached in attachments.files(content.get("attachments")):  # the message becomes multipart/mixed
        message.add_attachment(
            attached.data, maintype=attached.maintype, subtype=attached.subtype, filename=attached.name
        )
    for part in message.walk():
        if part is not message:  # the message's own is the one (the package gave its parts one too)
            del part["MIME-Version"]
    # The mail goes to the address the outbox records, or to nobody: a stored `me<victim@other>`
    # was read as a display name and another mailbox, which RCPT TO then named.
    if (primary := _primary_address(message)) != recipient:
        raise ValueError(f"the address '{recipient}' reads as another mailbox ('{primary}')")
    # Whatever a header was given, none may span lines once parsed (the last guard against
    # header lines chosen by content).
    if any("\r" in str(value) or "\n" in str(value) for value in message.values()):
        raise ValueError("a header would span lines")
    return message


# Hidden in every client that honours CSS (and Outlook's `mso-hide`), yet read as the body's first
# text, so inboxes show it beside the subject: the preheader.
_PREHEADER = (
    '<div style="display:none;font-size:1px;line-height:1px;max-height:0;max-width:0;opacity:0;'
    'overflow:hidden;mso-hide:all;color:transparent">{}</div>'
)


class _BodyStart(HTMLParser):
    """Where the HTML's `<body>` start tag ends: the first one read as a tag, not one inside a
    comment, a script or style, or text such as a `<title>`'s. Without one, where the document's
    preamble ends: after its doctype, `<html>` start tag and `</head>`, whichever comes last (a
    preheader before the doctype would put a client in quirks mode)."""

    _TEXT_ONLY = frozenset({"title", "textarea"})  # their content is text, whatever it looks like
    _CHUNK = 4096  # read up to the body only, which comes early: not every user's whole mail

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self._inside: str | None = None
        # (line, offset, length) of the body's start tag; of the last doctype, <html> or </head>
        # (length None: up to its first ">", as a declaration or end tag holds no quoted ">").
        self._found: tuple[int, int, int | None] | None = None
        self._preamble: tuple[int, int, int | None] | None = None

    def end_in(self, html: str) -> int:
        for start in range(0, len(html), self._CHUNK):
            self.feed(html[start : start + self._CHUNK])
            if self._found is not None:
                return self._after(html, self._found)
        return 0 if self._preamble is None else self._after(html, self._preamble)

    @staticmethod
    def _after(html: str, markup: tuple[int, int, int | None]) -> int:
        """Just after `markup` (a tag or declaration: where it begins, its length if known)."""
        line, offset, length = markup
        before = html.split("\n", line - 1)[: line - 1]
        begins = sum(len(text) + 1 for text in before) + offset
        return begins + length if length is not None else html.index(">", begins) + 1

    def _starttag(self) -> tuple[int, int, int]:
        return (*self.getpos(), len(self.get_starttag_text() or ""))

    def handle_decl(self, decl: str) -> None:
        if self._found is None and decl.lower().startswith("doctype"):
            self._preamble = (*self.getpos(), None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._found is not None or self._inside is not None:
            return
        if tag in self._TEXT_ONLY:
            self._inside = tag
        elif tag == "body":
            self._found = self._starttag()
        elif tag == "html":
            self._preamble = self._starttag()

    def handle_endtag(self, tag: str) -> None:
        if tag == self._inside:
            self._inside = None
        elif tag == "head" and self._found is None and self._inside is None:
            self._preamble = (*self.getpos(), None)


def with_preheader(html: str, preview_text: str) -> str:
    """`html` with `preview_text` as the hidden preheader at the start of its body (when it has no
    `<body>`, after its preamble: see `_BodyStart`). The text alternative is made from the HTML
    without it."""
    if not preview_text.strip():
        return html
    hidden = _PREHEADER.format(escape(" ".join(preview_text.split())))
    at = _BodyStart().end_in(html)
    return html[:at] + hidden + html[at:]


def _unverified_sender(envelope: Envelope, settings: dict[str, Any]) -> str | None:
    """Why the message may not go out from its `from_address`, or None. Publishing checked it, but
    the connector's senders may have changed since (and a rendered address is checked as sent)."""
    senders: list[str] = settings.get("senders") or []
    address = _one_line(envelope.message.get("from_address"))
    return None if sender_allowed(address, senders) else not_a_verified_sender(address, senders)


@dataclass
class _Connection:
    client: aiosmtplib.SMTP
    carried: int = 0


@dataclass
class SmtpSessions:
    """Open SMTP connections between messages, by connector (see the module's docstring)."""

    _idle: dict[str, list[_Connection]] = field(default_factory=dict)

    async def send(
        self,
        key: str,
        settings: dict[str, Any],
        secrets: dict[str, str],
        envelope: Envelope,
        time_limit: float,
    ) -> Outcome:
        if unverified := _unverified_sender(envelope, settings):
            return Outcome(False, unverified)
        try:
            message = build_email(envelope)
        except (ValueError, TypeError) as exc:
            return Outcome(False, f"The message cannot be built: {exc}")
        idle = self._idle.setdefault(key, [])
        bound = int(settings.get("session_messages") or DEFAULT_SESSION_MESSAGES)
        deadline = asyncio.get_running_loop().time() + time_limit
        while True:
            connection = idle.pop() if idle else None
            reused = connection is not None
            try:
                async with asyncio.timeout_at(deadline):
                    if connection is None:
                        connection = _Connection(await _connect(settings, secrets, time_limit))
                    outcome = await _send_on(connection, envelope, message)
            except _Stale as stale:
                _drop(connection)
                if reused:
                    continue  # closed while idle, before any answer to this message: a new one
                return _unreachable(settings, stale.__cause__ or stale, time_limit)
            except (aiosmtplib.SMTPException, ssl.SSLError, OSError) as exc:
                _drop(connection)  # a timeout among them: the connection is left mid-command
                return _unreachable(settings, exc, time_limit)
            if outcome.connector_down:
                _drop(connection)  # a server failing commands: not asked to QUIT, which may hang too
            elif connection.carried >= bound:
                await _close(connection)
            else:
                idle.append(connection)
            return outcome

    async def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                await _close(connection)
        self._idle.clear()


async def send_smtp(
    settings: dict[str, Any], secrets: dict[str, str], envelope: Envelope, time_limit: float
) -> Outcome:
    """One message over a connection of its own."""
    sessions = SmtpSessions()
    try:
        return await sessions.send("", settings, secrets, envelope, time_limit)
    finally:
        await sessions.close()


async def _connect(settings: dict[str, Any], secrets: dict[str, str], time_limit: float) -> aiosmtplib.SMTP:
    security = Security(settings.get("security", Security.STARTTLS.value))
    client = aiosmtplib.SMTP(
        hostname=str(settings["host"]),
        port=int(settings["port"]),
        username=settings.get("username") or None,
        password=secrets.get("password") or None,
        use_tls=security is Security.TLS,
        start_tls=security is Security.STARTTLS,
        cert_bundle=settings.get("ca_file") or None,
        timeout=time_limit,
    )
    await client.connect()
    return client


class _Stale(Exception):
    """The connection was closed before the server answered anything of this message (raised
    from the closing error)."""


def _drop(connection: _Connection | None) -> None:
    """A connection in an unknown state (mid-command, or closed by the server): closed at once."""
    if connection is not None:
        connection.client.close()


async def _close(connection: _Connection) -> None:
    try:
        await connection.client.quit()
    except (aiosmtplib.SMTPException, ssl.SSLError, OSError):
        connection.client.close()


async def _send_on(connection: _Connection, envelope: Envelope, message: EmailMessage) -> Outcome:
    """One message over an open connection; connection failures are raised to the caller.

    Only the primary recipient (To) decides the outcome: a cc or bcc address the server refuses is
    not a failure of the user's message, which was accepted for the user (retrying it would send
    the user the same mail again). The user's address is named first, and when the server refuses
    it the transaction ends there: a copy that went out while the user's own mail did not (again
    with each retry of a refusal for now) would reach the copies' readers alone.

    The message is made for the server's extensions, known once it is greeted: without SMTPUTF8,
    its addresses as `_carried` (a cc or bcc it cannot carry left out, as one it refuses)."""
    client = connection.client
    await _greeted(client)
    if not client.supports_extension("SMTPUTF8") and not all(map(str.isascii, _addresses(message))):
        try:
            message = build_email(envelope, smtputf8=False)
        except (ValueError, TypeError) as exc:
            return Outcome(False, f"The message cannot be sent: {exc}")
    primary = _primary_address(message)
    try:
        refused = await _transmit(connection.client, message, primary)
    except ValueError as exc:
        return Outcome(False, f"The message cannot be sent: {exc}")
    except _MESSAGE_ERRORS as exc:
        reason = f"The SMTP server refused the message: {exc.code} {exc.message}"
        return Outcome(False, reason, transient=_transient(exc.code))
    except aiosmtplib.SMTPServerDisconnected:
        raise
    except aiosmtplib.SMTPResponseException as exc:
        reason = f"The SMTP server answered {exc.code} {exc.message}"
        return Outcome(False, reason, connector_down=True, transient=_transient(exc.code))
    finally:
        connection.carried += 1
    if refused is None:
        return Outcome(True)
    reason = f"The SMTP server refused the recipient: {refused.code} {refused.message}"
    return Outcome(False, reason, transient=_transient(refused.code))


async def _transmit(
    client: aiosmtplib.SMTP, message: EmailMessage, primary: str
) -> aiosmtplib.SMTPResponse | None:
    """`client.send_message(message)` with `primary` named first among the recipients: its refusal
    (the envelope then reset, nothing sent to anyone), else None once the message is sent to it and
    to whichever other recipients the server accepts. Raises as `send_message` does."""
    sender = extract_sender(message)
    if sender is None:
        raise ValueError("it has no From address")
    # Each address once (one in both Cc and Bcc got two RCPT TO: a plain receiver delivers both).
    named = {primary.casefold(): primary}
    for address in extract_recipients(message):
        named.setdefault(address.casefold(), address)
    copies = list(named.values())[1:]
    # Every address header's too (Reply-To): written in UTF-8 under SMTPUTF8 (RFC 6532), since an
    # address may hold no encoded word (RFC 2047 §5). `_send_on` made the message for the server.
    utf8 = not all(map(str.isascii, _addresses(message)))
    eight_bit = client.supports_extension("8BITMIME")
    options = ["SMTPUTF8"] if utf8 else []
    if eight_bit:
        options.append("BODY=8BITMIME")
    flat = flatten_message(message, utf8=utf8, cte_type="8bit" if eight_bit else "7bit")
    encoding = "utf-8" if utf8 else "ascii"
    refusal: aiosmtplib.SMTPResponse | None = None
    try:
        try:
            await client.mail(sender, options=options, encoding=encoding)
        except (aiosmtplib.SMTPServerDisconnected, ConnectionError) as exc:
            raise _Stale from exc
        try:
            await client.rcpt(primary, encoding=encoding)
        except aiosmtplib.SMTPRecipientRefused as exc:
            refusal = aiosmtplib.SMTPResponse(exc.code, exc.message)
        else:
            for address in copies:
                with contextlib.suppress(aiosmtplib.SMTPRecipientRefused):
                    await client.rcpt(address, encoding=encoding)
            await client.data(flat)
    except (aiosmtplib.SMTPResponseException, ValueError):
        # ValueError: an address the client will not put in a command (`a b@x`, `<x@y>` in cc);
        # nothing of it was sent, and the envelope begun is reset for the next message.
        await _reset(client)
        raise
    if refusal is not None:
        await _reset(client)
    return refusal


async def _greeted(client: aiosmtplib.SMTP) -> None:
    """EHLO (HELO where the server does not take it) on a new connection, as the MAIL command
    would: the server's extensions are then known to the message's first command (`8BITMIME`
    was asked of a connection not yet greeted, and its first message went as 7bit). A kept
    connection closed while idle is found out here (`_Stale`)."""
    if not client.is_ehlo_or_helo_needed:
        return
    try:
        try:
            await client.ehlo()
        except aiosmtplib.SMTPHeloError:
            await client.helo()
    except (aiosmtplib.SMTPServerDisconnected, ConnectionError) as exc:
        raise _Stale from exc


def _addresses(message: EmailMessage) -> list[str]:
    """The addresses of every address header of `message`."""
    return [
        address
        for header in ("From", "To", "Reply-To", "Cc", "Bcc")
        if (value := message[header]) is not None
        for address in extract_addresses(value)
    ]


async def _reset(client: aiosmtplib.SMTP) -> None:
    """The envelope reset for the connection's next message (a connection that cannot even do that
    is found out by the next one)."""
    with contextlib.suppress(aiosmtplib.SMTPResponseException, ConnectionError):
        await client.rset()


def _primary_address(message: EmailMessage) -> str:
    """The To address as the client names it in RCPT TO (and in its refusals)."""
    addresses = extract_addresses(message["To"])
    if len(addresses) != 1:
        raise ValueError("it must have exactly one To address")
    return addresses[0]


def _unreachable(settings: dict[str, Any], exc: BaseException, time_limit: float) -> Outcome:
    # Unreachable, a timeout, a broken TLS session, a login refused: the server may be back later.
    where = f"{settings['host']}:{settings['port']}"
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        reason = f"The SMTP server answered {exc.code} {exc.message}"
        return Outcome(False, reason, connector_down=True, transient=_transient(exc.code))
    if isinstance(exc, TimeoutError) and not isinstance(exc, aiosmtplib.SMTPException):
        # The message's whole limit passed, however each answer came (aiosmtplib's own timeouts
        # bound one command each, and say so themselves).
        reason = f"SMTP {where}: no final answer within {time_limit:g} s"
        return Outcome(False, reason, connector_down=True, transient=True)
    return Outcome(False, f"SMTP {where}: {_describe(exc)}", connector_down=True, transient=True)


def _transient(code: int) -> bool:
    """SMTP's own rule (RFC 5321 §4.2.1): 4yz is a transient negative reply, 5yz a permanent one."""
    return 400 <= code < 500


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
