"""E-mail attachments (`herald.delivery.attachments`): carried by live and test mails to a real SMTP
server, refused with the field's path where they cannot be (validate, publish, test send)."""

from __future__ import annotations

import base64
import copy
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.campaigns import lifecycle_helpers as h
from tests.delivery.builders import create_campaign, detail_targets, inline_email, send_test, smtp_connector
from tests.delivery.conftest import add_users
from tests.delivery.servers import SmtpServer
from tests.delivery.test_engine_send import EMAIL, publish, tick
from tests.factories import Tenant

PDF = b"%PDF-1.4\n" + bytes(range(256)) * 4  # binary: every byte value
ATTACHMENTS = [
    {"file_name": "invoice.pdf", "content": base64.b64encode(PDF).decode()},
    {
        "file_name": "Übersicht {{UserAttribute['first_name'] | default('x')}}.txt",
        "content": "aGk=",
        "content_type": "text/plain",
    },
    {"file_name": "note.eml", "content": "aGk="},
]
PATH = "campaign_content.content.email.attachments"


def _with(body: dict[str, Any], attachments: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["campaign_content"]["content"]["email"]["attachments"] = attachments
    return body


def _files(mail: Any) -> list[tuple[str, str, bytes]]:
    return [
        (part.get_filename(), part.get_content_type(), part.get_payload(decode=True))
        for part in mail.message.iter_attachments()
    ]


async def test_a_live_mail_carries_its_attachments(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
) -> None:
    await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
    await add_users(
        app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com", "first_name": "Ana"}
    )
    await publish(client, workspace, _with(EMAIL, ATTACHMENTS))
    await tick(app, workspace)
    [mail] = smtp_server.received
    assert mail.message.get_content_type() == "multipart/mixed"
    assert "Hello Ana" in mail.html  # the bodies are still the alternatives
    assert _files(mail) == [
        ("invoice.pdf", "application/pdf", PDF),  # the type from the name
        ("Übersicht Ana.txt", "text/plain", b"hi"),  # a name is personalized as any text
        ("note.eml", "application/octet-stream", b"hi"),  # not message/rfc822, which base64 cannot carry
    ]


async def test_an_attachment_that_is_no_inline_file_is_kept_and_not_carried(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
) -> None:
    # The items' shape is the campaign's: a link, say, is kept as written (webhook connectors get
    # it), and the mail goes with the inline files only; Herald fetches nothing.
    link = {"name": "catalogue.pdf", "url": "https://cdn.example.com/catalogue.pdf"}
    inline = {"name": "a.txt", "content": "aGk="}
    await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
    await add_users(app, workspace.workspace_id, {"customer_id": "ana", "email": "ana@example.com"})
    campaign_id = await publish(client, workspace, _with(EMAIL, [link, inline]))
    stored = await h.get(client, workspace, campaign_id)
    assert stored["campaign_content"]["content"]["email"]["attachments"] == [link, inline]
    await tick(app, workspace)
    [mail] = smtp_server.received
    assert _files(mail) == [("a.txt", "text/plain", b"hi")]


async def test_a_name_that_renders_to_no_file_name_fails_that_user_with_the_reason(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
) -> None:
    named = [{"file_name": "{{UserAttribute['first_name']}}.txt", "content": "aGk="}]
    await smtp_connector(app, workspace, smtp_server)
    await add_users(
        app, workspace.workspace_id, {"customer_id": "u1", "email": "ana@example.com", "first_name": "a/b"}
    )
    response = await send_test(client, workspace, _with(inline_email("EMAIL", "ana@example.com"), named))
    assert response.status_code == 200, response.text
    [result] = response.json()["data"]["data"].values()
    assert result["status"] == "FAILED"
    assert "attachments.0.file_name" in result["failure_reason"]
    assert "'/'" in result["failure_reason"]  # what is wrong with it, not the item's shape
    assert smtp_server.received == []


async def test_a_test_mail_carries_them_too(
    app: FastAPI, client: httpx.AsyncClient, workspace: Tenant, smtp_server: SmtpServer
) -> None:
    await smtp_connector(app, workspace, smtp_server)
    response = await send_test(
        client, workspace, _with(inline_email("EMAIL", "ana@example.com"), ATTACHMENTS[:1])
    )
    assert response.status_code == 200, response.text
    [mail] = smtp_server.received
    assert _files(mail) == [("invoice.pdf", "application/pdf", PDF)]


BAD: list[tuple[Any, set[tuple[str, str]]]] = [
    # (Not a list, or not objects: refused when written, as the schema says.)
    ([{"content": "aGk="}], {("REQUIRED_FIELD_MISSING", f"{PATH}.0.file_name")}),
    ([{"name": "", "content": "aGk="}], {("REQUIRED_FIELD_MISSING", f"{PATH}.0.name")}),
    ([{"file_name": "a.pdf", "content": "not base64!"}], {("INVALID_TYPE", f"{PATH}.0.content")}),
    ([{"file_name": "a.pdf", "content": None}], {("INVALID_TYPE", f"{PATH}.0.content")}),
    ([{"file_name": "../a.pdf", "content": "aGk="}], {("INVALID_TYPE", f"{PATH}.0.file_name")}),
    ([{"file_name": "a\r\nb.pdf", "content": "aGk="}], {("INVALID_TYPE", f"{PATH}.0.file_name")}),
    (
        [{"file_name": "a.pdf", "content": "aGk=", "content_type": "pdf"}],
        {("INVALID_TYPE", f"{PATH}.0.content_type")},
    ),
    ([ATTACHMENTS[0], {"file_name": "b.pdf", "content": 7}], {("INVALID_TYPE", f"{PATH}.1.content")}),
    # A multipart or message part cannot go in base64 (it went out with no boundary, or read empty).
    (
        [{"file_name": "a.eml", "content": "aGk=", "content_type": "message/rfc822"}],
        {("INVALID_TYPE", f"{PATH}.0.content_type")},
    ),
    (
        [{"file_name": "a", "content": "aGk=", "content_type": "Multipart/Mixed"}],
        {("INVALID_TYPE", f"{PATH}.0.content_type")},
    ),
]


@pytest.mark.parametrize(("attachments", "expected"), BAD)
async def test_attachments_that_cannot_be_sent_are_reported_and_refused(
    app: FastAPI,
    client: httpx.AsyncClient,
    workspace: Tenant,
    smtp_server: SmtpServer,
    attachments: Any,
    expected: set[tuple[str, str]],
) -> None:
    await smtp_connector(app, workspace, smtp_server, senders=["news@shop.example"])
    # A draft may hold them (the shape is the campaign's to keep), validate reports them ...
    campaign_id = await create_campaign(client, workspace, _with(EMAIL, attachments))
    validated = await client.post(
        f"{h.BASE}/{campaign_id}/validate", headers=workspace.headers(campaigns=True)
    )
    assert {(d["code"], d["field"]) for d in validated.json()["data"]["errors"]} == {
        (c, t) for c, t in expected
    }
    # ... and neither a publish nor a test send goes out with them.
    refused = await h.v1_patch(client, workspace, campaign_id)
    assert refused.status_code == 422
    assert detail_targets(refused) == expected
    tested = await send_test(client, workspace, _with(inline_email("EMAIL", "ana@example.com"), attachments))
    assert tested.status_code == 400
    assert detail_targets(tested) == expected
    assert smtp_server.received == []
