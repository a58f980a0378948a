"""per-platform push tokens; executions count users unsubscribed from a category

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PLATFORMS = ("ANDROID", "IOS", "WEB")


def upgrade() -> None:
    op.create_table(
        "audience_push_tokens",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("customer_id", sa.String(length=200), nullable=False),
        sa.Column("platform", sa.String(length=16), nullable=False),
        sa.Column("token", sa.String(length=500), nullable=False),
        sa.Column("updated_at", herald.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_audience_push_tokens_workspace_id_workspaces")
        ),
        sa.PrimaryKeyConstraint(
            "workspace_id", "customer_id", "platform", name=op.f("pk_audience_push_tokens")
        ),
    )
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("unsubscribed", sa.BigInteger(), server_default="0", nullable=False))
    # Existing users keep their token: a `push_id` with a `platform` attribute naming a platform is
    # that platform's token (what the engine sent to before tokens were per platform).
    dialect = op.get_bind().dialect.name
    platform = (
        "upper(attributes ->> 'platform')"
        if dialect == "postgresql"
        else "upper(json_extract(attributes, '$.platform'))"
    )
    listed = ", ".join(f"'{name}'" for name in PLATFORMS)
    op.execute(
        "INSERT INTO audience_push_tokens (workspace_id, customer_id, platform, token, updated_at) "
        f"SELECT workspace_id, customer_id, {platform}, push_id, updated_at FROM audience_users "
        f"WHERE push_id IS NOT NULL AND push_id <> '' AND {platform} IN ({listed})"
    )


def downgrade() -> None:
    with op.batch_alter_table("delivery_executions", schema=None) as batch_op:
        batch_op.drop_column("unsubscribed")
    op.drop_table("audience_push_tokens")
