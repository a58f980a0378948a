"""delivery_outbox: the primary key led by the delivery id, with statistics on it

A window's rows are written SENT by their delivery ids (`outbox._SETTLE_MANY`). Named beside
their workspace (`workspace_id = :w AND id = ANY(:ids)`), the rows could be reached through any of
the outbox's indexes, all led by the workspace; on PostgreSQL, statistics that did not yet count a
workspace's newest rows (its first campaign: the outbox grows by thousands of rows a second) priced
the workspace's rows at one, and the planner read all of them once per id of the window (0.5 to
2.9 s per window of 1,600 rows, growing with every window, until the next ANALYZE). Led by the
delivery id, the key serves the ids alone, which no other index can: the statement names no
workspace (a delivery id is derived from its execution's id, itself unique) and the planner's
choice rests on the table's size, which it reads from the file, and on the ids' statistics, kept
again here (migration 0023 had dropped them: with none, the planner takes an id for one row in
200).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    _key(["id", "workspace_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE delivery_outbox ALTER COLUMN id SET STATISTICS -1")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE delivery_outbox ALTER COLUMN id SET STATISTICS 0")
    _key(["workspace_id", "id"])


def _key(columns: list[str]) -> None:
    # On PostgreSQL an ALTER of the table in place, which keeps its fill factor; SQLite's table is
    # copied.
    with op.batch_alter_table("delivery_outbox", schema=None) as batch_op:
        batch_op.drop_constraint("pk_delivery_outbox", type_="primary")
        batch_op.create_primary_key("pk_delivery_outbox", columns)
