"""Tables of the workspace domain. Every primary key starts with `workspace_id`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

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


def feature_on(workspace: Workspace, flag: str) -> bool:
    return bool((workspace.features or {}).get(flag, DEFAULT_FEATURES.get(flag, False)))


class HasFeatures(Protocol):
    @property
    def features(self) -> Mapping[str, bool] | None: ...


def enabled_features(workspace: HasFeatures) -> frozenset[str]:
    flags: dict[str, Any] = {**DEFAULT_FEATURES, **(workspace.features or {})}
    return frozenset(name for name, on in flags.items() if on)


FEATURES = ("campaign_audience_limit", "queuing", "portfolio", "versioning", "campaign_meta")
DEFAULT_FEATURES: dict[str, bool] = {
    "campaign_audience_limit": False,
    "queuing": False,
    "portfolio": False,
    "versioning": False,
    "campaign_meta": True,
}
