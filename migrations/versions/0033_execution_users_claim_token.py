"""delivery_execution_users.claim_token: the claim that holds a CLAIMED user

A dispatch wrote its users' outcomes whatever had become of them, and knew its claim by the moment
it was made (`claimed_at`). A worker whose users were taken over while it still sent them (their
lease passed: a stalled worker, or a clock moved past it) then wrote them RETRY after the worker
that took them over had settled them SENT and ended the execution, which stayed DONE with users
waiting for ever; and with a clock held still, two claims made at one moment could not be told
apart. Each claim now writes a token of its own with its users, and a dispatch writes failures,
renews and releases only the users still CLAIMED under its token (a message delivered is SENT
whoever holds its user). Not indexed: the statements that name it find their users by key first.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("delivery_execution_users", sa.Column("claim_token", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_execution_users") as batch:
        batch.drop_column("claim_token")
