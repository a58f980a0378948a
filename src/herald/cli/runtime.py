"""Running async admin work from synchronous Typer commands, in one committed transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from herald.clock import SystemClock
from herald.config import Settings
from herald.db import create_database

T = TypeVar("T")
clock = SystemClock()


def run_in_session(work: Callable[[AsyncSession], Awaitable[T]], settings: Settings | None = None) -> T:
    """Run `work` in one transaction: committed when it returns, rolled back when it raises (an
    AdminError then reaches the command line, which prints it: `app.LazyGroup.invoke`)."""

    async def main() -> T:
        database = create_database(settings or Settings())
        try:
            async with database.writer() as session:
                result = await work(session)
                await session.commit()
                return result
        finally:
            await database.dispose()

    return asyncio.run(main())
