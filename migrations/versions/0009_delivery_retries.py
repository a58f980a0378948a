"""delivery retries: attempts and the next attempt's time on the outbox, a user's retry time

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempts", sa.Integer(), server_default="1", nullable=False))
        batch_op.add_column(sa.Column("next_attempt_at", herald.db.UTCDateTime(timezone=True), nullable=True))
    with op.batch_alter_table("delivery_execution_users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("not_before", herald.db.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_execution_users", schema=None) as batch_op:
        batch_op.drop_column("not_before")
    with op.batch_alter_table("delivery_outbox", schema=None) as batch_op:
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("attempts")
