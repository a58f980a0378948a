"""Campaign administration commands (`herald campaigns ...`) and the background worker (`herald worker`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

# Each command imports the services it runs inside its own body: `herald campaigns stats --help`
# (and any other command of the group) loads this module, and only the command it runs needs the
# database layer, the engine or rich (tests/test_cli_startup.py).

campaigns = typer.Typer(help="Import and review campaigns.", no_args_is_help=True)

WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")]


def _fail(lines: list[str]) -> None:
    for line in lines:
        typer.secho(f"error: {line}", fg=typer.colors.RED, err=True)
    raise typer.Exit(1)


@campaigns.command("import")
def import_campaigns(
    file: Annotated[Path, typer.Argument(help="JSON Lines: one campaign (version document) per line.")],
    workspace: WorkspaceOpt,
) -> None:
    """Import campaigns of any channel and status; nothing is written unless every line is valid."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from herald.campaigns import importer
    from herald.cli.progress import bar as progress_bar
    from herald.cli.runtime import clock, run_in_session
    from herald.workspaces.service import get_workspace

    if not file.is_file():
        _fail([f"{file} is not a readable file"])
    with file.open(encoding="utf-8") as lines:
        parsed = importer.parse_lines(lines, workspace, clock.now())
    if parsed.problems:
        _fail(parsed.problems)

    async def work(session: AsyncSession) -> list[str]:
        await get_workspace(session, workspace)  # the one wording of an unknown workspace
        problems = await importer.existing_problems(session, workspace, parsed)
        if problems:
            return problems
        with progress_bar(
            TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        ) as progress:
            task = progress.add_task("campaigns", total=len(parsed.rows))
            await importer.insert_rows(session, parsed, lambda done: progress.advance(task, done))
        return []

    problems = run_in_session(work)
    if problems:
        _fail(problems)
    campaigns_count = len({row["campaign_id"] for row in parsed.rows})
    typer.echo(
        f"imported {len(parsed.rows)} version documents of {campaigns_count} campaigns into {workspace}"
    )


@campaigns.command("reject")
def reject_campaign(
    campaign_id: Annotated[str, typer.Argument(help="The campaign_id of a DRAFT campaign.")],
    workspace: WorkspaceOpt,
    comment: Annotated[str, typer.Option(help="Why the review rejected it (shown by campaign meta).")],
) -> None:
    """Record a rejected review: the campaign stays in DRAFT and meta shows the comment."""
    from herald.campaigns import review
    from herald.cli.runtime import clock, run_in_session
    from herald.errors import HeraldError
    from herald.workspaces.service import get_workspace

    async def work(session: AsyncSession) -> str | None:
        await get_workspace(session, workspace)  # AdminError for an unknown workspace, first
        try:
            await review.reject(session, workspace, campaign_id, comment, clock.now())
        except HeraldError as exc:
            # Each sentence once: a refusal's detail often repeats its message.
            said = dict.fromkeys([exc.message, *(p.message for p in exc.details)])
            return " ".join(said)
        return None

    problem = run_in_session(work)
    if problem:
        _fail([problem])
    typer.echo(f"rejected {campaign_id}")


@campaigns.command("stats")
def campaign_stats(
    campaign_id: Annotated[str, typer.Argument(help="The campaign_id.")],
    workspace: WorkspaceOpt,
    as_json: Annotated[bool, typer.Option("--json", help="The API's stats object, as JSON.")] = False,
) -> None:
    """Delivery stats per execution: the figures of GET /v5/campaigns/{campaign_id}/stats."""
    from herald.cli.runtime import run_in_session
    from herald.delivery.engine import stats
    from herald.errors import HeraldError
    from herald.workspaces.service import AdminError, get_workspace

    async def work(session: AsyncSession) -> dict[str, Any] | str:
        try:
            await get_workspace(session, workspace)
            return await stats.campaign_stats(session, workspace, campaign_id)
        except (HeraldError, AdminError) as exc:
            return exc.message if isinstance(exc, HeraldError) else str(exc)

    found = run_in_session(work)
    if isinstance(found, str):
        _fail([found])
        return
    if as_json:
        import orjson

        typer.echo(orjson.dumps(found).decode())
        return
    typer.echo(stats_table(found))


