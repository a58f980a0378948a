"""The senders against real servers: SMTP (plain, STARTTLS, TLS, auth) and signed webhooks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email import message_from_bytes, message_from_string, policy
from email.header import decode_header, make_header
from email.message import EmailMessage
from typing import Any

import pytest

from herald.campaigns.schemas.common import Channel, Platform
from herald.delivery.engine.split import html_with_utm
from herald.delivery.messages import Envelope, Recipient, Slot
from herald.delivery.signing import verify
from herald.delivery.smtp import SmtpSessions, build_email, plain_text, send_smtp
from herald.delivery.webhook import new_lane, send_webhook
from tests.delivery.servers import SMTP_PASSWORD, SMTP_USER, Certificate, HttpReceiver, SmtpServer, start_smtp

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
EMAIL = {
    "subject": "Your order",
    "sender_name": "Shop",
    "from_address": "news@shop.example",
    "reply_to_address": "help@shop.example",
    "cc_ids": ["cc@shop.example"],
    "bcc_ids": ["bcc@shop.example"],
    "html_content": "<html><body><h1>Hello</h1><p>Thanks&nbsp;for <b>buying</b>.</p></body></html>",
}
SECRET = "w" * 32


def _envelope(message: dict[str, Any], *, channel: Channel = Channel.EMAIL, test: bool = True) -> Envelope:
    platform = Platform.ANDROID if channel is Channel.PUSH else None
    address = "ana@example.com" if channel is Channel.EMAIL else "push-token-1"
    recipient = Recipient(
        "ana@example.com", address, "u1", {}, None, {"push_id": "push-token-1", "gaid": "g1"}
    )
    return Envelope(
        "0123456789abcdef01234567",
        "W1",
        None,
        test,
        Slot(channel, platform, "default", "variation_1"),
        recipient,
        message,
        NOW,
    )


def _smtp(server: SmtpServer, **extra: Any) -> dict[str, Any]:
    return {"host": server.host, "port": server.port, "security": "none", **extra}


def _part(message: EmailMessage, subtype: str) -> str:
    part = message.get_body((subtype,))
    assert part is not None
    return str(part.get_content())  # type: ignore[attr-defined]


LOGIN = {"username": SMTP_USER}
PASSWORD = {"password": SMTP_PASSWORD}


class TestMimeMessage:
    def test_headers_and_both_bodies(self) -> None:
        message = build_email(_envelope(EMAIL))
        assert message["From"] == "Shop <news@shop.example>"
        assert message["To"] == "ana@example.com"
        assert message["Reply-To"] == "help@shop.example"
        assert message["Subject"] == "Your order"
        assert message["Message-ID"] == "<0123456789abcdef01234567@shop.example>"
        assert message["X-Herald-Test"] == "true"
        assert message["Cc"] is None  # a test goes to the test recipient only
        assert message.get_body(("html",)) is not None
        assert message.get_body(("plain",)) is not None

    @pytest.mark.parametrize(
        "name", ['Shop, Inc. "Best" Ü', "Zoë <promo>", "Ünïcode (brand)", "Shop, Inc.", "Plain"]
    )
    def test_the_sender_name_is_one_display_name_on_the_wire(self, name: str) -> None:
        """Commas, quotes, angle brackets and parentheses, with non-ASCII or without: read back
        from the bytes sent, From is one mailbox, the name as given."""
        sent = build_email(_envelope({**EMAIL, "sender_name": name})).as_bytes(policy=policy.SMTP)
        parsed = message_from_bytes(sent, policy=policy.default)
        [mailbox] = parsed["From"].addresses
        assert (mailbox.display_name, mailbox.addr_spec) == (name, "news@shop.example")
        assert not parsed["From"].defects

    @pytest.mark.parametrize("field", ["subject", "sender_name"])
    @pytest.mark.parametrize(
        "shaped",
        [
            "=?utf-8?b?SGkNClJlcGx5LVRvOiBldmlsQGF0dGFja2VyLnRlc3QNClgtSW5qOiAx?=",  # "Hi\r\nReply-To: ..."
            "=?utf-8?q?Hi=0D=0ABcc:_evil@attacker.test?= and more =?utf-8?b?SGk=?= " * 3,
            "Grüße =?iso-8859-1?q?=0A=0DX-Inj:_1?=",
        ],
    )
    def test_text_shaped_as_encoded_words_adds_no_header_line(self, field: str, shaped: str) -> None:
        sent = build_email(_envelope({**EMAIL, field: shaped}, test=False)).as_bytes(policy=policy.SMTP)
        head = sent.split(b"\r\n\r\n", 1)[0]
        names = [line.split(b":", 1)[0] for line in head.split(b"\r\n") if not line[:1].isspace()]
        assert names == [
            b"From", b"To", b"Reply-To", b"Cc", b"Bcc", b"Subject", b"Date", b"Message-ID",
            b"X-Herald-Delivery", b"MIME-Version", b"Content-Type",
        ]  # fmt: skip
        parsed = message_from_bytes(sent, policy=policy.default)
        assert parsed["From"].addresses[0].addr_spec == "news@shop.example"
        if field == "subject":
            assert str(parsed["Subject"]) == " ".join(shaped.split())  # as rendered, not decoded

    def test_live_sends_keep_cc(self) -> None:
        message = build_email(_envelope(EMAIL, test=False))
        assert message["Cc"] == "cc@shop.example"
        assert message["X-Herald-Test"] is None

    def test_the_preview_text_is_the_hidden_first_text_of_the_html_body(self) -> None:
        message = build_email(_envelope({**EMAIL, "preview_text": "20% off <today> & tomorrow"}))
        html = _part(message, "html")
        head, body = html.split("<body>")
        assert "20% off" not in head
        preheader, rest = body.split("</div>", 1)
        assert preheader.startswith('<div style="display:none;')
        assert "mso-hide:all" in preheader
        assert preheader.endswith(">20% off &lt;today&gt; &amp; tomorrow")
        assert rest.startswith("<h1>Hello</h1>")
        # The text alternative is the body's own text; the preheader is for inbox listings.
        assert _part(message, "plain") == plain_text(EMAIL["html_content"])

    def test_html_without_a_body_tag_starts_with_the_preheader(self) -> None:
        envelope = _envelope({**EMAIL, "html_content": "<p>Hi</p>", "preview_text": "Read me first"})
        html = _part(build_email(envelope), "html")
        assert html.startswith('<div style="display:none;')
        assert html.rstrip().endswith(">Read me first</div><p>Hi</p>")

    @pytest.mark.parametrize(
        ("preamble", "rest"),
        [
            ("<!DOCTYPE html>", "\n<p>Hi</p>"),
            ("<!doctype html><html lang='a>b'>", "<p>Hi</p></html>"),
            ("<!DOCTYPE html><HTML><head><title>x</title></HEAD >", "<p>Hi</p></html>"),
            ("<html><head><title>About </head> tags</title><style>p{}</style></head>", "<p>Hi</p>"),
        ],
    )
    def test_html_without_a_body_tag_has_the_preheader_after_its_preamble(
        self, preamble: str, rest: str
    ) -> None:
        # Not before the doctype: a client reading the document would render it in quirks mode.
        envelope = _envelope({**EMAIL, "html_content": preamble + rest, "preview_text": "Read me first"})
        html = _part(build_email(envelope), "html")
        assert html.startswith(preamble + '<div style="display:none;')
        assert html.rstrip().endswith(">Read me first</div>" + rest)

    @pytest.mark.parametrize(
        ("before", "tag"),
        [
            ("<html><head><title>About <body> tags</title></head>\n", "<body>"),
            ("<!-- <body> is below -->\n<script>var s = '<body>';</script>\n", "<BODY class=main>"),
            ("<html>\n<textarea><body></textarea>\n", '<body style="a>b">'),
        ],
    )
    def test_the_preheader_goes_in_the_body_the_reader_shows(self, before: str, tag: str) -> None:
        # Not into the first text that reads "<body" (a title, a comment, a script), nor inside
        # the tag's attributes.
        content = f"{before}{tag}<p>Hi</p></body></html>"
        envelope = _envelope({**EMAIL, "html_content": content, "preview_text": "Read me first"})
        html = _part(build_email(envelope), "html")
        assert html.startswith(before + tag + '<div style="display:none;')
        assert html.rstrip().endswith(">Read me first</div><p>Hi</p></body></html>")

    def test_no_preview_text_leaves_the_html_as_written(self) -> None:
        html = _part(build_email(_envelope(EMAIL)), "html")
        assert html.rstrip() == EMAIL["html_content"]

    def test_a_line_break_in_the_subject_cannot_add_headers(self) -> None:
        message = build_email(_envelope({**EMAIL, "subject": "Hi\r\nBcc: victim@example.com"}))
        assert message["Subject"] == "Hi Bcc: victim@example.com"
        assert message["Bcc"] is None

    def test_plain_text_alternative(self) -> None:
        assert plain_text(EMAIL["html_content"]) == "Hello\nThanks for buying.\n"
        assert plain_text("<style>p{color:red}</style><p>Hi</p>") == "Hi\n"

    def test_plain_text_keeps_blocks_cells_and_link_addresses_apart(self) -> None:
        html = (
            "<html><head><title>Order</title></head><body><h1>Shipped</h1><p>Hi <b>Ana</b></p>"
            "<table><tr><th>Item</th><th>Price</th></tr><tr><td>Boots</td><td>10</td></tr></table>"
            '<p><a href="https://shop.example/track?id=1">Track it</a> or <a href="mailto:h@shop.example">'
            "write</a>.</p>Line 1<br/>Line 2</body></html>"
        )
        assert plain_text(html) == (
            "Shipped\nHi Ana\nItem Price\nBoots 10\n"
            "Track it (https://shop.example/track?id=1) or write.\nLine 1\nLine 2\n"
        )

    @pytest.mark.parametrize(
        "href", ["https://x.example/a", "HTTPS://X.EXAMPLE/A", "Http://x.example/a", " https://x.example/a "]
    )
    def test_every_link_the_tracking_parameters_tag_keeps_its_address_in_the_plain_part(
        self, href: str
    ) -> None:
        # The plain part kept only hrefs spelled `http://` or `https://` in lower case, while the
        # tracking parameters (and browsers) take any case and padding: `HTTPS://…` lost its address.
        html = html_with_utm(f'<p><a href="{href}">Shop</a></p>', {"utm_source": "s"})
        assert plain_text(html) == f"Shop ({href.strip()}?utm_source=s)\n"


class TestSmtp:
    async def test_plain_delivery(self, smtp_server: SmtpServer) -> None:
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(EMAIL), 5)
        assert outcome.sent, outcome.reason
        [mail] = smtp_server.received
        assert mail.mail_from == "news@shop.example"
        assert mail.rcpt_tos == ["ana@example.com"]  # no cc/bcc on a test
        assert mail.message["Subject"] == "Your order"
        assert "<b>buying</b>" in mail.html

    async def test_starttls_with_auth(self, certificate: Certificate) -> None:
        server = start_smtp(tls_context=certificate.server_context(), credentials=("mailer", "s3cret-pass"))
        try:
            settings = _smtp(
                server, security="starttls", username="mailer", ca_file=str(certificate.cert_file)
            )
            outcome = await send_smtp(settings, {"password": "s3cret-pass"}, _envelope(EMAIL), 5)
            assert outcome.sent, outcome.reason
            assert len(server.received) == 1
            wrong = await send_smtp(settings, {"password": "nope"}, _envelope(EMAIL), 5)
            assert not wrong.sent
            assert wrong.connector_down
            assert "535" in (wrong.reason or "")
        finally:
            server.controller.stop()

    async def test_starttls_refuses_an_untrusted_certificate(self, certificate: Certificate) -> None:
        server = start_smtp(tls_context=certificate.server_context())
        try:
            outcome = await send_smtp(_smtp(server, security="starttls"), {}, _envelope(EMAIL), 5)
            assert not outcome.sent
            assert outcome.connector_down
            assert server.received == []
        finally:
            server.controller.stop()

    async def test_security_none_never_upgrades(self, certificate: Certificate) -> None:
        # The server requires STARTTLS; a connector configured for plain SMTP must not do it silently.
        server = start_smtp(tls_context=certificate.server_context())
        try:
            outcome = await send_smtp(_smtp(server), {}, _envelope(EMAIL), 5)
            assert not outcome.sent
            assert server.received == []
        finally:
            server.controller.stop()

    async def test_implicit_tls(self, certificate: Certificate) -> None:
        server = start_smtp(tls_context=certificate.server_context(), implicit_tls=True)
        try:
            settings = _smtp(server, security="tls", ca_file=str(certificate.cert_file))
            outcome = await send_smtp(settings, {}, _envelope(EMAIL), 5)
            assert outcome.sent, outcome.reason
            assert server.received[0].rcpt_tos == ["ana@example.com"]
        finally:
            server.controller.stop()

    async def test_server_down_is_a_connector_failure(self, closed_port: int) -> None:
        settings = {"host": "127.0.0.1", "port": closed_port, "security": "none"}
        outcome = await send_smtp(settings, {}, _envelope(EMAIL), 5)
        assert not outcome.sent
        assert outcome.connector_down
        assert f"127.0.0.1:{closed_port}" in (outcome.reason or "")

    async def test_refused_recipient_fails_that_message_only(self, smtp_server: SmtpServer) -> None:
        smtp_server.sink.refuse_rcpt = "550 No such mailbox"
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(EMAIL), 5)
        assert not outcome.sent
        assert not outcome.connector_down
        assert "550" in (outcome.reason or "")


class TestSmtpCopies:
    """A live message goes to the user (To) and to the campaign's cc and bcc addresses; only the
    user's own address decides whether the message was sent."""

    async def test_a_refused_cc_is_not_a_failure_of_the_message(self, smtp_server: SmtpServer) -> None:
        smtp_server.sink.refuse_addresses = {"cc@shop.example": "550 5.1.1 No such mailbox"}
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(EMAIL, test=False), 5)
        assert outcome.sent, outcome.reason
        [mail] = smtp_server.received
        assert mail.rcpt_tos == ["ana@example.com", "bcc@shop.example"]

    async def test_a_cc_refused_for_now_is_not_a_reason_to_send_again(self, smtp_server: SmtpServer) -> None:
        smtp_server.sink.refuse_addresses = {
            "cc@shop.example": "450 4.2.1 Try later",
            "bcc@shop.example": "451 4.3.0 Try later",
        }
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(EMAIL, test=False), 5)
        assert outcome.sent, outcome.reason
        assert [mail.rcpt_tos for mail in smtp_server.received] == [["ana@example.com"]]

    async def test_the_users_refusal_decides_even_when_a_cc_is_accepted(
        self, smtp_server: SmtpServer
    ) -> None:
        smtp_server.sink.refuse_addresses = {"ana@example.com": "450 4.2.2 Mailbox full"}
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(EMAIL, test=False), 5)
        assert not outcome.sent
        assert outcome.transient
        assert not outcome.connector_down
        assert outcome.reason == "The SMTP server refused the recipient: 450 4.2.2 Mailbox full"
        # The copies' readers get nothing either: their mail would otherwise go out on every retry
        # while the user's own never did.
        assert smtp_server.received == []

    async def test_after_a_refused_user_the_connection_carries_the_next_message(
        self, smtp_server: SmtpServer
    ) -> None:
        smtp_server.sink.refuse_addresses = {"ana@example.com": "550 5.1.1 No such user"}
        sessions = SmtpSessions()
        try:
            settings = _smtp(smtp_server, **LOGIN)
            refused = await sessions.send("c", settings, PASSWORD, _envelope(EMAIL, test=False), 5)
            assert not refused.sent
            smtp_server.sink.refuse_addresses = {}
            sent = await sessions.send("c", settings, PASSWORD, _envelope(EMAIL, test=False), 5)
            assert sent.sent, sent.reason
        finally:
            await sessions.close()
        [mail] = smtp_server.received
        assert mail.rcpt_tos == ["ana@example.com", "cc@shop.example", "bcc@shop.example"]
        assert smtp_server.sink.sessions == 1  # one connection for both: the envelope was reset

    async def test_when_all_are_refused_the_users_reply_is_the_outcome(self, smtp_server: SmtpServer) -> None:
        smtp_server.sink.refuse_addresses = {
            "ana@example.com": "550 5.1.1 No such user",
            "cc@shop.example": "450 4.2.1 Try later",
            "bcc@shop.example": "450 4.2.1 Try later",
        }
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(EMAIL, test=False), 5)
        assert not outcome.sent
        assert not outcome.transient  # the user's 5xx is final, whatever the copies were answered
        assert outcome.reason == "The SMTP server refused the recipient: 550 5.1.1 No such user"
        assert smtp_server.received == []


