"""campaigns: begins_at (when sending begins) and published_at

A campaign sent in each user's timezone (SEND_IN_USER_TIMEZONE) began at its `start_time` in its
own timezone, so every user east of it was passed already: a campaign published a day ahead for
09:00 New York skipped its Tokyo and London users. It now begins at the first instant the start's
wall clock comes anywhere (UTC+14), `begins_at`, which the worker moves a SCHEDULED campaign on
at (`start_at` stays the start, as meta shows it); a user is passed when their moment came before
the campaign was published, `published_at`.

Rows written before keep their behaviour: `begins_at` is their `start_at`, and without
`published_at` a user is passed when their moment comes before the start, as then.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.add_column(sa.Column("begins_at", herald.db.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("published_at", herald.db.UTCDateTime(timezone=True), nullable=True))
    op.execute("UPDATE campaigns SET begins_at = start_at")
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_index("ix_campaigns_workspace_id_status_start_at")
        batch.create_index(
            "ix_campaigns_workspace_id_status_begins_at", ["workspace_id", "status", "begins_at"]
        )


def downgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_index("ix_campaigns_workspace_id_status_begins_at")
        batch.create_index(
            "ix_campaigns_workspace_id_status_start_at", ["workspace_id", "status", "start_at"]
        )
        batch.drop_column("published_at")
        batch.drop_column("begins_at")
