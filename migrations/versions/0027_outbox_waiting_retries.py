"""delivery_outbox: the rows waiting for a retry, by campaign, as a partial index

When an execution ends (a STOP, the campaign's expiry, a periodic campaign paused), its outbox rows
waiting for a retry are settled FAILED (`engine.abandoned`). Found through the workspace's other
indexes, that statement read every outbox row of the workspace, inside the STOP's transaction. This
index holds only the rows waiting for a retry (PENDING with `next_attempt_at`: few, and only while
a connector fails), so the statement reads those of the campaign, whatever the outbox's size; the
rows of a send that goes well never enter it.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ix_delivery_outbox_ws_campaign_waiting_retry"
_WAITING_RETRY = "status = 'PENDING' AND next_attempt_at IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        _NAME,
        "delivery_outbox",
        ["workspace_id", "campaign_id"],
        unique=False,
        sqlite_where=sa.text(_WAITING_RETRY),
        postgresql_where=sa.text(_WAITING_RETRY),
    )


def downgrade() -> None:
    op.drop_index(_NAME, table_name="delivery_outbox")
