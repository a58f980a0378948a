"""Offer tables. Keyset pagination walks the primary key (workspace_id, id) backwards."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKeyConstraint, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime

# Stored lifecycle; `scheduled`/`active`/`expired` are derived from the schedule at request time.
STORED_DRAFT, STORED_ARCHIVED, STORED_PUBLISHED = "draft", "archived", "published"


class Offer(Base):
    __tablename__ = "offers"
    __table_args__ = (
        # Names are unique among the workspace's offers that are not archived.
        Index(
            "uq_offers_workspace_id_name_live",
            "workspace_id",
            "name",
            unique=True,
            sqlite_where=text("stored_status != 'archived'"),
            postgresql_where=text("stored_status != 'archived'"),
        ),
        Index("ix_offers_workspace_id_created_by_id", "workspace_id", "created_by", "id"),
        Index("ix_offers_workspace_id_created_at", "workspace_id", "created_at"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    stored_status: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int | None] = mapped_column(Integer, nullable=True)
    start_datetime: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    expiry_datetime: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # Raw tag ids, in request order, for output; `offer_tags` serves the ALL-of filter.
    tags: Mapped[list[str]] = mapped_column(PortableJSON, default=list)
    # The rest of the offering as sent (description, delivery, segment_info, offer_content, ...).
    document: Mapped[dict[str, Any]] = mapped_column(PortableJSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[str] = mapped_column(String(320))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_by: Mapped[str | None] = mapped_column(String(320), nullable=True)


class OfferTag(Base):
    __tablename__ = "offer_tags"
    __table_args__ = (
        ForeignKeyConstraint(["workspace_id", "offer_id"], ["offers.workspace_id", "offers.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tag_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    offer_id: Mapped[str] = mapped_column(String(24), primary_key=True)


@dataclass(frozen=True)
class StoredOffer:
    """An offer's row as a write reads it (O3, O5): plain values, no ORM instance to track."""

    workspace_id: str
    id: str
    name: str
    stored_status: str
    priority: int | None
    start_datetime: datetime | None
    expiry_datetime: datetime | None
    tags: list[str]
    document: dict[str, Any]
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str | None
