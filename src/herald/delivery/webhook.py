"""Webhook connectors: the rendered message POSTed as JSON, signed (see `delivery.signing`).

Body (UTF-8 JSON):
    {"id": <delivery id>, "test": bool, "workspace_id", "campaign_id": str|null,
     "channel": "PUSH"|"EMAIL", "platform": "ANDROID"|"IOS"|"WEB"|null, "locale", "variation",
     "recipient": {"address", "customer_id", + for Push "push_id", "gaid"},
     "message": <the rendered Push platform object or Email object>, "created_at": ISO 8601 UTC,
     + for Push with `advanced` settings "advanced": {"expires_at"?, "expiration_settings"?,
       "priority"?} (see `delivery.push_options`)}
Any 2xx answer is success. Redirects are not followed (a signed request is never replayed to a
host the connector does not name); a 3xx, 4xx or 5xx answer is a failure with its status. A 5xx,
408 or 429 answer, a timeout or no connection is transient (a live send is attempted again later,
with the same `id`, so a receiver drops a repeat by it); any other failure is final.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from herald.delivery.config import shown_url
from herald.delivery.messages import Envelope, Outcome
from herald.delivery.signing import signed_headers
from herald.timefmt import rfc3339


def webhook_body(envelope: Envelope) -> bytes:
    slot, recipient = envelope.slot, envelope.recipient
    payload: dict[str, Any] = {
        "id": envelope.delivery_id,
        "test": envelope.is_test,
        "workspace_id": envelope.workspace_id,
        "campaign_id": envelope.campaign_id,
        "channel": slot.channel.value,
        "platform": slot.platform.value if slot.platform else None,
        "locale": slot.locale,
        "variation": slot.variation,
        "recipient": {
            "address": recipient.address,
            "customer_id": recipient.customer_id,
            **recipient.contact,
        },
        "message": envelope.message,
        "created_at": rfc3339(envelope.now),
    }
    if envelope.advanced is not None:
        payload["advanced"] = envelope.advanced
    return orjson.dumps(payload)


async def send_webhook(
    client: httpx.AsyncClient,
    settings: dict[str, Any],
    secrets: dict[str, str],
    envelope: Envelope,
    time_limit: float,
) -> Outcome:
    url = str(settings["url"])
    body = webhook_body(envelope)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Herald-Webhook/1",
        **signed_headers(secrets["hmac_secret"], int(envelope.now.timestamp()), body, envelope.delivery_id),
    }
    try:
        response = await client.post(url, content=body, headers=headers, timeout=time_limit)
    except httpx.TimeoutException:
        reason = f"The webhook {shown_url(url)} did not answer within {time_limit:g}s."
        return Outcome(False, reason, connector_down=True, transient=True)
    except httpx.HTTPError as exc:
        detail = str(exc).strip() or type(exc).__name__
        reason = f"The webhook {shown_url(url)} could not be reached: {detail}"
        return Outcome(False, reason, connector_down=True, transient=True)
    if response.is_success:
        return Outcome(True)
    if response.is_redirect:
        return Outcome(False, f"The webhook answered {response.status_code} (redirects are not followed).")
    code = response.status_code
    return Outcome(False, f"The webhook answered {code}.", transient=code >= 500 or code in _RETRYABLE)


# Client errors that say "later", not "never": request timeout and too many requests.
_RETRYABLE = frozenset({408, 429})
