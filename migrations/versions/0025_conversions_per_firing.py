"""conversions: an attribution window per message of an EVENT execution, and its conversions

An event-triggered campaign runs one long-lived execution, each event a firing of its own. Its
windows were keyed by (execution, user) and written once: a user's later messages opened none, so
the goals reached after them went uncounted, and a user could convert once per goal over the
campaign's whole life. The firing joins both keys ('' for every other execution, whose windows and
conversions are unchanged).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEYS = {
    "delivery_attribution_windows": ["workspace_id", "execution_id", "customer_id"],
    "delivery_conversions": ["workspace_id", "execution_id", "customer_id", "goal"],
}


def upgrade() -> None:
    for table, key in _KEYS.items():
        with op.batch_alter_table(table, schema=None, recreate="always") as batch_op:
            batch_op.add_column(sa.Column("firing", sa.String(length=24), server_default="", nullable=False))
            batch_op.drop_constraint(f"pk_{table}", type_="primary")
            batch_op.create_primary_key(f"pk_{table}", [*key[:3], "firing", *key[3:]])


def downgrade() -> None:
    # The old keys hold one window per (execution, user): an EVENT execution's are dropped.
    for table, key in _KEYS.items():
        op.execute(f"DELETE FROM {table} WHERE firing <> ''")
        with op.batch_alter_table(table, schema=None, recreate="always") as batch_op:
            batch_op.drop_constraint(f"pk_{table}", type_="primary")
            batch_op.create_primary_key(f"pk_{table}", key)
            batch_op.drop_column("firing")
