"""users carry the platforms they have a push token for (`push_platforms`), so an audience's push
reachability is read from the user's row instead of probing the token table per user

Revision ID: 0020
Revises: 0018
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `audience.models.PLATFORM_BITS` as of this revision.
PLATFORM_BITS = {"ANDROID": 1, "IOS": 2, "WEB": 4}


def upgrade() -> None:
    with op.batch_alter_table("audience_users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("push_platforms", sa.Integer(), server_default="0", nullable=False))
    bits = " ".join(f"WHEN '{name}' THEN {bit}" for name, bit in PLATFORM_BITS.items())
    op.execute(
        "UPDATE audience_users SET push_platforms = ("
        f"SELECT COALESCE(SUM(CASE t.platform {bits} ELSE 0 END), 0) FROM audience_push_tokens t "
        "WHERE t.workspace_id = audience_users.workspace_id AND t.customer_id = audience_users.customer_id"
        ") WHERE EXISTS (SELECT 1 FROM audience_push_tokens t "
        "WHERE t.workspace_id = audience_users.workspace_id AND t.customer_id = audience_users.customer_id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("audience_users", schema=None) as batch_op:
        batch_op.drop_column("push_platforms")
