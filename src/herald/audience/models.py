"""Users, events and custom segments. Every primary key and index starts with `workspace_id`.

Standard attributes have columns (they are looked up and filtered often); every other attribute a
client sends lives in `attributes` (JSON) under its own name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Boolean, ForeignKeyConstraint, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime

# Attribute names with a column of their own (the rest go to `attributes`).
STANDARD_ATTRIBUTES = (
    "email",
    "mobile",
    "first_name",
    "last_name",
    "gaid",
    "push_id",
    "timezone",
    "email_opt_out",
    "push_opt_out",
    "sms_opt_out",
)


class User(Base):
    __tablename__ = "audience_users"
    __table_args__ = (
        Index("ix_audience_users_workspace_id_email", "workspace_id", "email"),
        Index("ix_audience_users_workspace_id_mobile", "workspace_id", "mobile"),
        Index("ix_audience_users_workspace_id_gaid", "workspace_id", "gaid"),
        Index("ix_audience_users_workspace_id_push_id", "workspace_id", "push_id"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    email: Mapped[str | None] = mapped_column(String(320), nullable=True)
    mobile: Mapped[str | None] = mapped_column(String(32), nullable=True)
    first_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    last_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    gaid: Mapped[str | None] = mapped_column(String(64), nullable=True)
    push_id: Mapped[str | None] = mapped_column(String(500), nullable=True)
    timezone: Mapped[str | None] = mapped_column(String(64), nullable=True)
    email_opt_out: Mapped[bool] = mapped_column(Boolean, default=False)
    push_opt_out: Mapped[bool] = mapped_column(Boolean, default=False)
    sms_opt_out: Mapped[bool] = mapped_column(Boolean, default=False)
    # The platforms the user has a `PushToken` for, as `PLATFORM_BITS` (0: none): kept with the
    # tokens by `store.sync_push_tokens`, so an audience's push reachability is a test on the row it
    # reads anyway instead of a probe of the token table per user.
    push_platforms: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Custom attributes: strings, numbers, booleans, ISO-8601 UTC datetimes (as strings), arrays.
    attributes: Mapped[dict[str, Any]] = mapped_column(PortableJSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class UserValues(Protocol):
    """What reading a user's values needs (personalization, recipients, delivery controls): the
    `User` entity has it, and so does a plain row of its columns (the delivery engine reads the
    users of a claimed batch as rows, without the ORM's per-entity bookkeeping)."""

    @property
    def customer_id(self) -> str: ...
    @property
    def email(self) -> str | None: ...
    @property
    def mobile(self) -> str | None: ...
    @property
    def first_name(self) -> str | None: ...
    @property
    def last_name(self) -> str | None: ...
    @property
    def gaid(self) -> str | None: ...
    @property
    def push_id(self) -> str | None: ...
    @property
    def timezone(self) -> str | None: ...
    @property
    def email_opt_out(self) -> bool: ...
    @property
    def push_opt_out(self) -> bool: ...
    @property
    def sms_opt_out(self) -> bool: ...
    @property
    def attributes(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class UserRow:
    """A user's values read as a plain row (`UserValues`) of `USER_COLUMNS`: users loaded as ORM
    entities cost most of a delivery batch's claim, and much of a test send's read. Built per user,
    so not frozen (a frozen dataclass's __init__ costs about five times as much)."""

    customer_id: str
    email: str | None
    mobile: str | None
    first_name: str | None
    last_name: str | None
    gaid: str | None
    push_id: str | None
    timezone: str | None
    email_opt_out: bool
    push_opt_out: bool
    sms_opt_out: bool
    attributes: dict[str, Any]


USER_COLUMNS = [getattr(User, name) for name in UserRow.__slots__]


# A bit per push platform (`User.push_platforms`); the platforms a token can be stored for.
PLATFORM_BITS = {"ANDROID": 1, "IOS": 2, "WEB": 4}


def platform_mask(platforms: Sequence[str]) -> int:
    """The bits of `platforms` (every platform when empty; an unknown name adds none)."""
    if not platforms:
        return sum(PLATFORM_BITS.values())
    return sum(bit for name, bit in PLATFORM_BITS.items() if name in platforms)


class PushToken(Base):
    """A user's push token on one platform: a user with the app on Android and iOS has two, and a
    Push campaign sends one message per platform it has a token for.

    Written from the customer attributes: `push_id` with `platform` (ANDROID, IOS, WEB; sent in the
    same object or stored before) is the token of that platform. `push_id` alone stays what it was
    (the user's `push_id`): a user with no per-platform token is sent the first platform of a campaign
    on it, as before tokens were per platform.
    """

    __tablename__ = "audience_push_tokens"
    __table_args__ = (
        # A user is found by any of its tokens (C8/C9 `PUSH_ID`, `store.push_token_holders`).
        Index("ix_audience_push_tokens_workspace_id_token", "workspace_id", "token"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    platform: Mapped[str] = mapped_column(String(16), primary_key=True)
    token: Mapped[str] = mapped_column(String(500))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Event(Base):
    __tablename__ = "audience_events"
    __table_args__ = (
        # Segmentation counts a user's actions of one name in a time range.
        Index(
            "ix_audience_events_workspace_id_action_customer_id_at",
            "workspace_id",
            "action",
            "customer_id",
            "occurred_at",
        ),
        Index("ix_audience_events_workspace_id_customer_id_at", "workspace_id", "customer_id", "occurred_at"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(200))
    attributes: Mapped[dict[str, Any]] = mapped_column(PortableJSON, default=dict)
    platform: Mapped[str | None] = mapped_column(String(32), nullable=True)
    app_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Segment(Base):
    """A custom segment: a FilterGroup (`kind` "filter") or a static list of customer ids ("static")."""

    __tablename__ = "audience_segments"
    __table_args__ = (
        Index("uq_audience_segments_workspace_id_name", "workspace_id", "name", unique=True),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    filters: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SegmentMember(Base):
    __tablename__ = "audience_segment_members"
    __table_args__ = (
        ForeignKeyConstraint(
            ["workspace_id", "segment_id"], ["audience_segments.workspace_id", "audience_segments.id"]
        ),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    segment_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    customer_id: Mapped[str] = mapped_column(String(200), primary_key=True)
