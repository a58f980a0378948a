"""`make bench`: every benchmark on SQLite, and on PostgreSQL when HERALD_BENCH_POSTGRES_URL is set.

Each benchmark is its own module with its own `--help`; this runner only calls them in turn with the
sizes given by HERALD_BENCH_SCALE (default 1.0 = the sizes in benchmarks/README.md), passes their
output through, and ends with one table of every benchmark's summary figures (the `BENCH {json}`
line each prints last), their targets and whether they were met.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import SUMMARY_PREFIX

SCALE = float(os.environ.get("HERALD_BENCH_SCALE", "1.0"))


def scaled(size: int, least: int = 1) -> str:
    return str(max(least, int(size * SCALE)))


BENCHMARKS: list[tuple[str, list[str]]] = [
    ("benchmarks.offers_list", ["--rows", scaled(1_000_000)]),
    ("benchmarks.reachability", ["--users", scaled(1_000_000)]),
    ("benchmarks.import_audience", ["--users", scaled(100_000), "--events", scaled(1_000_000)]),
    ("benchmarks.campaign_create", ["--requests", scaled(1000, least=40)]),
    ("benchmarks.search", ["--campaigns", scaled(100_000)]),
    ("benchmarks.preview", ["--requests", scaled(2000, least=8)]),
    (
        "benchmarks.delivery",
        [
            *("--users", scaled(100_000, least=100), "--email-users", scaled(20_000, least=100)),
            *("--audience-users", scaled(1_000_000, least=1000)),
        ],
    ),
    (
        "benchmarks.triggers",
        ["--rate", scaled(1000, least=50), "--seconds", "10", "--users", scaled(2000, least=100)],
    ),
    ("benchmarks.delivery_periodic", ["--users", scaled(100_000, least=100)]),
    ("benchmarks.cli_startup", ["--runs", scaled(21, least=5), "--serve-runs", scaled(5, least=1)]),
]


# Both engines again with one engine process per core of this machine, each claiming its own
# batches: on PostgreSQL `herald worker` processes (the production topology), on SQLite the engine
# of `herald serve` and `herald worker` processes beside it on the same file (the figures above run
# one engine process).
_WORKERS = str(os.cpu_count() or 1)
SEVERAL_WORKERS: list[tuple[str, list[str]]] = [
    (
        "benchmarks.delivery",
        [
            *("--users", scaled(100_000, least=100), "--only", "push,batched"),
            *("--workers", _WORKERS),
        ],
    ),
    (
        "benchmarks.delivery_periodic",
        ["--users", scaled(100_000, least=100), "--workers", _WORKERS],
    ),
]


def urls() -> list[str]:
    found = [f"sqlite+aiosqlite:///{Path(tempfile.gettempdir()) / 'herald-bench.db'}"]
    postgres = os.environ.get("HERALD_BENCH_POSTGRES_URL")
    if postgres:
        found.append(postgres)
    return found


def run_benchmark(command: list[str]) -> tuple[int, list[dict[str, Any]]]:
    """Run one benchmark with its output passed through as it comes; its exit code and summaries."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    output = bytearray()
    while chunk := os.read(process.stdout.fileno(), 65536):
        output += chunk
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    lines = output.decode(errors="replace").splitlines()
    summaries = [json.loads(line[len(SUMMARY_PREFIX) :]) for line in lines if line.startswith(SUMMARY_PREFIX)]
    return process.wait(), summaries


def _value(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "/s":
        return f"{value:,.0f}/s"
    return f"{value:.2f}"


def _result(passed: bool | None) -> str:
    return {True: "pass", False: "MISS", None: ""}[passed]


def summary_table(rows: list[tuple[str, str, str, str, str, str]]) -> str:
    header = ("benchmark", "engine", "figure", "value", "target", "result")
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    right = {3}  # values line up on the right

    def line(row: tuple[str, ...]) -> str:
        cells = [
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), "  ".join("-" * width for width in widths), *map(line, rows)])


def _collect(
    rows: list[tuple[str, str, str, str, str, str]],
    name: str,
    engine: str,
    code: int,
    summaries: list[dict[str, Any]],
) -> None:
    if code != 0 or not summaries:
        problem = f"exit code {code}" + ("" if summaries else ", no summary")
        rows.append((name, engine, f"({problem})", "", "", "FAILED"))
    for found in summaries:
        for figure in found["figures"]:
            rows.append(
                (
                    found["benchmark"],
                    found["engine"],
                    figure["name"],
                    _value(figure["value"], figure["unit"]),
                    figure["target"] or "",
                    _result(figure["pass"]),
                )
            )


def main() -> int:
    failed = 0
    rows: list[tuple[str, str, str, str, str, str]] = []
    # The served peers (Herald on both engines, the bare route, the mock) are started once by the
    # benchmark itself, so it runs once, not per engine.
    print("\n== benchmarks.peers ==", flush=True)
    code, summaries = run_benchmark([sys.executable, "-m", "benchmarks.peers"])
    failed += code != 0
    _collect(rows, "peers", "served", code, summaries)
    for url in urls():
        for module, args in [*BENCHMARKS, *SEVERAL_WORKERS]:
            print(f"\n== {module} :: {url.split('://')[0]} ==", flush=True)
            code, summaries = run_benchmark([sys.executable, "-m", module, "--database-url", url, *args])
            failed += code != 0
            engine = "sqlite" if url.startswith("sqlite") else "postgresql"
            _collect(rows, module.rsplit(".", 1)[-1], engine, code, summaries)
    print(f"\n== summary (HERALD_BENCH_SCALE={SCALE:g}) ==")
    print(summary_table(rows))
    missed = sum(row[5] == "MISS" for row in rows)
    met = sum(row[5] == "pass" for row in rows)
    print(f"\ntargets: {met} met, {missed} missed; benchmarks failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
