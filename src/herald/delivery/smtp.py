"""`CUSTOM_SMTP`: a rendered Email object as a MIME message, sent with aiosmtplib.

Security is what the connector says, never negotiated down: `none` sends in the clear (and does
not try STARTTLS), `starttls` requires the upgrade, `tls` speaks TLS from the first byte.
Certificates are verified (against `ca_file` when the connector names one).
"""

from __future__ import annotations

import ssl
from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from html.parser import HTMLParser
from typing import Any

import aiosmtplib

from herald.delivery.config import Security
from herald.delivery.messages import Envelope, Outcome

# Failures of one message; anything else (connect, TLS, auth, timeouts) is the connector failing,
# and it is not tried again for the rest of the request.
_MESSAGE_ERRORS: tuple[type[aiosmtplib.SMTPResponseException], ...] = (
    aiosmtplib.SMTPRecipientRefused,
    aiosmtplib.SMTPSenderRefused,
    aiosmtplib.SMTPDataError,
)


class _TextOf(HTMLParser):
    """The readable text of an HTML body, for the text/plain alternative."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skipping += 1
        elif tag in ("br", "p", "div", "tr", "li", "h1", "h2", "h3"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skipping:
            self._skipping -= 1

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
    # A header value never spans lines: a CR or LF from content would inject headers.
    return " ".join(str(value).split()) if value is not None else ""


def build_email(envelope: Envelope) -> EmailMessage:
    """The MIME message for `envelope`. Test sends go to the test recipient only (no cc/bcc)."""
    content = envelope.message
    from_address = _one_line(content.get("from_address"))
    message = EmailMessage()
    message["From"] = formataddr((_one_line(content.get("sender_name")), from_address))
    message["To"] = _one_line(envelope.recipient.address)
    if content.get("reply_to_address"):
        message["Reply-To"] = _one_line(content["reply_to_address"])
    if not envelope.is_test:
        for header, key in (("Cc", "cc_ids"), ("Bcc", "bcc_ids")):
            if content.get(key):
                message[header] = ", ".join(_one_line(address) for address in content[key])
    message["Subject"] = _one_line(content.get("subject"))
    message["Date"] = format_datetime(envelope.now)
    domain = from_address.rpartition("@")[2] or "herald.invalid"
    message["Message-ID"] = f"<{envelope.delivery_id}@{domain}>"
    message["X-Herald-Delivery"] = envelope.delivery_id
    if envelope.is_test:
        message["X-Herald-Test"] = "true"
    html = str(content.get("html_content") or "")
    message.set_content(plain_text(html))
    message.add_alternative(html, subtype="html")
    return message


async def send_smtp(
    settings: dict[str, Any], secrets: dict[str, str], envelope: Envelope, time_limit: float
) -> Outcome:
    security = Security(settings.get("security", Security.STARTTLS.value))
    try:
        message = build_email(envelope)
    except (ValueError, TypeError) as exc:
        return Outcome(False, f"The message cannot be built: {exc}")
    try:
        refused, _ = await aiosmtplib.send(
            message,
            hostname=str(settings["host"]),
            port=int(settings["port"]),
            username=settings.get("username") or None,
            password=secrets.get("password") or None,
            use_tls=security is Security.TLS,
            start_tls=security is Security.STARTTLS,
            cert_bundle=settings.get("ca_file") or None,
            timeout=time_limit,
        )
    except _MESSAGE_ERRORS as exc:
        reason = f"The SMTP server refused the message: {exc.code} {exc.message}"
        return Outcome(False, reason, transient=_transient(exc.code))
    except aiosmtplib.SMTPRecipientsRefused as exc:
        refusals = "; ".join(f"{error.code} {error.message}" for error in exc.recipients)
        transient = all(_transient(error.code) for error in exc.recipients)
        return Outcome(False, f"The SMTP server refused the recipient: {refusals}", transient=transient)
    except aiosmtplib.SMTPResponseException as exc:
        reason = f"The SMTP server answered {exc.code} {exc.message}"
        return Outcome(False, reason, connector_down=True, transient=_transient(exc.code))
    except (aiosmtplib.SMTPException, ssl.SSLError, OSError) as exc:
        # Unreachable, a timeout, a broken TLS session: the server may be back later.
        where = f"{settings['host']}:{settings['port']}"
        return Outcome(False, f"SMTP {where}: {_describe(exc)}", connector_down=True, transient=True)
    if refused:
        codes = "; ".join(
            f"{address}: {response.code} {response.message}" for address, response in refused.items()
        )
        transient = all(_transient(response.code) for response in refused.values())
        return Outcome(False, f"The SMTP server refused: {codes}", transient=transient)
    return Outcome(True)


def _transient(code: int) -> bool:
    """SMTP's own rule (RFC 5321 §4.2.1): 4yz is a transient negative reply, 5yz a permanent one."""
    return 400 <= code < 500


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
