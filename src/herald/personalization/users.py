"""Finding the user a preview is for, and the attribute values templates see for them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import store
from herald.audience.models import STANDARD_ATTRIBUTES, User, UserValues
from herald.personalization.schemas import IdentificationType

_COLUMNS = {
    IdentificationType.USER_ATTRIBUTE_UNIQUE_ID: User.customer_id,
    IdentificationType.EMAIL: User.email,
    IdentificationType.SVC_GAID: User.gaid,
}


async def find_user(
    session: AsyncSession, workspace_id: str, kind: IdentificationType, value: str
) -> User | None:
    """The workspace's user with this identifier; when several share an e-mail or device id, the
    first by customer id (so the answer is stable). Matching is exact, as stored; a `PUSH_ID` is
    any of the user's push tokens."""
    named: ColumnElement[bool]
    if kind is IdentificationType.PUSH_ID:  # any token of the user (`store.push_token_holders`)
        holders = store.push_token_holders(workspace_id, lambda token: token == value).subquery()
        named = User.customer_id.in_(select(holders.c.customer_id))
    else:
        named = _COLUMNS[kind] == value
    query = select(User).where(User.workspace_id == workspace_id, named).order_by(User.customer_id).limit(1)
    return (await session.scalars(query)).first()


def attribute_values(user: UserValues) -> dict[str, Any]:
    """Custom attributes, then the standard ones (which win on a name clash); absent values left out."""
    values: dict[str, Any] = {
        key: value for key, value in (user.attributes or {}).items() if value is not None
    }
    values["customer_id"] = user.customer_id
    for name in STANDARD_ATTRIBUTES:
        value = getattr(user, name)
        if value is not None:
            values[name] = value
    return values
