"""O4: the workspace's offer templates, paged like O1 (cursor, limit, total_count)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.offers import cursor as offers_cursor
from herald.workspaces.models import OfferTemplate


class TemplatesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cursor: str | None = Field(None, description="Value of pagination.next_cursor; omit on the first page.")
    limit: Annotated[int, Field(ge=1, le=100)] = 20

    @field_validator("cursor")
    @classmethod
    def _cursor(cls, value: str | None) -> str | None:
        if value is not None and offers_cursor.decode_template(value) is None:
            raise PydanticCustomError(
                "INVALID_CURSOR", "The cursor is malformed; use pagination.next_cursor."
            )
        return value

    @property
    def after_id(self) -> str | None:
        return offers_cursor.decode_template(self.cursor) if self.cursor else None


async def list_templates(
    session: AsyncSession, workspace_id: str, query: TemplatesQuery
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page in id order and the pagination block."""
    scope = OfferTemplate.workspace_id == workspace_id
    # Page and count in one statement, hence one snapshot (see offers.repository.list_page).
    count = select(func.count()).select_from(OfferTemplate).where(scope)
    page = select(
        OfferTemplate.id,
        OfferTemplate.label,
        OfferTemplate.template_type,
        count.scalar_subquery().label("total_count"),
    ).where(scope)
    if query.after_id is not None:
        page = page.where(OfferTemplate.id > query.after_id)
    rows = (await session.execute(page.order_by(OfferTemplate.id).limit(query.limit + 1))).all()
    total = rows[0].total_count if rows else await session.scalar(count)
    has_more = len(rows) > query.limit
    rows = rows[: query.limit]
    items = [
        {"id": row.id, "value": row.id, "label": row.label, "template_type": list(row.template_type or [])}
        for row in rows
    ]
    pagination = {
        "next_cursor": offers_cursor.encode(rows[-1].id, offers_cursor.TEMPLATES_PREFIX)
        if has_more
        else None,
        "limit": query.limit,
        "has_more": has_more,
        "total_count": int(total or 0),
    }
    return items, pagination
