"""delivery_executions: whether its messages' delivery ids follow its send order

A message's delivery id keys its outbox row. Hashed whole, every id landed on a random page of
the outbox's key index, and each window's commit wrote a page per message (on SQLite, a 64-message
window's rows cost ~33 µs each to insert, ~18 µs with ids in order). An execution begun from now on
gives ids that rise with its users' rank, the order they are sent in (`engine.run.delivery_id`).
One begun before keeps the ids its messages were begun with: a user resumed after the upgrade (a
retry, a worker's users taken over) is sent under the id it had, so a receiver still drops the
repeat, and its outbox row is found.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_executions") as batch:
        batch.add_column(sa.Column("ordered_ids", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("delivery_executions") as batch:
        batch.drop_column("ordered_ids")
