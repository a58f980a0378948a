"""Time `herald audience import` (users, then events) on a fresh database, and print the rates.

    python -m benchmarks.import_audience --database-url sqlite+aiosqlite:////tmp/x.db [--users 100000 --events 1000000]
    python -m benchmarks.import_audience --database-url postgresql+asyncpg://postgres@127.0.0.1:5432/postgres [--no-copy]
    python -m benchmarks.import_audience --database-url ... --data DIR   # files from benchmarks/gen_audience.py

The data set is generated (deterministically) into a temporary directory unless `--data` names one.
Each run imports into a database of its own: a new SQLite file next to the one named, or a PostgreSQL
database `herald_bench_<random>` on the server named, dropped afterwards. The import goes through the
same code as the CLI. Besides wall time it prints CPU time — this process's, and on a local PostgreSQL
the server processes' — because on a shared machine wall time also measures the neighbours.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import secrets
import tempfile
import time
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from benchmarks import gen_audience
from benchmarks.common import Figure, argument_parser, summary
from herald.audience import importer
from herald.clock import SystemClock
from herald.config import Settings
from herald.db import Database, create_database
from herald.migrate import upgrade
from herald.workspaces import service as workspaces


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _server_cpu(database: Database) -> float:
    """CPU seconds used so far by the server processes of this database's connections (local server)."""
    async with database.reader() as session:
        query = text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = (await session.execute(query)).scalars()
        return sum(_process_cpu(pid) for pid in pids)


async def _admin(server_url: str, sql: str) -> None:
    import asyncpg

    url = make_url(server_url)
    connection = await asyncpg.connect(
        user=url.username, password=url.password, host=url.host, port=url.port, database=url.database
    )
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _import(database_url: str, data: Path, batch_size: int, use_copy: bool) -> None:
    now = SystemClock().now()
    database = create_database(Settings(database_url=database_url))
    server: float | None = None
    try:
        async with database.writer() as session:
            await workspaces.create_workspace(session, now, "Benchmark", "BENCH")
            await session.commit()
        options = importer.ImportOptions(
            workspace_id="BENCH", now=now, batch_size=batch_size, max_errors=0, use_copy=use_copy
        )
        cpu, wall = _cpu(), time.perf_counter()
        report = await importer.import_files(database, data / "users.jsonl", data / "events.jsonl", options)
        cpu, wall = _cpu() - cpu, time.perf_counter() - wall
        if not database_url.startswith("sqlite"):
            server = await _server_cpu(database)
    finally:
        await database.dispose()
    users = report.users_created + report.users_updated
    print(
        f"users : {users:>10,} in {report.users_seconds:7.1f} s = {users / max(report.users_seconds, 1e-9):>9,.0f}/s"
    )
    print(
        f"events: {report.events:>10,} in {report.events_seconds:7.1f} s = "
        f"{report.events / max(report.events_seconds, 1e-9):>9,.0f}/s"
    )
    print(f"total : {wall:.1f} s wall, {cpu:.1f} s CPU in this process", end="")
    print(f", {server:.1f} s CPU in the database server" if server is not None else "")
    postgres = not database_url.startswith("sqlite")
    method = "" if not postgres or use_copy else " (executemany)"
    summary(
        "import_audience",
        "postgresql" if postgres else "sqlite",
        [
            Figure(f"users/s{method}", users / max(report.users_seconds, 1e-9), "/s"),
            Figure(f"events/s{method}", report.events / max(report.events_seconds, 1e-9), "/s"),
        ],
    )


def _generate(directory: Path, users: int, events: int) -> None:
    users_rng, events_rng = random.Random(7), random.Random(8)
    gen_audience.write(directory / "users.jsonl", users, lambda index: gen_audience.user(index, users_rng))
    gen_audience.write(
        directory / "events.jsonl", events, lambda _index: gen_audience.event(users, events_rng)
    )


def run(database_url: str, data: Path, batch_size: int, use_copy: bool) -> None:
    if database_url.startswith("sqlite"):
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite+aiosqlite:///{directory}/import.db"
            upgrade(url)
            print(f"engine: SQLite, batch {batch_size}")
            asyncio.run(_import(url, data, batch_size, use_copy=False))
        return
    name = f"herald_bench_{secrets.token_hex(4)}"
    asyncio.run(_admin(database_url, f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(database_url).set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        print(f"engine: PostgreSQL, batch {batch_size}, {'COPY' if use_copy else 'executemany'}")
        asyncio.run(_import(url, data, batch_size, use_copy=use_copy))
    finally:
        asyncio.run(_admin(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def main() -> None:
    parser = argument_parser(__doc__, "herald-bench.db")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--data", type=Path, help="directory with users.jsonl and events.jsonl (else generated)"
    )
    parser.add_argument("--batch-size", type=int, default=importer.DEFAULT_BATCH)
    parser.add_argument("--no-copy", action="store_true", help="PostgreSQL: executemany instead of COPY")
    args = parser.parse_args()
    if args.data is not None:
        run(args.database_url, args.data, args.batch_size, not args.no_copy)
        return
    with tempfile.TemporaryDirectory() as directory:
        _generate(Path(directory), args.users, args.events)
        run(args.database_url, Path(directory), args.batch_size, not args.no_copy)


if __name__ == "__main__":
    main()
