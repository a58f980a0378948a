"""delivery_throttle_grants: the throttle counts the sends of the last 60 seconds

`campaign_throttle_rpm` was a budget per clock minute (`delivery_throttle_windows`, a row per
campaign and minute): a campaign published at 10:00:40 sent its rpm then and again at 10:01:00.
It is now a sliding window: each grant is a row, and the grants of the last 60 seconds are the
budget's use. The old rows are only the current minute's use: they are dropped (at the upgrade a
throttled campaign may send one more budget at most).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "delivery_throttle_grants",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("campaign_id", sa.String(length=24), nullable=False),
        sa.Column("granted_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("sends", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_delivery_throttle_grants_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "campaign_id", "granted_at", name=op.f("pk_delivery_throttle_grants")
        ),
    )
    op.drop_table("delivery_throttle_windows")


def downgrade() -> None:
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
    op.drop_table("delivery_throttle_grants")
