"""Every row a workspace owns, in every table: to show that a request changed none of them."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

import herald.models  # noqa: F401  (every table in the metadata)
from herald.db import Base


async def workspace_rows(app: FastAPI, workspace_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Table name -> the workspace's rows in it, in a stable order (the workspace's own row too)."""
    async with app.state.herald.database.reader() as session:
        return await rows_in(session, workspace_id)


async def rows_in(session: AsyncSession, workspace_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """`workspace_rows` through a session of one's own (CLI tests have no app)."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for table in Base.metadata.sorted_tables:
        owner = table.c.workspace_id if "workspace_id" in table.c else table.c.id
        found = await session.execute(select(table).where(owner == workspace_id))
        rows[table.name] = sorted((tuple(row) for row in found.all()), key=repr)
    return rows
