"""executions record when their audience is completely materialised (resolution streams in chunks
while the first users are already being sent)

Revision ID: 0015
Revises: 0011
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resolved_at", herald.db.UTCDateTime(timezone=True), nullable=True))
    # Before this revision an execution left RESOLVING only once its whole audience was written.
    op.execute("UPDATE delivery_executions SET resolved_at = updated_at WHERE status <> 'RESOLVING'")


def downgrade() -> None:
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.drop_column("resolved_at")
