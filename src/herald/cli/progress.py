"""Progress bars of long commands: drawn on a terminal, silent in scripts.

A bar goes to stderr (stdout keeps only the command's result) and only when stderr is a terminal:
piped or redirected, a command prints its result lines and nothing of the bar.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress, ProgressColumn


def bar(*columns: str | ProgressColumn, enabled: bool = True, console: Console | None = None) -> Progress:
    """`console`: the stderr console the command also prints its messages with, if it has one (lines
    printed through it appear above a live bar instead of breaking it)."""
    # Task descriptions may be file names: not read as markup or emoji codes.
    console = console or Console(stderr=True, markup=False, emoji=False, highlight=False)
    return Progress(*columns, console=console, disable=not (enabled and console.is_terminal), transient=True)