def stats_table(data: dict[str, Any]) -> str:
    """The stats as a readable table: one column per execution, one row per figure."""
    runs = data["executions"]
    lines = [f"campaign {data['campaign_id']}  status {data['status']}"]
    if not runs:
        lines.append("no execution yet")
        return "\n".join(lines)
    rows: list[tuple[str, list[str]]] = [
        ("execution", [str(run["id"]) for run in runs]),
        ("run", [_figure(run.get("run")) for run in runs]),
        # No wider than the execution ids above them: a date-time, an object id ('-' when none).
        ("scheduled for", [_figure(run.get("scheduled_for")) for run in runs]),
        ("child campaign", [_figure(run.get("child_campaign_id")) for run in runs]),
        ("status", [str(run["status"]) for run in runs]),
        ("audience", [str(run["audience"]) for run in runs]),
    ]
    for name in runs[0]["held_out"]:
        rows.append((f"held out: {name}", [str(run["held_out"].get(name, 0)) for run in runs]))
    for name in runs[0]["suppressed"]:
        rows.append((f"suppressed: {name}", [str(run["suppressed"].get(name, 0)) for run in runs]))
    rows += [
        ("progress", [f"{run['progress']:.1f}%" if "progress" in run else "-" for run in runs]),
        ("pending", [str(run["pending"]) for run in runs]),
        # Of the pending: waiting for another attempt, and for the end of quiet hours or a delay.
        ("  retrying", [str(run.get("retrying", 0)) for run in runs]),
        ("  deferred", [str(run.get("deferred", 0)) for run in runs]),
        ("sent", [str(run["sent"]) for run in runs]),
        ("failed", [str(run["failed"]) for run in runs]),
        ("unsent", [str(run["unsent"]) for run in runs]),
    ]
    rows += _conversion_rows(runs)
    width = max(len(label) for label, _ in rows)
    columns = [max(len(row[1][i]) for row in rows) for i in range(len(runs))]
    for label, values in rows:
        cells = "  ".join(value.rjust(columns[i]) for i, value in enumerate(values))
        lines.append(f"{label.ljust(width)}  {cells}")
    # A reason is a sentence (why a delivery was paused or stopped): under the table, one line per
    # execution that has one, so it does not widen every column.
    for run in runs:
        if run.get("reason"):
            lines.append(f"reason ({run['id']}): {run['reason']}")
    # Why users failed: likewise, a line per reason (the most users first).
    for run in runs:
        for failure in run.get("failures") or []:
            lines.append(f"failed ({run['id']}): {failure['users']} user(s): {failure['reason']}")
    # A live activity's one broadcast message, likewise a line of its own per execution.
    for run in runs:
        if broadcast := run.get("broadcast"):
            line = f"broadcast ({run['id']}): {broadcast['status']}, {broadcast['attempts']} attempt(s)"
            if broadcast.get("failure_reason"):
                line += f"; last failure: {broadcast['failure_reason']}"
            lines.append(f"{line}; id {broadcast['id']}")
    return "\n".join(lines)


def _figure(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _conversion_rows(runs: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Users, converted users, conversions, revenue, rate and uplift of the sent users, each
    variation and the control (the rate's numerator and denominator both shown)."""
    if not any(run.get("conversions") for run in runs):
        return []

    def variation(name: str) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
        return lambda found: next((v for v in found["variations"] if v["variation"] == name), None)

    groups: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any] | None]]] = [
        ("sent", lambda found: found["sent"]),
        ("control", lambda found: found["control"]),
    ]
    listed = (
        v["variation"] for run in runs if run.get("conversions") for v in run["conversions"]["variations"]
    )
    groups += [(name, variation(name)) for name in sorted(set(listed))]
    rows: list[tuple[str, list[str]]] = []
    for label, pick in groups:
        for figure in ("users", "converted_users", "conversions", "revenue", "conversion_rate", "uplift"):
            if label == "control" and figure == "uplift":
                continue
            values = []
            for run in runs:
                found = run.get("conversions")
                chosen = pick(found) if found else None
                values.append(_figure(chosen.get(figure)) if chosen else "-")
            rows.append((f"conversions {label}: {figure}", values))
    return rows


