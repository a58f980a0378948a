"""Audience commands: bulk import of users and events, and custom segments."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from sqlalchemy.ext.asyncio import AsyncSession

from herald.audience import importer
from herald.audience import segments as segments_service
from herald.cli import runtime
from herald.cli.progress import bar as progress_bar
from herald.config import Settings
from herald.db import create_database
from herald.problems import Problem
from herald.workspaces.names import check_name
from herald.workspaces.service import get_workspace

audience = typer.Typer(help="Users and events: bulk import.", no_args_is_help=True)
segments = typer.Typer(help="Custom segments (filter-based or static lists).", no_args_is_help=True)

WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")]
ExistingFile = {"exists": True, "dir_okay": False, "readable": True}


@audience.command("import")
def import_(
    users: Annotated[Path, typer.Argument(help="Users file: one customer object per line.", **ExistingFile)],
    workspace: WorkspaceOpt,
    events: Annotated[
        Path | None,
        typer.Argument(
            help="Events file: one {customer_id, action, occurred_at, ...} per line.", **ExistingFile
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=100, max=100_000, help="Rows per batch (one transaction each).")
    ] = importer.DEFAULT_BATCH,
    max_errors: Annotated[
        int, typer.Option(min=0, help="Invalid lines to skip (and report) before stopping.")
    ] = 100,
    check: Annotated[bool, typer.Option("--check", help="Only read and validate; write nothing.")] = False,
    copy: Annotated[bool, typer.Option(help="On PostgreSQL, load events with COPY.")] = True,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Load users (upserted, as POST /v1/customer) and events (as POST /v1/event) from JSON Lines."""
    # Lines carry user data (file names, values): printed as they are, never read as rich markup or
    # emoji codes (`users.jsonl:100:` would show as `users.jsonl💯`).
    err = Console(stderr=True, markup=False, emoji=False, highlight=False)
    files = [users, *([events] if events else [])]
    bar = progress_bar(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        enabled=progress,
        console=err,
    )
    tasks: dict[str, TaskID] = {
        path.name: bar.add_task(path.name, total=path.stat().st_size) for path in files
    }

    def on_error(error: importer.LineError) -> None:
        for line in error.lines():
            err.print(line, style="red", markup=False, emoji=False, highlight=False, soft_wrap=True)

    options = importer.ImportOptions(
        workspace_id=workspace,
        now=runtime.clock.now(),
        batch_size=batch_size,
        max_errors=max_errors,
        check_only=check,
        use_copy=copy,
        on_error=on_error,
        on_progress=lambda name, done: bar.advance(tasks[name], done),
    )

    async def main() -> importer.ImportReport:
        database = create_database(Settings())
        try:
            async with database.reader() as session:
                await get_workspace(session, workspace)
            return await importer.import_files(database, users, events, options)
        finally:
            await database.dispose()

    started = time.perf_counter()
    try:
        with bar:
            report = asyncio.run(main())
    except importer.ImportStopped as exc:
        done = "nothing was written" if check else "the valid lines before it are imported"
        typer.secho(f"error: {exc}; {done}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    users_written = report.users_created + report.users_updated
    # A check reports what the import would do, in the same words, so the two lines compare.
    verb = "checked (nothing written)" if check else "imported"
    typer.echo(
        f"{verb}: users {users_written} ({report.users_created} created, {report.users_updated} updated, "
        f"{report.users_skipped} skipped), events {report.events} "
        f"({report.users_created_for_events} users created for them), invalid lines {report.invalid_lines} "
        f"(users {report.users_invalid}, events {report.events_invalid})"
    )
    typer.echo(
        f"time: {time.perf_counter() - started:.1f} s (users {_rate(users_written, report.users_seconds)}, "
        f"events {_rate(report.events, report.events_seconds)})"
    )
    if report.invalid_lines:
        raise typer.Exit(1)


def _rate(rows: int, seconds: float) -> str:
    return f"{seconds:.1f} s, {rows / seconds:,.0f}/s" if seconds > 0 else "-"


@segments.command("create")
def segments_create(
    name: Annotated[str, typer.Argument(help="Segment name (unique in the workspace).")],
    workspace: WorkspaceOpt,
    filters: Annotated[
        Path | None, typer.Option(help="JSON file holding one FilterGroup.", **ExistingFile)
    ] = None,
    customers: Annotated[
        Path | None, typer.Option(help="Text file with one customer id a line.", **ExistingFile)
    ] = None,
) -> None:
    """Create a filter-based segment (--filters) or a static list of customers (--customers)."""
    if (filters is None) == (customers is None):
        raise typer.BadParameter("give exactly one of --filters FILE.json or --customers FILE.txt")
    check_name("a segment name", name, segments_service.MAX_NAME_LENGTH)
    now = runtime.clock.now()
    if filters is not None:
        try:
            raw = json.loads(filters.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            typer.secho(f"error: {filters.name} is not JSON: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(1) from None

        async def create_filter(session: AsyncSession) -> str:
            segment = await segments_service.create_filter_segment(session, now, workspace, name, raw)
            return segment.id

        typer.echo(runtime.run_in_session(create_filter))
        return

    assert customers is not None
    try:
        text = customers.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        typer.secho(f"error: {customers.name} is not UTF-8 text: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    ids, problems = segments_service.read_customer_ids(text.splitlines())
    if problems:
        raise _exit_with(problems)

    async def create_static(session: AsyncSession) -> tuple[str, int]:
        segment, unknown = await segments_service.create_static_segment(session, now, workspace, name, ids)
        return segment.id, unknown

    segment_id, unknown = runtime.run_in_session(create_static)
    typer.echo(segment_id)
    if unknown:
        typer.secho(
            f"note: {unknown} of {len(ids)} customer ids are not known users yet",
            fg=typer.colors.YELLOW,
            err=True,
        )


def _exit_with(problems: list[Problem]) -> typer.Exit:
    for problem in problems:
        typer.secho(f"{problem.target or '(file)'}: {problem.message}", fg=typer.colors.RED, err=True)
    return typer.Exit(1)


@segments.command("list")
def segments_list(workspace: WorkspaceOpt) -> None:
    """Segments of the workspace: id, name, kind, and the member count of static ones."""

    async def work(session: AsyncSession) -> list[str]:
        await get_workspace(session, workspace)
        found = await segments_service.list_segments(session, workspace)
        return [
            f"{s.id}\t{s.name}\t{s.kind}" + (f"\tmembers={s.members}" if s.members is not None else "")
            for s in found
        ]

    for line in runtime.run_in_session(work):
        typer.echo(line)
