"""Running async admin work from synchronous Typer commands, in one committed transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from herald.clock import SystemClock
from herald.config import Settings
from herald.db import create_database
from herald.workspaces.service import AdminError

T = TypeVar("T")
clock = SystemClock()


def run_in_session(work: Callable[[AsyncSession], Awaitable[T]], settings: Settings | None = None) -> T:
    """Run `work` in one transaction: committed when it returns, rolled back when it raises."""

    async def main() -> T:
        database = create_database(settings or Settings())
        try:
            async with database.writer() as session:
                result = await work(session)
                await session.commit()
                return result
        finally:
            await database.dispose()

    try:
        return asyncio.run(main())
    except AdminError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
