"""delivery_execution_users: the users waiting for a moment, by that moment

A worker slept its whole interval (`HERALD_WORKER_INTERVAL_SECONDS`) between ticks unless woken,
so a firing delayed by a minute, a user deferred to the end of quiet hours or a retry went out up
to an interval late. Before it sleeps, a worker now reads the earliest such moment still ahead and
sleeps until then at most (`campaigns.worker.next_due`). The index holds the users PENDING or RETRY
with `not_before` only: few, and a send that goes at once never enters it.

(The next SCHEDULED start is read through the campaigns' index by workspace, status and start, one
probe per workspace. A global index by status and start was tried and left out: PostgreSQL's
planner then chose it for a workspace's searches, reading every workspace's campaigns of a status.)

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


def upgrade() -> None:
    op.create_index(
        _DEFERRED_INDEX,
        "delivery_execution_users",
        ["not_before"],
        unique=False,
        sqlite_where=sa.text(_DEFERRED),
        postgresql_where=sa.text(_DEFERRED),
    )


def downgrade() -> None:
    op.drop_index(_DEFERRED_INDEX, table_name="delivery_execution_users")