@campaigns.command("resume-delivery")
def resume_delivery(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")], workspace: WorkspaceOpt
) -> None:
    """Resume the delivery of a SENDING campaign that the engine paused because its connector kept
    failing (the reason is in `GET /v5/campaigns/{id}/stats`); fix the connector first."""
    from herald.cli.runtime import clock, run_in_session
    from herald.config import Settings
    from herald.delivery.engine import pause
    from herald.workspaces.service import get_workspace

    settings = Settings()
    now = clock.now()

    async def work(session: AsyncSession) -> int:
        await get_workspace(session, workspace)  # the one wording of an unknown workspace
        return await pause.resume(session, workspace, campaign_id, now)

    if not run_in_session(work, settings):
        _fail([f"campaign {campaign_id} has no paused delivery in workspace {workspace}"])
    typer.echo(f"resumed the delivery of {campaign_id}")


def _positive_seconds(value: float | None) -> float | None:
    import math

    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number of seconds > 0")
    return value


def worker(
    once: Annotated[bool, typer.Option(help="Run one tick and exit.")] = False,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between ticks.", callback=_positive_seconds)
    ] = None,
) -> None:
    """Run the background worker: scheduled campaign transitions (SCHEDULED → ACTIVE, expiry, ...)."""
    import asyncio
    import logging.config
    import signal

    from herald import sqlite_checkpoints
    from herald.campaigns import worker as campaigns_worker
    from herald.clock import clock_for
    from herald.config import Settings
    from herald.db import create_database
    from herald.ops import heap
    from herald.ops.logs import logging_config
    from herald.plain_sql import sqlite_path

    settings = Settings()
    logging.config.dictConfig(logging_config(settings.log_level, settings.log_format))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per message sent is noise
    log = logging.getLogger("herald.worker")
    # The sandbox's time travel (HERALD_CLOCK_FILE) moves the worker's time too.
    now_from = clock_for(settings.clock_file)

    # A long-running worker on a SQLite file checkpoints from a thread, as `herald serve` does: left
    # to SQLite, the commit that finds the log long copies it back and syncs while it holds the
    # write lock, which every other process's writers wait for.
    checkpointed = None if once or not settings.is_sqlite else sqlite_path(settings.database_url)

    async def main() -> None:
        if checkpointed is not None:
            sqlite_checkpoints.start(checkpointed)  # before any connection opens
        database = create_database(settings)
        try:
            if once:
                from herald.ops import metrics

                failed_before = metrics.step_failures()
                applied = await campaigns_worker.run_tick(database, now_from.now(), clock=now_from)
                typer.echo(f"applied {applied} transitions")
                if metrics.step_failures() > failed_before:
                    typer.echo("error: part of the tick failed (see the log); the rest went on", err=True)
                    raise typer.Exit(1)
                return
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()

            def stopping(name: str) -> None:
                # Said at once: the windows on the wire may take up to the connector's timeout.
                if not stop.is_set():
                    log.info("%s received: stopping after the messages already handed over", name)
                stop.set()

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stopping, sig.name)
            await campaigns_worker.run_forever(
                database,
                now_from,
                settings.worker_interval_seconds if interval is None else interval,
                stop,
                settings,
            )
        finally:
            await database.dispose()
            if checkpointed is not None:
                sqlite_checkpoints.stop(checkpointed)

    heap.settle()
    import uvloop

    uvloop.run(main())
