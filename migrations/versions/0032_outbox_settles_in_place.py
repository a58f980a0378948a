"""delivery_outbox: the waiting rows' index names `next_attempt_at` alone, so a SENT row stays in place

PostgreSQL writes an updated row beside the old one on its page, with no new entry in any index (a
"HOT" update), only when no column any index names changes: key columns and the columns of a
partial index's condition alike. Migration 0027's index of the rows waiting for a retry named
`status` in its condition, so every message settled SENT (or FAILED) was written anew in each of the
outbox's indexes: none of a 100,000-message send's updates was HOT, and that settle was half of the
server's time during the send. `next_attempt_at` is set only while a row waits for a retry (its
next attempt clears it, and a waiting row settled FAILED is cleared too), so the condition on it
alone holds the same rows. The statements that walk the index keep naming both conditions
(`models.WAITING_RETRY`), which imply this one on both engines.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ix_delivery_outbox_ws_campaign_waiting_retry"
_BEFORE = "status = 'PENDING' AND next_attempt_at IS NOT NULL"
_NOW = "next_attempt_at IS NOT NULL"


def _recreate(condition: str) -> None:
    op.drop_index(_NAME, table_name="delivery_outbox")
    op.create_index(
        _NAME,
        "delivery_outbox",
        ["workspace_id", "campaign_id"],
        unique=False,
        sqlite_where=sa.text(condition),
        postgresql_where=sa.text(condition),
    )


def upgrade() -> None:
    _recreate(_NOW)


def downgrade() -> None:
    _recreate(_BEFORE)