class TestWebhook:
    async def test_signed_json_arrives(self, webhook: HttpReceiver) -> None:
        push = {"template_type": "BASIC", "basic_details": {"title": "Hi", "message": "There"}}
        async with new_lane() as lane:
            outcome = await send_webhook(
                lane,
                {"url": webhook.url},
                {"hmac_secret": SECRET},
                _envelope(push, channel=Channel.PUSH),
                5,
            )
        assert outcome.sent, outcome.reason
        [request] = webhook.received
        assert request.path == "/hooks/herald"
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["X-Herald-Delivery"] == "0123456789abcdef01234567"
        assert request.headers["X-Herald-Timestamp"] == str(int(NOW.timestamp()))
        assert verify(
            SECRET,
            request.body,
            request.headers["X-Herald-Timestamp"],
            request.headers["X-Herald-Signature"],
            NOW.timestamp(),
        )
        assert not verify(
            SECRET,
            request.body + b" ",
            request.headers["X-Herald-Timestamp"],
            request.headers["X-Herald-Signature"],
            NOW.timestamp(),
        )
        body = request.json()
        assert body["message"] == push
        assert body["platform"] == "ANDROID"
        assert body["recipient"] == {
            "address": "push-token-1",
            "customer_id": "u1",
            "push_id": "push-token-1",
            "gaid": "g1",
        }
        assert body["test"] is True

    @pytest.mark.parametrize("test", [True, False])
    async def test_a_test_mail_names_no_copies_live_ones_do(self, webhook: HttpReceiver, test: bool) -> None:
        # As over SMTP: a gateway relaying the message as it comes would mail every test to them.
        async with new_lane() as lane:
            outcome = await send_webhook(
                lane, {"url": webhook.url}, {"hmac_secret": SECRET}, _envelope(EMAIL, test=test), 5
            )
        assert outcome.sent, outcome.reason
        [request] = webhook.received
        message = request.json()["message"]
        copies = {key: message.get(key) for key in ("cc_ids", "bcc_ids")}
        if test:
            assert copies == {"cc_ids": None, "bcc_ids": None}
            assert message == {key: value for key, value in EMAIL.items() if key not in copies}
        else:
            assert message == EMAIL

    async def test_redirects_are_not_followed(self, webhook: HttpReceiver) -> None:
        webhook.status = 302
        webhook.answer_headers = {"Location": webhook.url + "/elsewhere"}
        async with new_lane() as lane:
            outcome = await send_webhook(
                lane, {"url": webhook.url}, {"hmac_secret": SECRET}, _envelope(EMAIL), 5
            )
        assert not outcome.sent
        assert "302" in (outcome.reason or "")
        assert len(webhook.received) == 1

    async def test_error_status_is_a_failure(self, webhook: HttpReceiver) -> None:
        webhook.status = 503
        async with new_lane() as lane:
            outcome = await send_webhook(
                lane, {"url": webhook.url}, {"hmac_secret": SECRET}, _envelope(EMAIL), 5
            )
        assert not outcome.sent
        assert outcome.reason == "The webhook answered 503."

    async def test_an_answer_that_is_not_http_is_a_final_failure(self) -> None:
        async def ssh(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(ssh, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/in"
        async with server, new_lane() as lane:
            outcome = await send_webhook(lane, {"url": url}, {"hmac_secret": SECRET}, _envelope(EMAIL), 5)
        assert not outcome.sent
        assert not outcome.transient  # attempted again, it would answer the same
        assert "not HTTP" in (outcome.reason or "")

    async def test_unreachable_is_a_connector_failure(self, closed_port: int) -> None:
        url = f"http://127.0.0.1:{closed_port}/in?token=hidden"
        async with new_lane() as lane:
            outcome = await send_webhook(lane, {"url": url}, {"hmac_secret": SECRET}, _envelope(EMAIL), 5)
        assert not outcome.sent
        assert outcome.connector_down
        assert "hidden" not in (outcome.reason or "")


class TestSmtpInternationalAddresses:
    """Addresses beyond ASCII go in UTF-8 where the server offers SMTPUTF8 (RFC 6531/6532), and in
    the form it can carry where it does not: the extension is never asked of a server without it."""

    async def test_a_reply_to_beyond_ascii_is_one_address_in_utf8(self) -> None:
        server = start_smtp(smtputf8=True)
        try:
            content = {**EMAIL, "reply_to_address": "réponse@bücher.example"}
            outcome = await send_smtp(_smtp(server), {}, _envelope(content), 5)
        finally:
            server.controller.stop()
        assert outcome.sent, outcome.reason
        [mail] = server.received
        assert "SMTPUTF8" in mail.mail_options
        # Not an encoded word inside the address (RFC 2047 §5), which readers would reply to.
        assert "Reply-To: réponse@bücher.example".encode() in mail.raw
        # RFC 6532 headers are UTF-8: read as text (the bytes parser keeps them as escapes).
        parsed = message_from_string(mail.raw.decode(), policy=policy.default)
        assert parsed["Reply-To"].addresses[0].addr_spec == "réponse@bücher.example"

    @pytest.mark.parametrize("name", ["Zoë's shop", ""])
    async def test_a_sender_beyond_ascii_goes_in_utf8(self, name: str) -> None:
        # It failed on every server with the package's "'ascii' codec can't encode" as the reason.
        server = start_smtp(smtputf8=True)
        try:
            content = {**EMAIL, "from_address": "zoë@example.com", "sender_name": name}
            outcome = await send_smtp(_smtp(server), {}, _envelope(content), 5)
        finally:
            server.controller.stop()
        assert outcome.sent, outcome.reason
        [mail] = server.received
        assert (mail.mail_from, mail.mail_options[:1]) == ("zoë@example.com", ["SMTPUTF8"])
        parsed = message_from_string(mail.raw.decode(), policy=policy.default)
        [sender] = parsed["From"].addresses
        assert (sender.display_name, sender.addr_spec) == (name, "zoë@example.com")

    async def test_without_smtputf8_a_domain_goes_in_its_ascii_form(self, smtp_server: SmtpServer) -> None:
        content = {**EMAIL, "reply_to_address": "help@bücher.example", "cc_ids": ["cc@bücher.example"]}
        envelope = _envelope(content, test=False)
        envelope.recipient.address = "ana@bücher.example"
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, envelope, 5)
        assert outcome.sent, outcome.reason
        [mail] = smtp_server.received
        assert "SMTPUTF8" not in mail.mail_options
        assert mail.rcpt_tos == ["ana@xn--bcher-kva.example", "cc@xn--bcher-kva.example", "bcc@shop.example"]
        assert (mail.message["To"], mail.message["Reply-To"]) == (
            "ana@xn--bcher-kva.example",
            "help@xn--bcher-kva.example",
        )
        assert mail.raw.isascii()

    async def test_without_smtputf8_a_copy_it_cannot_carry_is_left_out(self, smtp_server: SmtpServer) -> None:
        # The user's own mail goes: a cc the server cannot take is no failure of it (as one refused).
        content = {**EMAIL, "cc_ids": ["jörg@example.com", "cc@shop.example"]}
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, _envelope(content, test=False), 5)
        assert outcome.sent, outcome.reason
        [mail] = smtp_server.received
        assert mail.rcpt_tos == ["ana@example.com", "cc@shop.example", "bcc@shop.example"]
        assert mail.message["Cc"] == "cc@shop.example"

    @pytest.mark.parametrize(
        ("field", "address", "role"),
        [
            ("recipient", "jörg@example.com", "recipient"),
            ("reply_to_address", "réponse@example.com", "reply-to"),
            ("from_address", "zoë@example.com", "sender"),
        ],
    )
    async def test_without_smtputf8_an_address_it_cannot_carry_fails_the_message_for_good(
        self, smtp_server: SmtpServer, field: str, address: str, role: str
    ) -> None:
        envelope = _envelope({**EMAIL, field: address} if field != "recipient" else EMAIL)
        if field == "recipient":
            envelope.recipient.address = address
        outcome = await send_smtp(_smtp(smtp_server, **LOGIN), PASSWORD, envelope, 5)
        assert (outcome.sent, outcome.transient) == (False, False)
        assert f"does not offer SMTPUTF8, which the {role} address '{address}' needs" in str(outcome.reason)
        assert smtp_server.received == []


