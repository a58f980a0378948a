"""delivery_connector_streaks: the requests on their way that each worker holds a place for

Shared failures alone bounded the failures before a pause by a threshold per worker: each worker
let its own requests go while its failures and its own requests on the way stayed under the
threshold, not knowing what the others had on the way (three workers: 40 to 60 failed against a
threshold of 20). While a connector is not known to answer well, a worker now first takes places
in the shared row for the requests it is about to make (`on_the_way`), given back in the
transaction that records their outcomes; a worker that dies holding places lets them lapse at
`on_the_way_until` (one lease after the last place taken).

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import herald.db

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("delivery_connector_streaks") as table:
        table.add_column(sa.Column("on_the_way", sa.BigInteger(), nullable=False, server_default="0"))
        table.add_column(sa.Column("on_the_way_until", herald.db.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("delivery_connector_streaks") as table:
        table.drop_column("on_the_way_until")
        table.drop_column("on_the_way")
