"""The next moment work falls due, found by index: deferred users, and scheduled campaigns

A worker slept its whole interval (`HERALD_WORKER_INTERVAL_SECONDS`) between ticks unless woken,
so a firing delayed by a minute, a user deferred to the end of quiet hours, a retry or a campaign
scheduled for 10:00 went out up to an interval late. Before it sleeps, a worker now reads the
earliest such moment still ahead and sleeps until then at most (`campaigns.worker.next_due`):
- the deferred users: PENDING or RETRY with `not_before` (few: a send that goes at once never
  enters this index);
- the SCHEDULED campaigns by `begins_at`, across workspaces (the index by workspace, status and
  `begins_at` serves one workspace at a time).

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFERRED_INDEX = "ix_delivery_execution_users_deferred_not_before"
_DEFERRED = "not_before IS NOT NULL AND state IN ('PENDING', 'RETRY')"
_STARTS_INDEX = "ix_campaigns_status_begins_at"


def upgrade() -> None:
    op.create_index(
        _DEFERRED_INDEX,
        "delivery_execution_users",
        ["not_before"],
        unique=False,
        sqlite_where=sa.text(_DEFERRED),
        postgresql_where=sa.text(_DEFERRED),
    )
    op.create_index(_STARTS_INDEX, "campaigns", ["status", "begins_at"], unique=False)


def downgrade() -> None:
    op.drop_index(_STARTS_INDEX, table_name="campaigns")
    op.drop_index(_DEFERRED_INDEX, table_name="delivery_execution_users")
