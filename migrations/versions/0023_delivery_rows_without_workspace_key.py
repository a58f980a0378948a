"""delivery: the outbox and the execution users' rows without a foreign key to workspaces; on
PostgreSQL, outbox pages with room for a row's next version, and no statistics on columns that no
statement filters on

Every message writes an outbox row PENDING, then SENT, and moves its user's row from CLAIMED to
SENT. On PostgreSQL the foreign key's check is a query of its own for each row written (24 µs of
the 63 µs an outbox row cost, measured on a window of 200 rows); both tables are written only by
the engine and test sends, with a workspace read from a row that keeps the key, and a workspace
is never deleted. The outbox's pages are filled to 70 % so that the SENT version of a row fits
on the page of its PENDING one: the update then adds no entry to the table's three indexes (it
did for six updates in ten with full pages). Existing pages keep their layout until rewritten.
The worker ANALYZEs both tables as they grow (`herald.planner_statistics`); statistics of message
summaries, reasons, recipients and delivery ids (unique) steer no plan, and sorting them was more
than half of an ANALYZE of the outbox (0.4 s for 40,000 rows, 0.17 s without).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNFILTERED = {
    "delivery_outbox": ("summary", "failure_reason", "recipient", "id"),
    "delivery_execution_users": ("event", "reason"),
}
_KEYS = {
    "delivery_outbox": "fk_delivery_outbox_workspace_id_workspaces",
    "delivery_execution_users": "fk_delivery_execution_users_workspace_id_workspaces",
}


def upgrade() -> None:
    for table, key in _KEYS.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(key, type_="foreignkey")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE delivery_outbox SET (fillfactor = 70)")
        _set_statistics(0)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE delivery_outbox RESET (fillfactor)")
        _set_statistics(-1)  # the server's default target
    for table, key in _KEYS.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_foreign_key(key, "workspaces", ["workspace_id"], ["id"])


def _set_statistics(target: int) -> None:
    for table, columns in _UNFILTERED.items():
        changes = ", ".join(f"ALTER COLUMN {column} SET STATISTICS {target}" for column in columns)
        op.execute(f"ALTER TABLE {table} {changes}")
