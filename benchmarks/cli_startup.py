"""Command-line start-up: `herald --help` and `herald keys list` as a user runs them (issue 12).

Each command runs as a fresh process, `--runs` times, the commands taking turns so a busy machine
slows each alike; the figure is the median wall time from spawn to exit. Beside them: a bare
interpreter start (`python -c "import sqlite3"`, the floor no command goes under, printed as a
reference), `herald workspaces list` and two group helps (`herald campaigns stats --help`, `herald
serve --help`, reported), and `herald serve` from spawn to its first `/healthz` answer (reported: it
must not grow). The target is absolute, 0.3 s for each of `herald --help` and `herald keys list`, on
either engine (a key listing against a migrated database with one workspace and one key, both made
with the command line itself).

    python -m benchmarks.cli_startup [--runs 21] [--serve-runs 5] [--database-url URL] \
        [--baseline /path/to/other/venv/bin/herald]

`--baseline` times another installation's `herald` in the same turns (before/after a change).
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchmarks.common import Figure, argument_parser, summary, table
from herald.migrate import upgrade

TARGET_SECONDS = 0.3
WORKSPACE = "bench-cli"


def herald_command() -> list[str]:
    """The `herald` script installed beside this interpreter (what a user runs), else `-m herald`."""
    script = Path(sys.executable).with_name("herald")
    return [str(script)] if script.exists() else [sys.executable, "-m", "herald"]


def prepare(herald: list[str], env: dict[str, str]) -> None:
    """The workspace and its key, made once per database with the command line itself."""
    listed = subprocess.run(
        [*herald, "keys", "list", "-w", WORKSPACE], env=env, capture_output=True, text=True
    )
    if listed.returncode == 0 and listed.stdout.strip():
        return
    subprocess.run([*herald, "workspaces", "create", "Bench CLI", "--id", WORKSPACE], env=env, check=True)
    subprocess.run([*herald, "keys", "create", "-w", WORKSPACE], env=env, check=True, capture_output=True)


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def time_turns(
    commands: dict[str, list[str]], runs: int, warmup: int, env: dict[str, str]
) -> dict[str, tuple[float, float]]:
    """The median wall and CPU (user + system) seconds of each command, run `runs` times in turns
    (after `warmup` turns). On a shared machine the CPU time moves less than the wall time."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for turn in range(warmup + runs):
        for name, command in commands.items():
            started, cpu = time.perf_counter(), _children_cpu()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if turn >= warmup:
                samples[name].append((time.perf_counter() - started, _children_cpu() - cpu))
    return {
        name: (statistics.median(wall for wall, _ in found), statistics.median(cpu for _, cpu in found))
        for name, found in samples.items()
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve_ready_seconds(herald: list[str], env: dict[str, str], runs: int) -> float:
    """The median time from spawning `herald serve` to its first `/healthz` answer. Without the
    embedded worker: in a database shared with other benchmarks it would start sending the campaigns
    they left, and the figure is the API process's start-up."""
    env = {**env, "HERALD_IN_PROCESS_WORKER": "false"}
    found: list[float] = []
    for _ in range(runs):
        port = _free_port()
        started = time.perf_counter()
        server = subprocess.Popen(
            [*herald, "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                        break
                except OSError:
                    if server.poll() is not None:
                        raise RuntimeError("herald serve exited before answering") from None
                    time.sleep(0.005)
            found.append(time.perf_counter() - started)
        finally:
            server.terminate()
            server.wait(timeout=60)
    return statistics.median(found)


def main() -> None:
    parser = argument_parser(__doc__, "herald-bench-cli.db")
    parser.add_argument("--runs", type=int, default=21, help="Timed runs of each command.")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed turns first (bytecode, page cache).")
    parser.add_argument("--serve-runs", type=int, default=5, help="Timed starts of `herald serve` (0: none).")
    parser.add_argument("--baseline", help="Another `herald` executable, timed beside this one (reported).")
    args = parser.parse_args()
    engine = "sqlite" if args.database_url.startswith("sqlite") else "postgresql"
    env = {**os.environ, "HERALD_DATABASE_URL": args.database_url}
    herald = herald_command()
    upgrade(args.database_url)
    prepare(herald, env)

    commands = {
        'python -c "import sqlite3" (reference)': [sys.executable, "-c", "import sqlite3"],
        "herald --help": [*herald, "--help"],
        "herald keys list": [*herald, "keys", "list", "-w", WORKSPACE],
        "herald workspaces list": [*herald, "workspaces", "list"],
        "herald campaigns stats --help": [*herald, "campaigns", "stats", "--help"],
        "herald serve --help": [*herald, "serve", "--help"],
    }
    if args.baseline:
        commands["baseline: herald --help"] = [args.baseline, "--help"]
        commands["baseline: herald keys list"] = [args.baseline, "keys", "list", "-w", WORKSPACE]
    load = os.getloadavg()[0]
    medians = time_turns(commands, args.runs, args.warmup, env)
    serve = serve_ready_seconds(herald, env, args.serve_runs) if args.serve_runs else None
    baseline_serve = (
        serve_ready_seconds([args.baseline], env, args.serve_runs)
        if args.baseline and args.serve_runs
        else None
    )
    load = max(load, os.getloadavg()[0])

    rows = [
        (name, f"{wall * 1000:6,.0f} ms wall  {cpu * 1000:6,.0f} ms CPU")
        for name, (wall, cpu) in medians.items()
    ]
    if serve is not None:
        rows.append(("herald serve → first /healthz answer", f"{serve * 1000:6,.0f} ms wall"))
    if baseline_serve is not None:
        rows.append(
            ("baseline: herald serve → first /healthz answer", f"{baseline_serve * 1000:6,.0f} ms wall")
        )
    rows.append(("machine load (1 min, highest seen)", f"{load:.1f}"))
    title = f"Command-line start-up, medians of {args.runs} runs ({engine}; target {TARGET_SECONDS} s)"
    print(table(title, rows))

    target = TARGET_SECONDS * 1000
    figures = [
        Figure('python -c "import sqlite3" (reference)', medians[next(iter(commands))][0] * 1000, "ms")
    ]
    figures += [
        Figure(f"{name} median", medians[name][0] * 1000, "ms", at_most=target)
        for name in ("herald --help", "herald keys list")
    ]
    figures += [Figure(f"{name} median", medians[name][0] * 1000, "ms") for name in list(commands)[3:]]
    if serve is not None:
        figures.append(Figure("herald serve → first /healthz", serve * 1000, "ms"))
    summary("cli_startup", engine, figures)


if __name__ == "__main__":
    main()
