"""event- and business-event-triggered delivery: firings per event, the trigger inbox

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ["workspace_id", "execution_id", "customer_id"]


def upgrade() -> None:
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("trigger", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("event", herald.db.PortableJSON, nullable=True))
    # A user fires an EVENT execution once per event: the event joins the primary key.
    with op.batch_alter_table("delivery_execution_users", schema=None, recreate="always") as batch_op:
        batch_op.add_column(sa.Column("firing", sa.String(length=24), server_default="", nullable=False))
        batch_op.add_column(sa.Column("event", herald.db.PortableJSON, nullable=True))
        batch_op.drop_constraint("pk_delivery_execution_users", type_="primary")
        batch_op.create_primary_key("pk_delivery_execution_users", [*KEY, "firing"])
    op.create_table(
        "delivery_trigger_inbox",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=24), nullable=False),
        sa.Column("customer_id", sa.String(length=200), nullable=False),
        sa.Column("campaigns", herald.db.PortableJSON, nullable=False),
        sa.Column("received_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_delivery_trigger_inbox_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint("workspace_id", "event_id", name=op.f("pk_delivery_trigger_inbox")),
    )
    with op.batch_alter_table("delivery_trigger_inbox", schema=None) as batch_op:
        batch_op.create_index(
            "ix_delivery_trigger_inbox_workspace_id_received_at",
            ["workspace_id", "received_at"],
            unique=False,
        )


def downgrade() -> None:
    op.drop_table("delivery_trigger_inbox")
    op.execute("DELETE FROM delivery_execution_users WHERE firing <> ''")
    with op.batch_alter_table("delivery_execution_users", schema=None, recreate="always") as batch_op:
        batch_op.drop_constraint("pk_delivery_execution_users", type_="primary")
        batch_op.create_primary_key("pk_delivery_execution_users", KEY)
        batch_op.drop_column("event")
        batch_op.drop_column("firing")
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.drop_column("event")
        batch_op.drop_column("trigger")
