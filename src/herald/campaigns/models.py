"""Campaign tables: one row per version document, components as JSON, searchable columns indexed.

`campaign_id` is stable across versions (it equals the first version's `id`); `is_latest` marks the
version that C2/C3/C4/C5 act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKeyConstraint, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime


class Campaign(Base):
    __tablename__ = "campaigns"
    __table_args__ = (
        Index(
            "uq_campaigns_workspace_id_campaign_id_version",
            "workspace_id",
            "campaign_id",
            "version_number",
            unique=True,
        ),
        Index(
            "uq_campaigns_workspace_id_campaign_id_latest",
            "workspace_id",
            "campaign_id",
            unique=True,
            sqlite_where=text("is_latest"),
            postgresql_where=text("is_latest"),
        ),
        Index("ix_campaigns_workspace_id_created_at_id", "workspace_id", "created_at", "id"),
        # Search and meta pages (campaigns.pages): per status already in page order (`id`
        # breaks ties), then the visibility columns, so a walk skips hidden rows in the index alone.
        Index(
            "ix_campaigns_workspace_id_status_created_at_id",
            "workspace_id",
            "status",
            "created_at",
            "id",
            "is_latest",
            "parent_id",
            "flow_id",
        ),
        Index("ix_campaigns_workspace_id_channel_created_at", "workspace_id", "channel", "created_at"),
        # Children of a campaign (meta counts its latest ones), answered from the index alone.
        Index("ix_campaigns_workspace_id_parent_id_is_latest", "workspace_id", "parent_id", "is_latest"),
        # The scheduled-transitions worker looks campaigns up by status and due time.
        Index("ix_campaigns_workspace_id_status_begins_at", "workspace_id", "status", "begins_at"),
        Index("ix_campaigns_workspace_id_status_expiry_at", "workspace_id", "status", "expiry_at"),
        ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24))
    version_number: Mapped[int] = mapped_column(Integer, default=1)
    is_latest: Mapped[bool] = mapped_column(Boolean, default=True)
    # Bumped on every write; the ETag is derived from it.
    revision: Mapped[int] = mapped_column(Integer, default=1)
    # Every write bumps `revision` (even one that changes nothing else: each acknowledged write gets
    # an ETag of its own), and the ORM writes a row with `UPDATE ... WHERE revision = <as read>`, so
    # a write based on a stale read fails (StaleDataError) instead of silently undoing another.
    __mapper_args__ = {"version_id_col": revision, "version_id_generator": False}
    channel: Mapped[str] = mapped_column(String(16))
    delivery_type: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    # The state a PAUSED campaign resumes to.
    paused_from: Mapped[str | None] = mapped_column(String(16), nullable=True)
    name: Mapped[str | None] = mapped_column(String(500), nullable=True)
    tags: Mapped[list[str]] = mapped_column(PortableJSON, default=list)
    created_by: Mapped[str] = mapped_column(String(320))
    updated_by: Mapped[str | None] = mapped_column(String(320), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    sent_time: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    flow_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    flow_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    parent_id: Mapped[str | None] = mapped_column(String(24), nullable=True)
    sender_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    rejection_comment: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    # Every component as stored (basic_details, campaign_content, connector, ...).
    components: Mapped[dict[str, Any]] = mapped_column(PortableJSON, default=dict)
    # `scheduling_details.start_time` / `expiry_time` as instants, kept in step with `components`
    # on every write so that time-driven transitions and meta can use them in SQL.
    start_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    expiry_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # When sending begins (`lifecycle.begins_at`): `start_at`, but earlier for a campaign sent in
    # each user's timezone. The worker moves a SCHEDULED campaign on at it.
    begins_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # When it was published (None: before Herald recorded it): a user whose moment came before is
    # passed in a campaign sent in each user's timezone (`delivery.engine.send_time`).
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


@dataclass(frozen=True)
class StoredCampaign:
    """What a write of components (C3, L1) and the publish checks (C4) read of a campaign's row."""

    id: str
    revision: int
    channel: str
    delivery_type: str
    status: str
    components: dict[str, Any]
    tags: list[str]
    parent_id: str | None = None  # a periodic campaign's, for the child campaign of one of its runs

    @classmethod
    def of(cls, row: Campaign) -> StoredCampaign:
        return cls(
            row.id,
            row.revision,
            row.channel,
            row.delivery_type,
            row.status,
            row.components,
            row.tags,
            row.parent_id,
        )


class CampaignTag(Base):
    """Tags of each version row, so search can filter by tag in SQL on every engine."""

    __tablename__ = "campaign_tags"
    __table_args__ = (
        ForeignKeyConstraint(["workspace_id", "campaign_row_id"], ["campaigns.workspace_id", "campaigns.id"]),
    )

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tag: Mapped[str] = mapped_column(String(200), primary_key=True)
    campaign_row_id: Mapped[str] = mapped_column(String(24), primary_key=True)


class CampaignRequestId(Base):
    """A C1 `request_id` held after a successful create; the primary key makes reuse impossible."""

    __tablename__ = "campaign_request_ids"

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class CampaignReachability(Base):
    """The daily reachability estimate of a campaign (meta), shared by all its versions."""

    __tablename__ = "campaign_reachability"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign_id: Mapped[str] = mapped_column(String(24), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime)
