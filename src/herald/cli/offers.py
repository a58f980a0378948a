"""`herald offers import FILE.jsonl --workspace W`: bulk-load offerings (format: herald.offers.importer)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn
from sqlalchemy.ext.asyncio import AsyncSession

from herald.cli.progress import bar as progress_bar
from herald.cli.runtime import clock, run_in_session
from herald.offers import importer
from herald.workspaces.service import AdminError

offers = typer.Typer(help="Offerings.", no_args_is_help=True)
# Worker processes pay ~50% more CPU (start-up, pickling rows back); on 2 cores shared with the
# database they measured slower, so validating in this process is the default. Use --workers on
# machines with cores to spare.
DEFAULT_WORKERS = 1


@offers.command("import")
def import_offers(
    file: Annotated[
        Path, typer.Argument(help="JSON Lines: one offering per line.", exists=True, dir_okay=False)
    ],
    workspace: Annotated[str, typer.Option("--workspace", "-w", help="Workspace id.")],
    batch_size: Annotated[int, typer.Option(min=1, help="Rows per INSERT.")] = importer.DEFAULT_BATCH,
    max_errors: Annotated[int, typer.Option(min=1, help="Stop reading after this many bad lines.")] = 100,
    workers: Annotated[
        int,
        typer.Option(
            min=1, help="Processes validating lines; 1 validates in this process (best on 1-2 cores)."
        ),
    ] = DEFAULT_WORKERS,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Import offerings of any status in one transaction: all lines land, or none (errors are listed
    with their line numbers).

    Each line is an O2 body plus optional `status` (published | draft | archived), `id`
    (offer_<24 hex>) and `created_at` (ISO 8601 UTC with Z).
    """
    started = time.perf_counter()
    bar = progress_bar(
        TextColumn("importing"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), enabled=not quiet
    )

    async def work(session: AsyncSession) -> importer.ImportResult:
        task = bar.add_task("import", total=file.stat().st_size)
        with bar, file.open("rb") as lines:
            result = await importer.import_lines(
                session,
                workspace,
                lines,
                clock.now(),
                batch_size=batch_size,
                max_errors=max_errors,
                progress=lambda done: bar.update(task, completed=done),
                workers=workers,
            )
        if not result.ok:
            for error in result.errors:
                typer.secho(f"line {error.line}: {error.describe()}", fg=typer.colors.RED, err=True)
            more = " (stopped at --max-errors; later lines may hold more)" if result.stopped_early else ""
            # Raising rolls the transaction back: nothing of the file is kept.
            raise AdminError(f"{len(result.errors)} bad line(s){more}; nothing was imported")
        return result

    result = run_in_session(work)
    elapsed = time.perf_counter() - started
    rate = result.imported / elapsed if elapsed else 0.0
    typer.echo(f"imported {result.imported} offerings into {workspace} in {elapsed:.1f}s ({rate:,.0f}/s)")
