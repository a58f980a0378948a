"""Time `herald audience import` on a fresh database of each engine, and print the rates.

    python benchmarks/gen_audience.py /tmp/audience --users 100000 --events 1000000
    python benchmarks/import_audience.py /tmp/audience --engine sqlite
    python benchmarks/import_audience.py /tmp/audience --engine postgresql \\
        --pg-url postgresql+asyncpg://postgres@127.0.0.1:5432/postgres [--no-copy]

Each run creates its own database (a temporary SQLite file, or a PostgreSQL database named
`herald_bench_<random>` that is dropped afterwards), migrates it, makes a workspace and imports
through the same code as the CLI. Besides wall time it prints this process's CPU time: on a shared
machine, wall time also measures the neighbours.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import tempfile
import time
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from herald.audience import importer
from herald.clock import SystemClock
from herald.config import Settings
from herald.db import Database, create_database
from herald.migrate import upgrade
from herald.workspaces import service as workspaces


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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


async def _server_cpu(database: Database) -> float:
    """CPU seconds used so far by the server processes of this database's connections (local server)."""
    async with database.reader() as session:
        pids = (
            await session.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"))
        ).scalars()
        return sum(_process_cpu(pid) for pid in pids)


def _process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _run(database_url: str, data: Path, batch_size: int, use_copy: bool) -> None:
    now = SystemClock().now()
    database = create_database(Settings(database_url=database_url))
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
        server = await _server_cpu(database) if not database_url.startswith("sqlite") else None
    finally:
        await database.dispose()
    users = report.users_created + report.users_updated
    print(f"users : {users:>10,} in {report.users_seconds:7.1f} s = {users / report.users_seconds:>9,.0f}/s")
    print(
        f"events: {report.events:>10,} in {report.events_seconds:7.1f} s = {report.events / report.events_seconds:>9,.0f}/s"
    )
    print(f"total : {wall:.1f} s wall, {cpu:.1f} s CPU in this process", end="")
    print(f", {server:.1f} s CPU in the database server" if server is not None else "")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data", type=Path, help="directory holding users.jsonl and events.jsonl")
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--pg-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--batch-size", type=int, default=importer.DEFAULT_BATCH)
    parser.add_argument("--no-copy", action="store_true", help="PostgreSQL: executemany instead of COPY")
    args = parser.parse_args()

    if args.engine == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite+aiosqlite:///{directory}/bench.db"
            upgrade(url)
            print(f"engine: SQLite, batch {args.batch_size}")
            asyncio.run(_run(url, args.data, args.batch_size, use_copy=False))
        return

    name = f"herald_bench_{secrets.token_hex(4)}"
    asyncio.run(_admin(args.pg_url, f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(args.pg_url).set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        print(f"engine: PostgreSQL, batch {args.batch_size}, {'executemany' if args.no_copy else 'COPY'}")
        asyncio.run(_run(url, args.data, args.batch_size, use_copy=not args.no_copy))
    finally:
        asyncio.run(_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
