"""campaigns: the search page's index, (workspace_id, status, created_at, id) and then the visibility
columns (is_latest, parent_id, flow_id), in place of (workspace_id, status, created_at); the
children's index (workspace_id, parent_id) gains is_latest

Search and meta read one page of campaigns newest first among a set of statuses (by default every
state but DRAFT and ARCHIVED). Walking (workspace_id, created_at, id) and skipping rows of other
statuses costs a read of every skipped row: a workspace of a few thousand drafts answered an empty
page by reading all of them. Per status this index is already in page order (the `id` breaks ties
of `created_at`), so a page is a merge of one ordered walk per status, and the trailing columns let
a walk skip older versions, periodic children and flow nodes without reading the row. Its prefix
serves everything the index it replaces did (the worker's lookups by status).

Meta counts each row's latest children. With the new index holding parent_id and is_latest, SQLite
(no statistics) preferred it, as covering, to (workspace_id, parent_id), and scanned the workspace
once per row of the page; with is_latest the children's index covers the count and is chosen.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_index("ix_campaigns_workspace_id_status_created_at")
        batch_op.create_index(
            "ix_campaigns_workspace_id_status_created_at_id",
            ["workspace_id", "status", "created_at", "id", "is_latest", "parent_id", "flow_id"],
            unique=False,
        )
        batch_op.drop_index("ix_campaigns_workspace_id_parent_id")
        batch_op.create_index(
            "ix_campaigns_workspace_id_parent_id_is_latest",
            ["workspace_id", "parent_id", "is_latest"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_index("ix_campaigns_workspace_id_parent_id_is_latest")
        batch_op.create_index(
            "ix_campaigns_workspace_id_parent_id", ["workspace_id", "parent_id"], unique=False
        )
        batch_op.drop_index("ix_campaigns_workspace_id_status_created_at_id")
        batch_op.create_index(
            "ix_campaigns_workspace_id_status_created_at",
            ["workspace_id", "status", "created_at"],
            unique=False,
        )
