"""`make bench`: every benchmark on SQLite, and on PostgreSQL when HERALD_BENCH_POSTGRES_URL is set.

Each benchmark is its own module with its own `--help`; this runner only calls them in turn with the
sizes given by HERALD_BENCH_SCALE (default 1.0 = the sizes in benchmarks/README.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCALE = float(os.environ.get("HERALD_BENCH_SCALE", "1.0"))
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("benchmarks.offers_list", ["--rows", str(int(1_000_000 * SCALE))]),
    ("benchmarks.reachability", ["--users", str(int(1_000_000 * SCALE))]),
    (
        "benchmarks.import_audience",
        ["--users", str(int(100_000 * SCALE)), "--events", str(int(1_000_000 * SCALE))],
    ),
]


def urls() -> list[str]:
    found = [f"sqlite+aiosqlite:///{Path(tempfile.gettempdir()) / 'herald-bench.db'}"]
    postgres = os.environ.get("HERALD_BENCH_POSTGRES_URL")
    if postgres:
        found.append(postgres)
    return found


def main() -> int:
    failed = 0
    for url in urls():
        for module, args in BENCHMARKS:
            print(f"\n== {module} :: {url.split('://')[0]} ==", flush=True)
            result = subprocess.run([sys.executable, "-m", module, "--database-url", url, *args], check=False)
            failed += result.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
