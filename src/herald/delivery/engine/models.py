"""Tables of the delivery engine: one execution per campaign run, one row per user of its audience.

Every primary key and index starts with `workspace_id`. The audience is materialised once, when the
execution starts ("resolved at that moment"), so later batches, stats and a restarted worker all see
the same users; each user row carries a hash of (campaign, user) that orders the work and decides
hold-outs deterministically.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime
from herald.ids import object_id


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
    # None for a one-time run; EVENT: the one long-lived execution of an EVENT_TRIGGERED campaign,
    # each firing a user row of its own (`engine.triggers`); BUSINESS: one raise of a business event.
    trigger: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # BUSINESS: the event's attributes, `event.*` in every user's personalization.
    event: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON, nullable=True)
    # The moment the run is for: a periodic occurrence, a one-time campaign's `start_time` (the
    # per-user send times count from it); None for ASAP.
    scheduled_for: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # A periodic run's child campaign (`parent_id` = the campaign), shown by C6/C7.
    child_campaign_id: Mapped[str | None] = mapped_column(String(24), nullable=True)
    # Its messages' delivery ids follow the order its users are sent in (`run.delivery_id`); False
    # for an execution begun before they did (migration 0028), whose messages keep the ids they
    # were begun with.
    ordered_ids: Mapped[bool] = mapped_column(Boolean, default=True, server_default=false())

    @classmethod
    def starting(
        cls, workspace_id: str, campaign_id: str, run: int, status: str, now: datetime, **more: Any
    ) -> Execution:
        """A new run of a campaign, nothing counted yet (`more`: its trigger, event, schedule)."""
        return cls(
            workspace_id=workspace_id,
            id=object_id(now),
            campaign_id=campaign_id,
            run=run,
            status=status,
            opted_out=0,
            unsubscribed=0,
            no_address=0,
            audience=0,
            dispatched=0,
            ordered_ids=True,
            created_at=now,
            updated_at=now,
            **more,
        )


# The rows of `ix_delivery_execution_users_ws_execution_pending_firing`. A statement that is to
# walk that index states this condition word for word, with literals: PostgreSQL and SQLite use a
# partial index only where the statement's own terms imply its condition, and a bound parameter
# implies nothing.
PENDING_FIRINGS = "state = 'PENDING' AND firing != ''"
# The users waiting for a moment (deferred, delayed, or to be attempted again): the next one due
# tells a worker how long it may sleep (`campaigns.worker.next_due`; migration 0031).
DEFERRED = "not_before IS NOT NULL AND state IN ('PENDING', 'RETRY')"


class ExecutionUser(Base):
    """A user of an execution's audience and how far it got: PENDING → CLAIMED → SENT / FAILED, or
    HELD_OUT (`reason`: CONTROL_GROUP, GLOBAL_CONTROL) / SUPPRESSED (`reason`: NO_USER,
    AUDIENCE_LIMIT, FREQUENCY_CAP, DND, MINIMUM_DELAY, EXPIRED). A user whose
    message failed transiently waits in RETRY (`reason`: the last failure) until `not_before`, then
    is claimed again; a PENDING user with `not_before` was deferred (quiet hours, minimum delay) and
    is not claimed before then. Opted-out users and users without an address are never
    materialised; the execution counts them."""

    __tablename__ = "delivery_execution_users"
    __table_args__ = (
        # State before execution: a statement naming users by their key must find the key the
        # cheaper index on PostgreSQL whatever its statistics say (migration 0022).
        Index(
            "ix_delivery_execution_users_ws_state_execution_rank",
            "workspace_id",
            "state",
            "execution_id",
            "rank",
        ),
        # An EVENT execution's PENDING firings in claim order (the oldest event first), and only
        # those: a claim reads the firings it takes, however many wait (migration 0024).
        Index(
            "ix_delivery_execution_users_ws_execution_pending_firing",
            "workspace_id",
            "execution_id",
            "firing",
            sqlite_where=text(PENDING_FIRINGS),
            postgresql_where=text(PENDING_FIRINGS),
        ),
        # The users waiting for a moment, by that moment (migration 0031).
        Index(
            "ix_delivery_execution_users_deferred_not_before",
            "not_before",
            sqlite_where=text(DEFERRED),
            postgresql_where=text(DEFERRED),
        ),
        # No foreign key to workspaces, as the outbox (see `delivery.models`).
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    execution_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    # The event that fired this row in an EVENT execution (a user fires once per event); '' otherwise.
    firing: Mapped[str] = mapped_column(String(24), primary_key=True, default="", server_default="")
    # Hash of (campaign, user), 62 bits: orders the work and decides the control group.
    rank: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # CLAIMED: the token of the claim that holds the user (`run._claim_in`; migration 0033). Only
    # that claim's dispatch writes the user's outcome; a worker taking the user over writes its own.
    claim_token: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # RETRY: the next attempt; PENDING: deferred by the delivery controls until then.
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # EVENT: the firing event's attributes (`event.*` in personalization).
    event: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON, nullable=True)


# A user row joined to its execution (`select(...).join(Execution, OF_ITS_EXECUTION)`).
OF_ITS_EXECUTION = (Execution.workspace_id == ExecutionUser.workspace_id) & (
    Execution.id == ExecutionUser.execution_id
)


class ThrottleGrant(Base):
    """Sends granted to a campaign at one instant (`campaign_throttle_rpm`) when no Redis is
    configured: the grants of the last 60 seconds are its budget's use (`engine.throttle`); older
    ones are deleted by the next claim."""

    __tablename__ = "delivery_throttle_grants"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    sends: Mapped[int] = mapped_column(BigInteger)


class TriggerInbox(Base):
    """An event ingested through the API while EVENT_TRIGGERED campaigns naming its action were
    ACTIVE: written in the ingestion's transaction (so an event is never lost nor seen twice), read
    and deleted by the worker in the transaction that writes its firings (`engine.triggers`)."""

    __tablename__ = "delivery_trigger_inbox"
    __table_args__ = (
        Index("ix_delivery_trigger_inbox_workspace_id_received_at", "workspace_id", "received_at"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200))
    # The public ids of the campaigns that were ACTIVE and name the action (a PAUSEd one is not here).
    campaigns: Mapped[list[str]] = mapped_column(PortableJSON)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)


class AttributionWindow(Base):
    """A user of an execution whose campaign has conversion goals, from the moment the message was
    SENT (`held_out` None, with its `variation`) or the user was HELD_OUT (`held_out`: CONTROL_GROUP
    or GLOBAL_CONTROL, when the message would have gone), until `closes_at`
    (`attribution_window_in_hours` later); in an EVENT execution, one per firing (each message has
    its window). Ingestion finds a user's open windows through `ix_..._ws_customer_closes`, so
    attributing an event is one indexed read."""

    __tablename__ = "delivery_attribution_windows"
    __table_args__ = (
        Index(
            "ix_delivery_attribution_windows_ws_customer_closes",
            "workspace_id",
            "customer_id",
            "closes_at",
        ),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    execution_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    # The firing whose message opened it in an EVENT execution; '' otherwise (migration 0025).
    firing: Mapped[str] = mapped_column(String(24), primary_key=True, default="", server_default="")
    campaign_id: Mapped[str] = mapped_column(String(24))
    variation: Mapped[str | None] = mapped_column(String(64), nullable=True)
    held_out: Mapped[str | None] = mapped_column(String(32), nullable=True)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime)
    closes_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Conversion(Base):
    """A goal reached by a user within an attribution window: at most one per window and goal
    (execution, user, firing, goal), which the primary key makes structural whatever the number of
    ingesting processes."""

    __tablename__ = "delivery_conversions"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    execution_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    # The window's firing (see `AttributionWindow.firing`).
    firing: Mapped[str] = mapped_column(String(24), primary_key=True, default="", server_default="")
    # The goal's position in `conversion_goal_details.goals` (fixed while the campaign is live).
    goal: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24))
    goal_name: Mapped[str] = mapped_column(String(200))
    variation: Mapped[str | None] = mapped_column(String(64), nullable=True)
    held_out: Mapped[str | None] = mapped_column(String(32), nullable=True)
    event_id: Mapped[str] = mapped_column(String(24))
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The event's `revenue_attribute` when it is a number (else None: not counted as revenue).
    revenue: Mapped[float | None] = mapped_column(Double, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class PeriodicResume(Base):
    """When a PERIODIC campaign was published or last resumed: occurrences before it (before the
    campaign was live, or missed while it was PAUSED) are never run, so a resume continues with
    the next occurrence, without catching up."""

    __tablename__ = "delivery_periodic_resumes"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    resumed_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BestTime(Base):
    """A user's best time to send (SEND_IN_BTS, INTELLIGENT_DELAY): the local hour at which the
    user's events cluster, in `timezone`; None when the events it was computed from have left the
    history (a user who never had events has no row). Recomputed at most once a day."""

    __tablename__ = "delivery_best_times"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    hour: Mapped[int | None] = mapped_column(Integer, nullable=True)
    timezone: Mapped[str] = mapped_column(String(64))
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime)
