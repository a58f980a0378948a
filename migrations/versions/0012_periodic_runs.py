"""periodic runs and per-user send times: executions know their occurrence and child campaign, the
resume point of a periodic campaign, each user's best time to send

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scheduled_for", herald.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("child_campaign_id", sa.String(length=24), nullable=True))
    op.create_table(
        "delivery_periodic_resumes",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("campaign_id", sa.String(length=24), nullable=False),
        sa.Column("resumed_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_delivery_periodic_resumes_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint("workspace_id", "campaign_id", name=op.f("pk_delivery_periodic_resumes")),
    )
    op.create_table(
        "delivery_best_times",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("customer_id", sa.String(length=200), nullable=False),
        sa.Column("hour", sa.Integer(), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("computed_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_delivery_best_times_workspace_id_workspaces")
        ),
        sa.PrimaryKeyConstraint("workspace_id", "customer_id", name=op.f("pk_delivery_best_times")),
    )


def downgrade() -> None:
    op.drop_table("delivery_best_times")
    op.drop_table("delivery_periodic_resumes")
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.drop_column("child_campaign_id")
        batch_op.drop_column("scheduled_for")
