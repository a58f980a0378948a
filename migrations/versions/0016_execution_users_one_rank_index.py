"""execution users keep one rank index, (execution, state, rank): claims walk it from the first
claimable user whatever the planner's statistics say, and each materialised user writes one index
entry less

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_execution_users", schema=None) as batch_op:
        batch_op.drop_index("ix_delivery_execution_users_ws_execution_rank")


def downgrade() -> None:
    with op.batch_alter_table("delivery_execution_users", schema=None) as batch_op:
        batch_op.create_index(
            "ix_delivery_execution_users_ws_execution_rank",
            ["workspace_id", "execution_id", "rank"],
            unique=False,
        )
