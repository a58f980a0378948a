"""Running async admin work from synchronous Typer commands, in one committed transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from herald.clock import clock_for
from herald.config import Settings
from herald.db import create_database

T = TypeVar("T")


class _CommandClock:
    """The time of a command: the server's (`HERALD_CLOCK_FILE` when it is set, read as each
    command asks, so a sandbox moved in time imports, stamps and checks by the time its server
    keeps), else the system's."""

    def now(self) -> datetime:
        return clock_for(Settings().clock_file).now()


clock = _CommandClock()


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
