"""delivery controls: workspace delivery settings, throttle windows, outbox by user

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import herald.db

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "delivery",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )
    op.create_table(
        "delivery_throttle_windows",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("campaign_id", sa.String(length=24), nullable=False),
        sa.Column("minute", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_delivery_throttle_windows_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "campaign_id", "minute", name=op.f("pk_delivery_throttle_windows")
        ),
    )
    with op.batch_alter_table("delivery_outbox", schema=None) as batch_op:
        batch_op.create_index(
            "ix_delivery_outbox_workspace_id_customer_id_created_at",
            ["workspace_id", "customer_id", "created_at"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("delivery_outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_delivery_outbox_workspace_id_customer_id_created_at")
    op.drop_table("delivery_throttle_windows")
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.drop_column("delivery")
