"""Tables of the workspace domain. Every primary key starts with `workspace_id`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime


class Workspace(Base):
    __tablename__ = "workspaces"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # Feature flags that are switched on, e.g. {"queuing": true}; unknown flags mean off.
    features: Mapped[dict[str, bool]] = mapped_column(PortableJSON, default=dict)
    # Rate-limit overrides by bucket name, e.g. {"offers_read": "1000/minute"}.
    rate_limits: Mapped[dict[str, str]] = mapped_column(PortableJSON, default=dict)
    # Delivery settings by CLI key, e.g. {"global-control": 5, "dnd": "22:00-08:00"}
    # (`workspaces.delivery_settings` parses them).
    delivery: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ApiKey(Base):
    __tablename__ = "api_keys"

    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), primary_key=True)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    scopes: Mapped[list[str]] = mapped_column(PortableJSON)
    # SHA-256 of the secret part; keys are 192-bit random, so a fast hash is enough.
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Tag(Base):
    __tablename__ = "tags"

    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class OfferTemplate(Base):
    __tablename__ = "offer_templates"

    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    label: Mapped[str] = mapped_column(String(200))
    template_type: Mapped[list[str]] = mapped_column(PortableJSON)
    # Names of the fields a `template` content block must fill (MISSING_TEMPLATE_FIELD otherwise).
    fields: Mapped[list[str]] = mapped_column(PortableJSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
