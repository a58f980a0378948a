"""delivery_connector_streaks: a connector's failed attempts in a row, counted by all workers

The error threshold (`HERALD_DELIVERY_ERROR_THRESHOLD`) was counted by each worker process for
itself: with three workers, two and a half to four times the threshold failed before a pause, and
a failing connector whose attempts were spread over the workers could never pause an execution.
Each worker now adds its windows' failures to one row per connector, and a success resets it.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "delivery_connector_streaks",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("connector_id", sa.String(length=24), nullable=False),
        sa.Column("failures", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("updated_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id", "connector_id"],
            ["delivery_connectors.workspace_id", "delivery_connectors.id"],
            name=op.f("fk_delivery_connector_streaks_workspace_id_delivery_connectors"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id", "connector_id", name=op.f("pk_delivery_connector_streaks")),
    )


def downgrade() -> None:
    op.drop_table("delivery_connector_streaks")
