"""An index of push tokens by their value: C8 and C9 find a user by `PUSH_ID` among its tokens

A user ingested once per device has a token per platform, and only the last one sent stays its
`push_id`: looking users up by `push_id` alone missed the others (404 for a token Herald delivers
to). The lookup now also reads `audience_push_tokens` by token, which this index serves.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_audience_push_tokens_workspace_id_token", "audience_push_tokens", ["workspace_id", "token"]
    )


def downgrade() -> None:
    op.drop_index("ix_audience_push_tokens_workspace_id_token", table_name="audience_push_tokens")
