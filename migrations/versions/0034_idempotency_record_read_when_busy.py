"""PostgreSQL: `herald_claim_idempotency_key` reads the key's record even when its lock is busy

The function read the key's record only when it took the key's lock. Repeats of a request that
had long completed take that lock from each other just to read its record, so under concurrent
repeats most of them found the lock busy and answered 409 DUPLICATE_IDEMPOTENCY_KEY ("still in
progress") instead of replaying the stored answer (or, with another body, 409
IDEMPOTENCY_CONFLICT). The record is now read either way, in a fresh snapshot after the lock was
tried: a caller that did not get the lock answers from a live record it finds, and only a key
with no live record is in flight. Declared `ROWS 1` as migration 0021 made it (a replaced
function takes the default of 1,000 otherwise).

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTION = """
CREATE OR REPLACE FUNCTION herald_claim_idempotency_key(
    lock_id bigint, claim_workspace_id text, claim_api_key_id text, claim_key text
)
RETURNS TABLE (
    held boolean, fingerprint text, state text, locked_until timestamptz, expires_at timestamptz,
    status_code integer, headers jsonb, body bytea
)
LANGUAGE plpgsql VOLATILE ROWS 1
AS $$
BEGIN
    held := pg_try_advisory_xact_lock(lock_id);
    {read}
    RETURN NEXT;
END
$$
"""
_READ = """SELECT r.fingerprint, r.state, r.locked_until, r.expires_at, r.status_code, r.headers, r.body
        INTO fingerprint, state, locked_until, expires_at, status_code, headers, body
        FROM idempotency_records AS r
        WHERE r.workspace_id = claim_workspace_id AND r.api_key_id = claim_api_key_id
            AND r.key = claim_key;"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION.replace("{read}", _READ))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION.replace("{read}", f"IF held THEN\n        {_READ}\n    END IF;"))
