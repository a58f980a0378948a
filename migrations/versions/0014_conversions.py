"""conversions: attribution windows of sent and held-out users, and the conversions found in them

Revision ID: 0014
Revises: 0011
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "delivery_attribution_windows",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("execution_id", sa.String(length=24), nullable=False),
        sa.Column("customer_id", sa.String(length=200), nullable=False),
        sa.Column("campaign_id", sa.String(length=24), nullable=False),
        sa.Column("variation", sa.String(length=64), nullable=True),
        sa.Column("held_out", sa.String(length=32), nullable=True),
        sa.Column("opened_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("closes_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_delivery_attribution_windows_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "execution_id", "customer_id", name=op.f("pk_delivery_attribution_windows")
        ),
    )
    op.create_index(
        "ix_delivery_attribution_windows_ws_customer_closes",
        "delivery_attribution_windows",
        ["workspace_id", "customer_id", "closes_at"],
        unique=False,
    )
    op.create_table(
        "delivery_conversions",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("execution_id", sa.String(length=24), nullable=False),
        sa.Column("customer_id", sa.String(length=200), nullable=False),
        sa.Column("goal", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(length=24), nullable=False),
        sa.Column("goal_name", sa.String(length=200), nullable=False),
        sa.Column("variation", sa.String(length=64), nullable=True),
        sa.Column("held_out", sa.String(length=32), nullable=True),
        sa.Column("event_id", sa.String(length=24), nullable=False),
        sa.Column("occurred_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revenue", sa.Double(), nullable=True),
        sa.Column("created_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_delivery_conversions_workspace_id_workspaces")
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "execution_id", "customer_id", "goal", name=op.f("pk_delivery_conversions")
        ),
    )


def downgrade() -> None:
    op.drop_table("delivery_conversions")
    op.drop_index(
        "ix_delivery_attribution_windows_ws_customer_closes", table_name="delivery_attribution_windows"
    )
    op.drop_table("delivery_attribution_windows")