class TestSmtpHeaderLines:
    async def test_the_first_message_of_a_connection_goes_8bit_where_the_server_takes_it(self) -> None:
        # No login: nothing else greets the server before the first message.
        server = start_smtp()
        content = {**EMAIL, "html_content": "<p>Grüße</p>"}
        sessions = SmtpSessions()
        try:
            for _ in range(2):
                outcome = await sessions.send("c", _smtp(server), {}, _envelope(content), 5)
                assert outcome.sent, outcome.reason
        finally:
            await sessions.close()
            server.controller.stop()
        assert [mail.mail_options for mail in server.received] == [["BODY=8BITMIME"]] * 2

    async def test_a_sender_name_without_spaces_is_folded_under_998_octets(
        self, smtp_server: SmtpServer
    ) -> None:
        name = "S" * 1200
        outcome = await send_smtp(
            _smtp(smtp_server, **LOGIN), PASSWORD, _envelope({**EMAIL, "sender_name": name}), 5
        )
        assert outcome.sent, outcome.reason
        [mail] = smtp_server.received
        assert max(map(len, mail.raw.split(b"\r\n"))) <= 998
        # Encoded words next to each other are one text (RFC 2047 §6.2), as mail readers show them.
        raw_from = message_from_bytes(mail.raw, policy=policy.compat32)["From"]
        assert str(make_header(decode_header(raw_from))) == f"{name} <news@shop.example>"

    def test_mime_version_is_said_once_for_the_message(self) -> None:
        message = build_email(_envelope(EMAIL))
        assert message["MIME-Version"] == "1.0"
        assert [part["MIME-Version"] for part in message.iter_parts()] == [None, None]

    def test_control_characters_are_left_out_of_headers(self) -> None:
        message = build_email(
            _envelope({**EMAIL, "subject": "Sale\x07\x1b[31m now\x7f", "sender_name": "Sh\x07op"})
        )
        assert (message["Subject"], message["From"]) == ("Sale[31m now", "Shop <news@shop.example>")
