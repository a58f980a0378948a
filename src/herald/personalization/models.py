"""Workspace personalization resources: content blocks, product sets, content APIs, custom templates.

Every primary key starts with `workspace_id`. They are managed with `herald content ...`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKeyConstraint, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from herald.db import Base, PortableJSON, UTCDateTime


class ContentBlock(Base):
    """Reusable text or HTML, `{{ ContentBlock['name'] }}`; it may hold expressions itself."""

    __tablename__ = "personalization_content_blocks"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))  # "text" | "html"
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ProductSet(Base):
    """A named list of item objects, `{{ ProductSet['name'][0].title }}`."""

    __tablename__ = "personalization_product_sets"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    items: Mapped[list[dict[str, Any]]] = mapped_column(PortableJSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ContentApi(Base):
    """An HTTP GET endpoint whose JSON answer templates read, `{{ ContentApi['name'].field }}`."""

    __tablename__ = "personalization_content_apis"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    url: Mapped[str] = mapped_column(String(2000))
    method: Mapped[str] = mapped_column(String(8))
    headers: Mapped[dict[str, str]] = mapped_column(PortableJSON)
    timeout_seconds: Mapped[float] = mapped_column(Float)
    # Private, loopback and link-local targets are refused unless this is set.
    allow_private: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class CustomTemplate(Base):
    """A versioned message template named by `custom_template_id` in Push or Email content.

    `body` has the shape of the content object it completes: for EMAIL e.g. `{"html_content": ...,
    "subject"?: ...}`, for PUSH e.g. `{"basic_details": {"title": ..., "message": ...}}`. Creating a
    template with an existing id adds a version; content may pin one with `custom_template_version`.
    """

    __tablename__ = "personalization_custom_templates"
    __table_args__ = (ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),)

    workspace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(200))
    body: Mapped[dict[str, Any]] = mapped_column(PortableJSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
