"""Webhook connectors: the rendered message POSTed as JSON, signed (see `delivery.signing`).

Body (UTF-8 JSON):
    {"id": <delivery id>, "test": bool, "workspace_id", "campaign_id": str|null,
     "channel": "PUSH"|"EMAIL", "platform": "ANDROID"|"IOS"|"WEB"|null, "locale", "variation",
     "recipient": {"address", "customer_id", + for Push "push_id", "gaid"},
     "message": <the rendered Push platform object or Email object>, "created_at": ISO 8601 UTC,
     + for Push with `advanced` settings "advanced": {"expires_at"?, "expiration_settings"?,
       "priority"?} (see `delivery.push_options`)}
The POST goes out on a lane (`new_lane`, `delivery.lane`): one kept-alive HTTP/1.1 connection,
answers parsed by httptools (docs/decisions/0006-webhook-lanes-on-httptools.md).

Any 2xx answer is success. Redirects are not followed (a signed request is never replayed to a
host the connector does not name); a 3xx, 4xx or 5xx answer is a failure with its status. A 5xx,
408 or 429 answer, a timeout (`time_limit` for the whole call), no connection, or one that closed
before the whole answer came is transient (a live send is attempted again later, with the same
`id`, so a receiver drops a repeat by it); any other failure (an answer that is not HTTP) is final.

Batched mode (the connector's `batch_size` above 1; campaign messages only, test sends stay one per
POST): the body is a JSON array of up to `batch_size` of the objects above, each with its own `id`;
`X-Herald-Delivery` then names the batch (a hash of its ids, the same for a retry of the same
messages). The answer is the answer for every message of the batch: a receiver that accepts the
request has taken them all, and a failed batch is attempted again whole, under the same ids.
"""

from __future__ import annotations

import functools
import hashlib
import ssl
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import orjson

from herald.campaigns.schemas.common import Channel
from herald.delivery.config import shown_url
from herald.delivery.lane import CutShort, Lane, NotHttp
from herald.delivery.messages import Envelope, Outcome
from herald.delivery.signing import signed_headers
from herald.timefmt import rfc3339


def new_lane() -> Lane:
    """A lane to POST on: one kept-alive connection, verified against the process's certificate
    store. Its posts follow no redirects (the signature is for the URL the connector names), read
    no proxy settings from the environment and ask for no compression: the request carries the
    headers it is given, Host and Content-Length."""
    return Lane(tls_context())


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificate store every webhook lane verifies against, loaded once per process (a lane
    loading its own took about 50 ms, and a dispatcher is opened for each worker tick)."""
    return httpx.create_ssl_context(trust_env=False)


def webhook_body(envelope: Envelope) -> bytes:
    return orjson.dumps(_payload(envelope, _stamp(envelope.made_at)))


def batch_body(envelopes: Sequence[Envelope]) -> bytes:
    return orjson.dumps([_payload(envelope, _stamp(envelope.made_at)) for envelope in envelopes])


@functools.lru_cache(maxsize=16)
def _stamp(now: datetime) -> str:
    # A batch's messages were built at one instant: its timestamp formatted once, not per message.
    return rfc3339(now)


def batch_id(envelopes: Sequence[Envelope]) -> str:
    joined = "\x00".join(envelope.delivery_id for envelope in envelopes)
    return hashlib.sha256(joined.encode()).hexdigest()[:24]


def _payload(envelope: Envelope, created_at: str) -> dict[str, Any]:
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
        "message": _message_of(envelope),
        "created_at": created_at,
    }
    if envelope.advanced is not None:
        payload["advanced"] = envelope.advanced
    return payload


# A test mail goes to the test recipient only, through SMTP as through a webhook: a gateway that
# relays the message as it comes would otherwise copy every test to the campaign's cc and bcc.
_LIVE_ONLY = ("cc_ids", "bcc_ids")


def _message_of(envelope: Envelope) -> dict[str, Any]:
    message = envelope.message
    if (
        envelope.is_test
        and envelope.slot.channel is Channel.EMAIL
        and any(key in message for key in _LIVE_ONLY)
    ):
        return {key: value for key, value in message.items() if key not in _LIVE_ONLY}
    return message


async def send_webhook(
    lane: Lane,
    settings: dict[str, Any],
    secrets: dict[str, str],
    envelope: Envelope,
    time_limit: float,
) -> Outcome:
    return await _post(
        lane, settings, secrets, webhook_body(envelope), envelope, envelope.delivery_id, time_limit
    )


async def send_webhook_batch(
    lane: Lane,
    settings: dict[str, Any],
    secrets: dict[str, str],
    envelopes: Sequence[Envelope],
    time_limit: float,
) -> Outcome:
    """Every message of `envelopes` in one POST; the outcome is each one's."""
    body = batch_body(envelopes)
    return await _post(lane, settings, secrets, body, envelopes[0], batch_id(envelopes), time_limit)


