"""Reachability counts: Herald's compiled query vs the same count written by hand in SQL.

    python -m benchmarks.reachability --users 100000                       # SQLite (temp dir)
    python -m benchmarks.reachability --users 100000 --database-url postgresql+asyncpg://...

Builds (or reuses) a workspace of N users and 10 x N events, then for five representative
FilterGroups times `count_audience` (what reachability runs: loading the segments it names,
compiling, one SQL statement) against one hand-written SQL statement giving the same count, and
prints both times (best and median of `--repeat` runs, taken in turns after a warm-up) and the
ratio of the best times.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

from benchmarks.audience_data import BETA_SEGMENT, NOW, ensure_audience
from benchmarks.common import Figure, summary
from herald.audience.segmentation import count_audience
from herald.config import Settings
from herald.db import create_database
from herald.migrate import upgrade

CHANNEL = "EMAIL"
SINCE_30_DAYS = "2025-12-16T12:00:00Z"  # NOW - 30 days, as the stored text compares


def attr(data_type: str, name: str, operator: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {
        "filter_type": "user_attributes",
        "data_type": data_type,
        "name": name,
        "operator": operator,
        "value": value,
    } | extra


@dataclass(frozen=True)
class Scenario:
    name: str
    segmentation: dict[str, Any]
    # The hand-written count per engine; `:ws` is the workspace id. Both respect the same opt-out and
    # address rules as the audience (e-mail channel, reachable users only).
    sqlite: str
    postgresql: str


_REACHABLE = "u.email_opt_out = {false} AND u.email IS NOT NULL AND u.email <> ''"

SCENARIOS = [
    Scenario(
        "city in list (string, any case)",
        {
            "included_filters": {
                "filter_operator": "and",
                "filters": [attr("string", "city", "in", ["Pune", "Mumbai"])],
            }
        },
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws"
        " AND lower(json_extract(u.attributes, '$.city')) IN ('pune', 'mumbai') AND "
        + _REACHABLE.format(false=0),
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws"
        " AND lower(u.attributes ->> 'city') IN ('pune', 'mumbai') AND " + _REACHABLE.format(false="false"),
    ),
    Scenario(
        "seen in 30 days and ltv > 500 (datetime, double)",
        {
            "included_filters": {
                "filter_operator": "and",
                "filters": [
                    attr("datetime", "last_seen", "inTheLast", {"value": 30, "unit": "days"}),
                    attr("double", "ltv", "greaterThan", 500),
                ],
            }
        },
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws"
        f" AND json_extract(u.attributes, '$.last_seen') >= '{SINCE_30_DAYS}'"
        " AND json_extract(u.attributes, '$.ltv') > 500 AND " + _REACHABLE.format(false=0),
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws"
        f" AND (u.attributes ->> 'last_seen') >= '{SINCE_30_DAYS}'"
        " AND (u.attributes ->> 'ltv')::numeric > 500 AND " + _REACHABLE.format(false="false"),
    ),
    Scenario(
        "carted twice, never purchased (actions)",
        {
            "included_filters": {
                "filter_operator": "and",
                "filters": [
                    {
                        "filter_type": "actions",
                        "action_name": "Added To Cart",
                        "execution": {"type": "atleast", "count": 2},
                    },
                    {"filter_type": "actions", "action_name": "Purchased", "executed": False},
                ],
            }
        },
        *(
            "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws"
            " AND u.customer_id IN (SELECT customer_id FROM audience_events WHERE workspace_id = :ws"
            " AND action = 'Added To Cart' GROUP BY customer_id HAVING count(*) >= 2)"
            " AND NOT EXISTS (SELECT 1 FROM audience_events e WHERE e.workspace_id = :ws"
            " AND e.action = 'Purchased' AND e.customer_id = u.customer_id) AND "
            + _REACHABLE.format(false=false)
            for false in ("0", "false")
        ),
    ),
    Scenario(
        "purchased something over 300 (event attributes)",
        {
            "included_filters": {
                "filter_operator": "and",
                "filters": [
                    {
                        "filter_type": "actions",
                        "action_name": "Purchased",
                        "attributes": {
                            "filter_operator": "and",
                            "filters": [attr("double", "price", "greaterThan", 300)],
                        },
                    }
                ],
            }
        },
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws AND EXISTS (SELECT 1 FROM audience_events e"
        " WHERE e.workspace_id = :ws AND e.action = 'Purchased' AND e.customer_id = u.customer_id"
        " AND json_extract(e.attributes, '$.price') > 300) AND " + _REACHABLE.format(false=0),
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws AND EXISTS (SELECT 1 FROM audience_events e"
        " WHERE e.workspace_id = :ws AND e.action = 'Purchased' AND e.customer_id = u.customer_id"
        " AND (e.attributes ->> 'price')::numeric > 300) AND " + _REACHABLE.format(false="false"),
    ),
    Scenario(
        "(vip tag or beta segment) minus free plan (array, segment, exclusion)",
        {
            "included_filters": {
                "filter_operator": "or",
                "filters": [
                    attr("string", "tags", "in", ["vip"], case_sensitive=True),
                    {"filter_type": "custom_segments", "name": "Beta testers", "id": BETA_SEGMENT},
                ],
            },
            "excluded_filters": {
                "filter_operator": "and",
                "filters": [attr("string", "plan", "is", "free", case_sensitive=True)],
            },
        },
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws AND (EXISTS (SELECT 1 FROM"
        " json_each(u.attributes, '$.tags') t WHERE t.value = 'vip') OR EXISTS (SELECT 1 FROM audience_segment_members m"
        f" WHERE m.workspace_id = :ws AND m.segment_id = '{BETA_SEGMENT}' AND m.customer_id = u.customer_id))"
        " AND json_extract(u.attributes, '$.plan') <> 'free' AND " + _REACHABLE.format(false=0),
        "SELECT count(*) FROM audience_users u WHERE u.workspace_id = :ws AND (u.attributes -> 'tags' ? 'vip'"
        " OR EXISTS (SELECT 1 FROM audience_segment_members m"
        f" WHERE m.workspace_id = :ws AND m.segment_id = '{BETA_SEGMENT}' AND m.customer_id = u.customer_id))"
        " AND (u.attributes ->> 'plan') <> 'free' AND " + _REACHABLE.format(false="false"),
    ),
]


async def _compare(
    herald: Callable[[], Awaitable[int]], hand: Callable[[], Awaitable[int]], repeat: int
) -> tuple[int, int, list[float], list[float]]:
    """Both counts and `repeat` timings of each (seconds), after a warm-up, taken in turns so that
    a busy machine slows both alike."""
    ours, theirs = await herald(), await hand()
    our_times: list[float] = []
    hand_times: list[float] = []
    for _ in range(repeat):
        for run, times in ((herald, our_times), (hand, hand_times)):
            started = time.perf_counter()
            await run()
            times.append(time.perf_counter() - started)
    return ours, theirs, our_times, hand_times


async def main(database_url: str, users: int, repeat: int) -> None:
    await asyncio.to_thread(upgrade, database_url)
    settings = Settings(database_url=database_url, redis_url=None)
    database = create_database(settings)
    try:
        workspace_id = await ensure_audience(database.engine, users)
        engine_name = database.engine.dialect.name
        print(
            f"\n{engine_name}, {users:,} users, {users * 10:,} events; best of {repeat} (median in brackets)\n"
        )
        header = f"{'FilterGroup':<68} {'count':>8} {'Herald ms':>16} {'hand SQL ms':>16} {'ratio':>6}"
        print(header)
        print("-" * len(header))
        ratios: list[float] = []
        for scenario in SCENARIOS:
            hand_sql = text(scenario.sqlite if engine_name == "sqlite" else scenario.postgresql)
            async with database.reader() as session:

                async def herald(session: Any = session, scenario: Scenario = scenario) -> int:
                    return await count_audience(
                        session, workspace_id, CHANNEL, scenario.segmentation, NOW, reachable_only=True
                    )

                async def hand(session: Any = session, hand_sql: Any = hand_sql) -> int:
                    return int((await session.execute(hand_sql, {"ws": workspace_id})).scalar_one())

                ours, theirs, our_times, hand_times = await _compare(herald, hand, repeat)
            same = "" if ours == theirs else f"  COUNTS DIFFER: hand SQL {theirs}"
            our_best, hand_best = min(our_times), min(hand_times)
            print(
                f"{scenario.name:<68} {ours:>8} {our_best * 1000:>7.1f} ({statistics.median(our_times) * 1000:>6.1f})"
                f" {hand_best * 1000:>7.1f} ({statistics.median(hand_times) * 1000:>6.1f})"
                f" {our_best / hand_best:>6.2f}{same}"
            )
            ratios.append(our_best / hand_best)
        summary("reachability", engine_name, [Figure("worst Herald / hand SQL", max(ratios), at_most=2)])
    finally:
        await database.dispose()


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_url = f"sqlite+aiosqlite:///{Path(tempfile.gettempdir()) / 'herald-bench.db'}"
    parser.add_argument("--database-url", default=default_url)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.database_url, args.users, args.repeat))


if __name__ == "__main__":
    cli()
