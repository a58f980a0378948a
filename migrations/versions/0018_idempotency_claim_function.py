"""PostgreSQL: `herald_claim_idempotency_key`, an Idempotency-Key's claim in one round trip

A request that carries an Idempotency-Key claims it at the start of its transaction: it takes the
key's advisory lock without waiting (a duplicate in flight answers 409), then reads the key's
record (a completed one is replayed). Two statements were two round trips on every idempotent
write. In one plain statement the record would be read in the snapshot the statement began with,
before the lock was taken, and could miss the record of a duplicate that committed in between. A
VOLATILE function runs each of its statements in a fresh snapshot: its read sees what committed
before it took the lock, as the second statement did. SQLite needs none of this (one writer at a
time), so the function exists only on PostgreSQL.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `held`: whether this transaction now holds the key's lock; the record's columns are NULL when
# the lock was not taken or the key has no record.
_CREATE = """
CREATE FUNCTION herald_claim_idempotency_key(
    lock_id bigint, claim_workspace_id text, claim_api_key_id text, claim_key text
)
RETURNS TABLE (
    held boolean, fingerprint text, state text, locked_until timestamptz, expires_at timestamptz,
    status_code integer, headers jsonb, body bytea
)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    held := pg_try_advisory_xact_lock(lock_id);
    IF held THEN
        SELECT r.fingerprint, r.state, r.locked_until, r.expires_at, r.status_code, r.headers, r.body
        INTO fingerprint, state, locked_until, expires_at, status_code, headers, body
        FROM idempotency_records AS r
        WHERE r.workspace_id = claim_workspace_id AND r.api_key_id = claim_api_key_id
            AND r.key = claim_key;
    END IF;
    RETURN NEXT;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION herald_claim_idempotency_key(bigint, text, text, text)")