async def _post(
    lane: Lane,
    settings: dict[str, Any],
    secrets: dict[str, str],
    body: bytes,
    envelope: Envelope,
    delivery: str,
    time_limit: float,
) -> Outcome:
    url = str(settings["url"])
    signed = signed_headers(secrets["hmac_secret"], int(envelope.now.timestamp()), body, delivery)
    headers = b"".join(f"{name}: {value}\r\n".encode() for name, value in signed.items())
    try:
        code = await lane.post(url, _FIXED_HEADERS + headers, body, time_limit)
    except TimeoutError:  # the whole call, connecting included
        reason = f"The webhook {shown_url(url)} did not answer within {time_limit:g}s."
        return Outcome(False, reason, connector_down=True, transient=True)
    except NotHttp as exc:  # a server, but not one that speaks HTTP there: final, as a 4xx is
        return Outcome(
            False, f"The webhook {shown_url(url)} answered with something that is not HTTP: {exc}."
        )
    except CutShort:
        reason = f"The webhook {shown_url(url)} closed the connection before its whole answer came."
        return Outcome(False, reason, connector_down=True, transient=True)
    except (OSError, UnicodeError) as exc:  # no connection, a host it cannot name, TLS refused
        detail = str(exc).strip() or type(exc).__name__
        reason = f"The webhook {shown_url(url)} could not be reached: {detail}"
        return Outcome(False, reason, connector_down=True, transient=True)
    if 200 <= code < 300:
        return Outcome(True)
    if code in _REDIRECTS:
        return Outcome(False, f"The webhook answered {code} (redirects are not followed).")
    transient = code >= 500 or code in _RETRYABLE
    asked = _asked_wait(lane.retry_after, envelope.now) if transient else None
    return Outcome(False, f"The webhook answered {code}.", transient=transient, asked_wait=asked)


def _asked_wait(value: bytes | None, now: datetime) -> timedelta | None:
    """A Retry-After header's wait (RFC 9110 §10.2.3: delay-seconds, or an HTTP-date read against
    the injected clock); None when absent or unreadable (the usual backoff then applies)."""
    if value is None:
        return None
    text = value.decode("latin-1").strip()
    if text.isascii() and text.isdigit():  # not "²", which str.isdigit takes and int refuses
        # Ten digits or more ask for longer than any wait (and int() refuses thousands of them).
        return timedelta(seconds=_LONGEST_ASKED if len(text) > 9 else min(int(text), _LONGEST_ASKED))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; a reader leaves "-0000" naive
        when = when.replace(tzinfo=UTC)
    return max(timedelta(0), min(when - now, timedelta(seconds=_LONGEST_ASKED)))


_FIXED_HEADERS = b"Content-Type: application/json\r\nUser-Agent: Herald-Webhook/1\r\n"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Client errors that say "later", not "never": request timeout and too many requests.
_RETRYABLE = frozenset({408, 429})
# A Retry-After beyond any retry wait is read as this (the wait is capped far below it anyway).
_LONGEST_ASKED = 366 * 86400
