"""The values a send is made of: where in the campaign (slot), to whom, what, and how it went."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from herald.campaigns.schemas.common import Channel, Platform


@dataclass(frozen=True, slots=True)
class Slot:
    """One message of a campaign: a platform (Push), a locale and a variation."""

    channel: Channel
    platform: Platform | None
    locale: str
    variation: str

    @property
    def key(self) -> str:
        """The C8 answer's key, e.g. `ANDROID_default_variation_1` or `EMAIL_es-ES_variation_2`."""
        head = self.platform.value if self.platform is not None else self.channel.value
        return f"{head}_{self.locale}_{self.variation}"


# Recipients and envelopes are built per message: not frozen, whose `__init__` sets each field
# through `object.__setattr__` (about 5 times the cost of a plain one). Nothing writes to them once built.
@dataclass(slots=True)
class Recipient:
    """Who a test goes to. `profile` is None for an address that is not a known user."""

    identifier_value: str
    address: str | None  # e-mail address (Email) or push token (Push); None: cannot be reached
    customer_id: str | None = None
    profile: dict[str, Any] | None = None
    unreachable_reason: str | None = None
    contact: dict[str, str | None] = field(default_factory=dict)  # ids a push gateway may need
    # Push tokens by platform (`audience.models.PushToken`); empty: `address` (push_id) serves all.
    tokens: dict[str, str] = field(default_factory=dict)

    def on(self, platform: Platform | None) -> Recipient:
        """This recipient as a message for `platform` reaches it: its token there (None when it
        has tokens but none for that platform), else the one address it has."""
        if platform is None or not self.tokens:
            return self
        token = self.tokens.get(platform.value)
        reason = None if token else f"User '{self.customer_id}' has no {platform.value} push token."
        # The message's `push_id` is its platform's token: a gateway sending by push_id must not
        # reach another of the user's devices (the user's own push_id is the token seen last).
        contact = {**self.contact, "push_id": token} if "push_id" in self.contact else self.contact
        return Recipient(
            self.identifier_value, token, self.customer_id, self.profile, reason, contact, self.tokens
        )


@dataclass(slots=True)
class Envelope:
    """One rendered message to one recipient, ready for a connector."""

    delivery_id: str  # the outbox entry's id; unique per message
    workspace_id: str
    campaign_id: str | None
    is_test: bool
    slot: Slot
    recipient: Recipient
    message: dict[str, Any]  # the rendered Push platform object or Email object
    now: datetime
    # Push: the campaign's `advanced` settings for this platform (`delivery.push_options`).
    advanced: dict[str, Any] | None = None
    # When the message was first made, if before `now`: an attempt after a transient failure (or a
    # taken-over one) keeps its first `created_at`, and its push expiry counts from then.
    created_at: datetime | None = None

    @property
    def made_at(self) -> datetime:
        """When the message was made: its first attempt's moment, else this one's."""
        return self.created_at or self.now


@dataclass(frozen=True, slots=True)
class Outcome:
    sent: bool
    reason: str | None = None
    # The connector itself failed (unreachable, refused our credentials): later messages of the
    # same request through it are not attempted, so a dead server costs one timeout, not ten.
    connector_down: bool = False
    # A failure that may pass (SMTP 4xx, webhook 5xx/408/429, no connection, a timeout): a live
    # send is attempted again later; anything else is final.
    transient: bool = False
    # When a live send that failed transiently is attempted again (None: it is settled).
    retry_at: datetime | None = None
    # False for a message not handed to the connector at all (it was down earlier in the same
    # batch): such a message tells nothing about the connector and counts in no error streak.
    attempted: bool = True
    # How long the receiver asked to be left alone after a transient failure (a webhook's
    # Retry-After): the next attempt waits at least that long, within the longest retry wait.
    asked_wait: timedelta | None = None


def summary_of(envelope: Envelope) -> dict[str, Any]:
    """What the outbox keeps of a message: enough to recognise it, never whole bodies."""
    message = envelope.message
    if envelope.slot.channel is Channel.EMAIL:
        html = message.get("html_content")
        return {
            "subject": _short(message.get("subject")),
            "from": message.get("from_address"),
            "html_bytes": len(html.encode()) if isinstance(html, str) else 0,
        }
    found = message.get("basic_details")
    visible: dict[str, Any] = found if isinstance(found, dict) else {}
    return {
        "title": _short(visible.get("title")),
        "message": _short(visible.get("message")),
        "template_type": message.get("template_type"),
    }


def _short(value: object, limit: int = 200) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[: limit - 1] + "…"
