"""Alembic environment: async engines, batch mode on SQLite, the URL from Herald's settings."""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import create_async_engine

from herald.config import Settings
from herald.models import Base
from herald.plain_sql import postgresql_engine_url

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    given = config.attributes.get("database_url")
    url = make_url(str(given) if given else Settings().database_url)
    if url.get_backend_name() == "sqlite":
        # Any SQLite URL (`sqlite:///herald.db` too), as the server opens it whatever driver it
        # names: through the asynchronous driver here.
        url = url.set(drivername="sqlite+aiosqlite")
        return url.render_as_string(hide_password=False)
    return postgresql_engine_url(url.render_as_string(hide_password=False))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
    finally:  # also when the database cannot be opened: no connection left for the collector
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
    else:
        asyncio.run(_run_async())


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
