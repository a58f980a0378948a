"""Connector rules (pure): what `herald connectors add` accepts, and what it refuses and why."""

from __future__ import annotations

import pytest

from herald.campaigns.schemas.common import Channel
from herald.delivery.config import (
    ConnectorInput,
    check_connector,
    check_webhook_url,
    sender_allowed,
    shown_url,
)

GENERATED = "g" * 43


def _errors(given: ConnectorInput) -> list[str]:
    return check_connector(given, GENERATED)[1]


class TestSmtp:
    def test_defaults_are_starttls_on_587(self) -> None:
        checked, errors = check_connector(
            ConnectorInput("mail", "CUSTOM_SMTP", host="smtp.example.com"), GENERATED
        )
        assert errors == []
        assert checked is not None
        assert checked.channel is Channel.EMAIL
        assert checked.settings["port"] == 587
        assert checked.settings["security"] == "starttls"
        assert checked.secrets == {}

    @pytest.mark.parametrize(("security", "port"), [("none", 25), ("starttls", 587), ("tls", 465)])
    def test_default_port_follows_security(self, security: str, port: int) -> None:
        checked, _ = check_connector(
            ConnectorInput("m", "CUSTOM_SMTP", host="h", security=security), GENERATED
        )
        assert checked is not None
        assert checked.settings["port"] == port

    def test_password_goes_to_secrets_not_settings(self) -> None:
        given = ConnectorInput("m", "CUSTOM_SMTP", host="h", username="u", password="p4ss")
        checked, _ = check_connector(given, GENERATED)
        assert checked is not None
        assert checked.secrets == {"password": "p4ss"}
        assert "p4ss" not in repr(checked.settings)

    @pytest.mark.parametrize(
        ("given", "fragment"),
        [
            (ConnectorInput("m", "CUSTOM_SMTP"), "--host is required"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="smtp://h"), "is not a server name or address"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", port=70000), "--port"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", security="ssl"), "--security"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", username="u"), "go together"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", password="p"), "go together"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", senders=("nobody",)), "not an e-mail"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", senders=("@",)), "not '@domain'"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", url="https://x.example"), "belong to webhook"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", channel="push"), "carry e-mail"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", ca_file="/no/such/file.pem"), "--ca-file"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", timeout=0), "--timeout"),
            (ConnectorInput("m", "CUSTOM_SMTP", host="h", timeout=600), "--timeout"),
        ],
    )
    def test_refusals_say_what_is_wrong(self, given: ConnectorInput, fragment: str) -> None:
        assert any(fragment in error for error in _errors(given)), _errors(given)


class TestWebhook:
    def test_generated_secret_is_used_when_none_given(self) -> None:
        checked, _ = check_connector(
            ConnectorInput("hook", "CUSTOM_API", url="https://h.example/in"), GENERATED
        )
        assert checked is not None
        assert checked.secrets == {"hmac_secret": GENERATED}

    def test_custom_api_may_carry_push(self) -> None:
        given = ConnectorInput("push", "CUSTOM_API", channel="push", url="https://h.example/in")
        checked, _ = check_connector(given, GENERATED)
        assert checked is not None
        assert checked.channel is Channel.PUSH

    @pytest.mark.parametrize(
        "kind", ["SENDGRID", "AMAZON_SES", "SPARKPOST", "MANDRILL", "NETCORE", "sendgrid"]
    )
    def test_provider_names_are_email_webhooks(self, kind: str) -> None:
        checked, _ = check_connector(ConnectorInput("p", kind, url="https://relay.example/in"), GENERATED)
        assert checked is not None
        assert checked.channel is Channel.EMAIL
        assert _errors(ConnectorInput("p", kind, channel="push", url="https://relay.example/in"))

    @pytest.mark.parametrize(
        ("given", "fragment"),
        [
            (ConnectorInput("h", "CUSTOM_API"), "--url is required"),
            (ConnectorInput("h", "CUSTOM_API", url="http://hooks.example.com/in"), "loopback"),
            (ConnectorInput("h", "CUSTOM_API", url="https://h.example", secret="short"), "16 characters"),
            (ConnectorInput("h", "CUSTOM_API", url="https://h.example", host="x"), "belong to CUSTOM_SMTP"),
            (ConnectorInput("h", "CUSTOM_API", url="https://h.example", channel="sms"), "--channel"),
            (ConnectorInput("h", "PIGEON", url="https://h.example"), "--type must be one of"),
            (ConnectorInput("", "CUSTOM_API", url="https://h.example"), "--name"),
            (ConnectorInput("-x", "CUSTOM_API", url="https://h.example"), "--name"),
        ],
    )
    def test_refusals_say_what_is_wrong(self, given: ConnectorInput, fragment: str) -> None:
        assert any(fragment in error for error in _errors(given)), _errors(given)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/in", True),
        ("https://hooks.example.com:8443/in?token=x", True),
        ("http://127.0.0.1:9000/in", True),
        ("http://127.8.9.10/in", True),
        ("http://localhost/in", True),
        ("http://[::1]:9000/in", True),
        ("http://10.0.0.1/in", False),
        ("http://hooks.example.com/in", False),
        ("ftp://hooks.example.com/in", False),
        ("https://user:pw@hooks.example.com/in", False),
        ("https://hooks.example.com/in#frag", False),
        ("https://hooks.example.com:99999/in", False),
        ("https:///in", False),
        ("not a url", False),
    ],
)
def test_webhook_urls(url: str, allowed: bool) -> None:
    assert (check_webhook_url(url) is None) is allowed


def test_shown_url_hides_the_query() -> None:
    assert shown_url("https://h.example/in?token=s3cret") == "https://h.example/in?…"
    assert shown_url("https://h.example/in") == "https://h.example/in"


@pytest.mark.parametrize(
    ("address", "senders", "allowed"),
    [
        ("news@example.com", [], True),
        ("news@example.com", ["news@example.com"], True),
        ("NEWS@Example.com", ["news@example.com"], True),
        ("other@example.com", ["news@example.com"], False),
        ("any@example.com", ["@example.com"], True),
        ("any@notexample.com", ["@example.com"], False),
        ("any@mail.example.com", ["@example.com"], False),
        # One domain in either form: a server without SMTPUTF8 is sent the ASCII one.
        ("news@bücher.example", ["@xn--bcher-kva.example"], True),
        ("news@xn--bcher-kva.example", ["@Bücher.example"], True),
        ("news@BÜCHER.example", ["news@bücher.example"], True),
        ("news@bucher.example", ["@bücher.example"], False),
    ],
)
def test_verified_senders(address: str, senders: list[str], allowed: bool) -> None:
    assert sender_allowed(address, senders) is allowed
