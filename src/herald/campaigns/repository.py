"""Campaign queries, always scoped to one workspace."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.campaigns.models import Campaign, CampaignRequestId, CampaignTag


async def get_latest(
    session: AsyncSession, workspace_id: str, campaign_id: str, *, for_update: bool = False
) -> Campaign | None:
    """The latest version; `for_update` locks it until the transaction ends.

    Every read-modify-write of a campaign loads its row this way, so concurrent writers queue on the
    row and each reads what the one before it wrote (PostgreSQL: `SELECT ... FOR UPDATE`; SQLite
    writers begin with `BEGIN IMMEDIATE` and so already hold the database when they read).
    """
    query = select(Campaign).where(
        Campaign.workspace_id == workspace_id, Campaign.campaign_id == campaign_id, Campaign.is_latest
    )
    if for_update:
        query = query.with_for_update().execution_options(populate_existing=True)
    return (await session.scalars(query)).first()


async def get_version(session: AsyncSession, workspace_id: str, row_id: str) -> Campaign | None:
    """One version document by its own `id`."""
    query = select(Campaign).where(Campaign.workspace_id == workspace_id, Campaign.id == row_id)
    return (await session.scalars(query)).first()


async def get_numbered_version(
    session: AsyncSession, workspace_id: str, campaign_id: str, version_number: int
) -> Campaign | None:
    query = select(Campaign).where(
        Campaign.workspace_id == workspace_id,
        Campaign.campaign_id == campaign_id,
        Campaign.version_number == version_number,
    )
    return (await session.scalars(query)).first()


async def replace_tags(session: AsyncSession, row: Campaign, tags: Iterable[str]) -> None:
    await session.execute(
        delete(CampaignTag).where(
            CampaignTag.workspace_id == row.workspace_id, CampaignTag.campaign_row_id == row.id
        )
    )
    add_tags(session, row, tags)


def add_tags(session: AsyncSession, row: Campaign, tags: Iterable[str]) -> None:
    """The tag rows of a row that has none yet (a new campaign or version)."""
    session.add_all(
        CampaignTag(workspace_id=row.workspace_id, tag=tag, campaign_row_id=row.id)
        for tag in dict.fromkeys(tags)
    )


_HELD = select(CampaignRequestId.campaign_id, CampaignRequestId.expires_at).where(
    CampaignRequestId.workspace_id == bindparam("workspace_id"),
    CampaignRequestId.request_id == bindparam("request_id"),
)
_RELEASE = delete(CampaignRequestId).where(
    CampaignRequestId.workspace_id == bindparam("workspace_id"),
    CampaignRequestId.request_id == bindparam("request_id"),
)


async def held_request_id(
    session: AsyncSession, workspace_id: str, request_id: str, now: datetime
) -> str | None:
    """The campaign holding a create `request_id`, if the hold is live; an expired hold is removed.
    (Core statements on the session's connection: the ORM's identity lookup cost more than the
    whole insert of a campaign.)"""
    connection = await session.connection()
    key = {"workspace_id": workspace_id, "request_id": request_id}
    held = (await connection.execute(_HELD, key)).first()
    if held is None:
        return None
    if held.expires_at <= now:
        await connection.execute(_RELEASE, key)
        return None
    return str(held.campaign_id)


async def insert_new(
    session: AsyncSession, values: dict[str, Any], request_id_hold: dict[str, Any] | None
) -> None:
    """A new campaign row (first version), its tag rows and the hold on its create `request_id`, as
    Core inserts on the session's connection (no ORM instance: nothing reads the row back)."""
    connection = await session.connection()
    await connection.execute(insert(Campaign), values)
    if request_id_hold is not None:
        await connection.execute(insert(CampaignRequestId), request_id_hold)
    tags = dict.fromkeys(values.get("tags") or ())
    if tags:
        rows = [
            {"workspace_id": values["workspace_id"], "tag": tag, "campaign_row_id": values["id"]}
            for tag in tags
        ]
        await connection.execute(insert(CampaignTag), rows)
