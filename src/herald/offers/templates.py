"""O4: the workspace's offer templates, paged like O1 (cursor, limit, total_count)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import Integer, Select, bindparam, func, select

from herald.direct_reads import DirectReads, rows_in
from herald.http.query_model import QUERY_INTEGER
from herald.offers import cursor as offers_cursor
from herald.workspaces.models import OfferTemplate


class TemplatesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cursor: str | None = Field(None, description="Value of pagination.next_cursor; omit on the first page.")
    limit: Annotated[int, Field(ge=1, le=100), QUERY_INTEGER] = 20

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


# Built once (O4 runs one of them per request): building and keying a statement cost more than
# running it on a small page. Page and count in one statement, hence one snapshot (see
# `offers.repository.list_page`).
_SCOPE = OfferTemplate.workspace_id == bindparam("workspace_id")
_COUNT = select(func.count()).select_from(OfferTemplate).where(_SCOPE)


def _page(after: bool) -> Select[Any]:
    page = select(
        OfferTemplate.id,
        OfferTemplate.label,
        OfferTemplate.template_type,
        _COUNT.scalar_subquery().label("total_count"),
    ).where(_SCOPE)
    if after:
        page = page.where(OfferTemplate.id > bindparam("after_id"))
    return page.order_by(OfferTemplate.id).limit(bindparam("page_size", type_=Integer()))


_FIRST_PAGE, _NEXT_PAGE = _page(after=False), _page(after=True)


async def list_templates(
    reads: DirectReads, workspace_id: str, query: TemplatesQuery
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page in id order and the pagination block, read on the driver (`rows_in` on
    `DirectReads`: no session, no transaction)."""
    after_id = query.after_id
    values = {"workspace_id": workspace_id, "page_size": query.limit + 1, "after_id": after_id}
    rows = await rows_in(reads, _FIRST_PAGE if after_id is None else _NEXT_PAGE, values)
    total = rows[0].total_count if rows else (await rows_in(reads, _COUNT, values))[0][0]
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
