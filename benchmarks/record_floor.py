"""The database's floor under a delivered message on PostgreSQL: the rows the engine must write for
it, replayed as SQL alone (a PL/pgSQL loop on the server: no Python, no round trip between
statements), so that a design's figure can be set against what its writes cost before any code.

    python -m benchmarks.record_floor --database-url postgresql+asyncpg://... [--messages 100000]

On a fresh database of its own (`<name>_floor`, Herald's schema), for `--messages` messages of one
execution, in windows of 1,600 (the batched benchmark's: 16 lanes of 100 per POST) and of 64 (one
per POST: 16 lanes, 4 rounds), it times:
1. the audience's rows (an execution's users PENDING, as resolution writes them), once;
2. the outbox's records: each window's rows PENDING in one statement and committed, then SENT in
   one statement and committed (what "the outbox row is the record" asks of every message);
3. the users' states: each window's users CLAIMED, then SENT (what the engine writes besides);
4. both together, as the engine does.
Each figure is the server's time per message (the loop runs on one backend: its wall time is the
server's CPU). The delivery benchmark's bare sender spends its whole CPU per message beside these
(printed by `benchmarks.delivery`), and Herald's worker runs beside the server on the same cores.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import asyncpg
from sqlalchemy.engine import make_url

from benchmarks.common import start_afresh, table
from herald.migrate import upgrade

WINDOWS = {"batched (1,600 a window)": 1600, "one per POST (64 a window)": 64}

_AUDIENCE = """
INSERT INTO delivery_execution_users (workspace_id, execution_id, customer_id, rank, state, firing)
SELECT 'ws_floor', 'exec_floor', 'user-' || lpad(g::text, 8, '0'),
       ('x' || substr(md5(g::text), 1, 15))::bit(60)::bigint, 'PENDING', ''
FROM generate_series(1, $1) g
"""

# One window after another: `outbox` writes the outbox's records, `users` the users' states.
_WINDOWS = """
CREATE PROCEDURE floor_windows(messages int, per int, outbox bool, users bool) LANGUAGE plpgsql AS $$
DECLARE ids text[]; customers text[];
BEGIN
  FOR w IN 0..(messages / per - 1) LOOP
    SELECT array_agg(substr(md5('m' || g), 1, 24)), array_agg('user-' || lpad(g::text, 8, '0'))
      INTO ids, customers FROM generate_series(w * per + 1, w * per + per) g;
    IF users THEN
      UPDATE delivery_execution_users SET state = 'CLAIMED', claimed_at = now()
       WHERE workspace_id = 'ws_floor' AND execution_id = 'exec_floor' AND customer_id = ANY(customers);
      COMMIT;
    END IF;
    IF outbox THEN
      INSERT INTO delivery_outbox (workspace_id, id, status, is_test, channel, platform, locale,
          variation, connector_id, connector_name, recipient, customer_id, campaign_id, summary,
          created_at, updated_at, attempts)
      SELECT 'ws_floor', ids[i], 'PENDING', false, 'PUSH', 'ANDROID', 'default', 'variation_1',
          'connector_floor', 'sink', 'token-' || repeat(md5(ids[i]), 4), customers[i], 'campaign_floor',
          '{"title": "Hello", "message": "A message", "template_type": "BASIC"}'::jsonb,
          clock_timestamp(), clock_timestamp(), 1
      FROM generate_subscripts(ids, 1) i;
      COMMIT;
      UPDATE delivery_outbox SET status = 'SENT', updated_at = clock_timestamp()
       WHERE id = ANY(ids) AND workspace_id = 'ws_floor';
    END IF;
    IF users THEN
      UPDATE delivery_execution_users SET state = 'SENT'
       WHERE workspace_id = 'ws_floor' AND execution_id = 'exec_floor' AND customer_id = ANY(customers);
    END IF;
    COMMIT;
  END LOOP;
END $$
"""


async def _timed(connection: asyncpg.Connection, sql: str, *arguments: object) -> float:
    started = time.perf_counter()
    await connection.execute(sql, *arguments)
    return time.perf_counter() - started


# The outbox of a system that has sent before: as many rows of an earlier campaign. (Empty, its
# statistics said so, and the planner read a window's rows by scanning the table.)
_EARLIER = """
INSERT INTO delivery_outbox (workspace_id, id, status, is_test, channel, platform, locale, variation,
    recipient, customer_id, campaign_id, summary, created_at, updated_at, attempts)
SELECT 'ws_floor', substr(md5('earlier' || g), 1, 24), 'SENT', false, 'PUSH', 'ANDROID', 'default',
    'variation_1', 'token', 'user-' || lpad(g::text, 8, '0'), 'campaign_earlier', '{}'::jsonb, now(),
    now(), 1
FROM generate_series(1, $1) g
"""


async def _afresh(dsn: str, messages: int) -> tuple[asyncpg.Connection, float]:
    """A new session (no plan cached from an earlier figure) on emptied tables: the audience written
    again (its time), an earlier campaign's outbox, statistics taken (as the engine's are)."""
    connection = await asyncpg.connect(dsn)
    await connection.execute("TRUNCATE delivery_outbox, delivery_execution_users")
    took = await _timed(connection, _AUDIENCE, messages)
    await connection.execute(_EARLIER, messages)
    await connection.execute("VACUUM ANALYZE delivery_outbox, delivery_execution_users")
    return connection, took


async def main(database_url: str, messages: int) -> None:
    url = await start_afresh(database_url, "floor")
    await asyncio.to_thread(upgrade, url)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    setup = await asyncpg.connect(dsn)
    try:
        await setup.execute(_WINDOWS)
    finally:
        await setup.close()
    rows: list[tuple[str, str]] = []
    for label, per in WINDOWS.items():
        for part, outbox, users in (
            ("the outbox's records", True, False),
            ("the users' states", False, True),
            ("both", True, True),
        ):
            connection, audience = await _afresh(dsn, messages)
            try:
                call = "CALL floor_windows($1, $2, $3, $4)"
                took = await _timed(connection, call, messages, per, outbox, users)
            finally:
                await connection.close()
            rows.append((f"{label}: {part}", f"{took / messages * 1e6:.1f} µs"))
    rows.insert(0, ("the audience's rows (resolution)", f"{audience / messages * 1e6:.1f} µs"))
    print(table(f"PostgreSQL's time per message, {messages:,} messages", rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", required=True, help="a postgresql+asyncpg:// URL")
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    asyncio.run(main(args.database_url, args.messages))
