"""PostgreSQL: `herald_claim_idempotency_key` is declared to return one row (it always does)

A set-returning function is estimated at 1,000 rows unless declared otherwise. The statements that
claim a key with their read (C3, L1, C5, C7: the read is a lateral subquery of the function's row)
were therefore costed a thousand times over: C7's page came to a cost of about 220,000, past
`jit_above_cost` (100,000), and every execution of its generic plan JIT-compiled 61 functions (22 ms
of a 40 ms statement for a page that runs in 0.5 ms). With `ROWS 1` the estimates are the real ones.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTION = "herald_claim_idempotency_key(bigint, text, text, text)"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER FUNCTION {_FUNCTION} ROWS 1")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER FUNCTION {_FUNCTION} ROWS 1000")
