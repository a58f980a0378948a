"""Tables of the delivery engine: one execution per campaign run, one row per user of its audience.

Every primary key and index starts with `workspace_id`. The audience is materialised once, when the
execution starts ("resolved at that moment"), so later batches, stats and a restarted worker all see
the same users; each user row carries a hash of (campaign, user) that orders the work and decides
hold-outs deterministically.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKeyConstraint, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, UTCDateTime


class Execution(Base):
    """One run of a campaign: RESOLVING (audience being counted, or materialised before any send
    for a campaign that cannot stream it) → DISPATCHING (sending; the audience may still be being
    written: `resolved_at`) → DONE;
    STOPPED when the campaign was stopped before every user was settled; FAILED (with `reason`)
    when its audience could not be resolved; PAUSED (with `reason`) while a connector kept
    failing, until someone resumes it (`delivery.engine.pause`)."""

    __tablename__ = "delivery_executions"
    __table_args__ = (
        # A one-time campaign runs once: a second worker racing to start it hits this index.
        Index(
            "uq_delivery_executions_workspace_id_campaign_id_run",
            "workspace_id",
            "campaign_id",
            "run",
            unique=True,
        ),
        Index("ix_delivery_executions_workspace_id_status", "workspace_id", "status"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24))
    run: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16))
    # Resolution resumes after this customer id if the worker stopped half-way ("" once prepared:
    # counts taken and control group fixed, nobody written yet; None before).
    resolved_after: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # When the whole audience was written (None while chunks are still being written, possibly
    # while the first users are already being sent).
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # Users the segmentation selected but the channel's rules leave out, counted at resolution.
    opted_out: Mapped[int] = mapped_column(BigInteger, default=0)
    # Unsubscribed from the subscription category of a PROMOTIONAL e-mail.
    unsubscribed: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    no_address: Mapped[int] = mapped_column(BigInteger, default=0)
    # Users materialised (eligible: not opted out, with an address on the channel); while the
    # audience is still being written, the users counted for it when the execution was prepared.
    audience: Mapped[int] = mapped_column(BigInteger, default=0)
    # Users with a hash at or below it are the campaign control group (None: no control group).
    control_threshold: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Users handed to dispatch so far, counted against `campaign_audience_limit`.
    dispatched: Mapped[int] = mapped_column(BigInteger, default=0)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ExecutionUser(Base):
    """A user of an execution's audience and how far it got: PENDING → CLAIMED → SENT / FAILED, or
    HELD_OUT (`reason`: CONTROL_GROUP, GLOBAL_CONTROL) / SUPPRESSED (`reason`: NO_ADDRESS for a push
    token of no campaign platform, AUDIENCE_LIMIT, FREQUENCY_CAP, DND, MINIMUM_DELAY). A user whose
    message failed transiently waits in RETRY (`reason`: the last failure) until `not_before`, then
    is claimed again; a PENDING user with `not_before` was deferred (quiet hours, minimum delay) and
    is not claimed before then. Opted-out users and users without an address are never
    materialised; the execution counts them."""

    __tablename__ = "delivery_execution_users"
    __table_args__ = (
        Index(
            "ix_delivery_execution_users_ws_execution_state_rank",
            "workspace_id",
            "execution_id",
            "state",
            "rank",
        ),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    execution_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    # Hash of (campaign, user), 62 bits: orders the work and decides the control group.
    rank: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # RETRY: the next attempt; PENDING: deferred by the delivery controls until then.
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class ThrottleWindow(Base):
    """Sends granted to a campaign in one clock minute (`campaign_throttle_rpm`) when no Redis is
    configured: every worker takes its share from this row, locked, inside its claim."""

    __tablename__ = "delivery_throttle_windows"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    minute: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    used: Mapped[int] = mapped_column(BigInteger, default=0)
