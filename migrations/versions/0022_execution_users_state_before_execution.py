"""execution users: the rank index leads with (workspace, state, execution), so that on PostgreSQL
it never competes with the primary key for a row named by its key

The index was (workspace, execution, state, rank). A statement that names users by their key (the
state written after a send: `workspace, execution, customer[, firing]`) matches its first two
columns as well as the key's. Without fresh statistics (a new execution, a table that grew since
its last ANALYZE, or no autovacuum) PostgreSQL costed both at one row, sometimes took the rank
index, and then read every row of the execution for each user: at 1,000 events/s the trigger
worker's updates went from 0.2 ms to 2 ms within a minute, and the worker fell behind for good.
With state second, a key lookup matches only the workspace column of this index, and the key wins
by its cost whatever the statistics say. Claims (workspace, execution, state, ordered by rank) walk
it as before.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "ix_delivery_execution_users_ws_execution_state_rank"
_NEW = "ix_delivery_execution_users_ws_state_execution_rank"


def upgrade() -> None:
    with op.batch_alter_table("delivery_execution_users", schema=None) as batch_op:
        batch_op.drop_index(_OLD)
        batch_op.create_index(_NEW, ["workspace_id", "state", "execution_id", "rank"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("delivery_execution_users", schema=None) as batch_op:
        batch_op.drop_index(_NEW)
        batch_op.create_index(_OLD, ["workspace_id", "execution_id", "state", "rank"], unique=False)
