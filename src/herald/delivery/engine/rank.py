"""The per-user hash that orders an execution's users and decides its hold-outs (stdlib only).

Its own module because every SQLite connection registers it as `herald_rank` when it opens
(`herald.db.register_sqlite_functions`): a command that opens a connection imports this, not the
rest of the engine's choices (`split`).
"""

from __future__ import annotations

import hashlib

RANK_BITS = 62  # fits a signed BIGINT on every engine
RANK = "rank"
GLOBAL_CONTROL = "global-control"
# The global control group is "hash below p" in steps of 0.01 %: a stable share of the workspace's
# users, the same for every campaign (no audience to cut exactly).
GLOBAL_CONTROL_BUCKETS = 10_000


def rank_of(campaign_id: str, customer_id: str, purpose: str = RANK) -> int:
    """The hash that orders an execution's users and decides its hold-outs. The database computes
    the same value while it materialises an audience (`ranking.rank_sql`)."""
    digest = hashlib.sha256(f"{purpose}\x00{campaign_id}\x00{customer_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - RANK_BITS)
