"""Tables of the delivery domain: configured connectors and the outbox of every send.

Every primary key and index starts with `workspace_id`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime


class Connector(Base):
    """A way out of Herald: an SMTP server or a webhook, named per workspace.

    `settings` holds what may be shown (host, port, security, username, senders, URL, timeout);
    `sealed_secrets` holds the password or HMAC secret, encrypted (see `delivery.crypto`), and is
    never returned by any API or listing.
    """

    __tablename__ = "delivery_connectors"
    __table_args__ = (
        Index("uq_delivery_connectors_workspace_id_name", "workspace_id", "name", unique=True),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    type: Mapped[str] = mapped_column(String(32))
    # Which messages it carries: EMAIL or PUSH.
    channel: Mapped[str] = mapped_column(String(16))
    settings: Mapped[dict[str, Any]] = mapped_column(PortableJSON, default=dict)
    sealed_secrets: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


# The outbox and the engine's users' rows (`engine.models.ExecutionUser`) are written once or
# twice per message, and carry no foreign key to workspaces: on PostgreSQL the key's check is a
# query of its own per row (24 µs of an outbox row's 63 µs, measured), and every other table keeps
# the key. Their rows are only written by the engine and test sends, which take the workspace
# from a row that has the key, and a workspace is never deleted (migration 0023).
# On PostgreSQL the outbox's pages are filled to 70 %, so that the row written SENT after its
# send fits beside the PENDING one it replaces (a "HOT" update: no new entry in its indexes).


# The rows waiting for a retry. A statement that is to walk their index
# (`ix_delivery_outbox_ws_campaign_waiting_retry`) states this condition word for word, with
# literals (as `engine.models.PENDING_FIRINGS`); it implies the index's own, `WAITING`.
WAITING_RETRY = "status = 'PENDING' AND next_attempt_at IS NOT NULL"
# The index's condition names `next_attempt_at` alone, which only a waiting row has (its next
# attempt clears it, as does settling it FAILED): with `status` in it, no settle of a row could be
# a HOT update (migration 0032).
WAITING = "next_attempt_at IS NOT NULL"


class OutboxEntry(Base):
    """One message to one recipient through one connector, test or real, and how it went.

    Written PENDING in its own transaction before the attempt and finished SENT or FAILED in
    another right after, so a process that dies mid-send leaves an honest PENDING row behind.
    A campaign message that failed transiently stays PENDING with the reason, its `attempts` so far
    and `next_attempt_at`; the next attempt clears `next_attempt_at` before it starts.
    """

    __tablename__ = "delivery_outbox"
    __table_args__ = (
        Index("ix_delivery_outbox_workspace_id_created_at", "workspace_id", "created_at"),
        # Frequency caps and the minimum delay read a user's recent messages.
        Index(
            "ix_delivery_outbox_workspace_id_customer_id_created_at",
            "workspace_id",
            "customer_id",
            "created_at",
        ),
        # The rows waiting for a retry, by campaign: an execution that ends settles them
        # (`engine.abandoned`) without reading the workspace's whole outbox (migration 0027).
        Index(
            "ix_delivery_outbox_ws_campaign_waiting_retry",
            "workspace_id",
            "campaign_id",
            sqlite_where=text(WAITING),
            postgresql_where=text(WAITING),
        ),
        # No foreign key to workspaces; on PostgreSQL a fill factor of 70 (see above the class).
        # The delivery id leads the key: a window's rows are found by their ids alone
        # (`outbox._SETTLE_MANY`), which no other index can serve (migration 0026).
        PrimaryKeyConstraint("id", "workspace_id"),
    )

    workspace_id: Mapped[str] = mapped_column(String(64))
    id: Mapped[str] = mapped_column(String(24))
    status: Mapped[str] = mapped_column(String(16))
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    is_test: Mapped[bool] = mapped_column(Boolean, default=False)
    channel: Mapped[str] = mapped_column(String(16))
    # The message's slot: platform (Push), locale and variation.
    platform: Mapped[str | None] = mapped_column(String(16), nullable=True)
    locale: Mapped[str] = mapped_column(String(64))
    variation: Mapped[str] = mapped_column(String(64))
    connector_id: Mapped[str | None] = mapped_column(String(24), nullable=True)
    connector_name: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # Where it went: an e-mail address or a push token; and whose, when the user is known.
    recipient: Mapped[str] = mapped_column(String(500))
    customer_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    campaign_id: Mapped[str | None] = mapped_column(String(24), nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # What was sent, in short: subject or title, sender, sizes (never whole bodies or secrets).
    summary: Mapped[dict[str, Any]] = mapped_column(PortableJSON, default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ConnectorStreak(Base):
    """A connector's failed attempts in a row, counted by every worker together (`streaks.py`):
    each process adds the failures of its windows and resets the count at a success, so the error
    threshold bounds the failures of all workers, not of each. Only written when an attempt failed,
    after a success that ends a streak, or while places are taken for requests on their way;
    deleted with its connector."""

    __tablename__ = "delivery_connector_streaks"
    __table_args__ = (
        ForeignKeyConstraint(
            ["workspace_id", "connector_id"],
            ["delivery_connectors.workspace_id", "delivery_connectors.id"],
            ondelete="CASCADE",
        ),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    connector_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    failures: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Requests on their way that workers took a place for while the connector was not known to
    # answer well (`streaks.reserve`), given back as their outcomes are recorded; they lapse at
    # `on_the_way_until` (a worker that died holding places).
    on_the_way: Mapped[int] = mapped_column(BigInteger, server_default="0")
    on_the_way_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
