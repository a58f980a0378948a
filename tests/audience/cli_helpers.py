"""Running the CLI against the test database, and reading what it stored (CLI tests are synchronous:
the commands run their own event loop)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import TypeVar

from click.testing import Result
from sqlalchemy.ext.asyncio import AsyncSession
from typer.testing import CliRunner

from herald.cli.app import app
from herald.config import Settings
from herald.db import create_database

T = TypeVar("T")


class Cli:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.runner = CliRunner()

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(app, list(args))

    def workspace(self) -> str:
        workspace_id = f"W{secrets.token_hex(6).upper()}"
        result = self("workspaces", "create", "test", "--id", workspace_id)
        assert result.exit_code == 0, result.output
        return workspace_id

    def read(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        async def main() -> T:
            database = create_database(Settings(database_url=self.database_url))
            try:
                async with database.reader() as session:
                    return await work(session)
            finally:
                await database.dispose()

        return asyncio.run(main())
