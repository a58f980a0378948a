"""The engine's per-user hash (`rank.rank_of`) as a SQL expression, so an audience is ranked and
its global control group decided by the database, inside the INSERT ... SELECT that materialises it.

Both engines compute exactly `rank_of`: the first 8 bytes of SHA-256 over
`purpose NUL key NUL customer_id`, shifted down to 62 bits. PostgreSQL hashes with its own
`sha256()` over bytea (NUL is a valid byte there, unlike in text); SQLite calls `herald_rank`, the
Python function `herald.db` registers on every connection (per row, but inside the statement: no row
crosses into the engine's Python). The property tests of `split` and the engine's tests compare the
two forms, so API, stats and the engine agree on every user.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Integer, LargeBinary, String, cast, func, literal
from sqlalchemy.dialects.postgresql import BIT
from sqlalchemy.sql.elements import ColumnElement

from herald.delivery.engine.rank import GLOBAL_CONTROL, GLOBAL_CONTROL_BUCKETS, RANK, RANK_BITS

_MASK = (1 << RANK_BITS) - 1


def rank_sql(
    dialect: str, key: str, customer_id: ColumnElement[Any], purpose: str = RANK
) -> ColumnElement[int]:
    """`rank_of(key, customer_id, purpose)` computed by the database for each row."""
    if dialect == "postgresql":
        prefix = literal(f"{purpose}\x00{key}\x00".encode(), LargeBinary)
        digest = func.sha256(prefix.op("||")(func.convert_to(customer_id, "UTF8")))
        first8 = func.substr(func.encode(digest, "hex"), 1, 16)
        signed = cast(cast(literal("x", String) + first8, BIT(64)), BigInteger)
        # `>>` on a signed bigint extends the sign; the mask keeps the 62 bits `rank_of` keeps.
        return signed.op(">>")(literal(64 - RANK_BITS, Integer)).op("&")(literal(_MASK, BigInteger))
    return func.herald_rank(literal(purpose, String), literal(key, String), customer_id, type_=BigInteger)


def in_global_control_sql(
    dialect: str, workspace_id: str, customer_id: ColumnElement[Any], percentage: float | None
) -> ColumnElement[bool] | None:
    """`split.in_global_control` as a condition (None: nobody is held out)."""
    if not percentage:
        return None
    bucket = rank_sql(dialect, workspace_id, customer_id, GLOBAL_CONTROL) % GLOBAL_CONTROL_BUCKETS
    return bucket < literal(float(percentage) * GLOBAL_CONTROL_BUCKETS / 100)
