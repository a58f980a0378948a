"""Alembic is the only source of the schema: an empty database upgrades to head with no drift."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from herald.migrate import alembic_config
from herald.models import Base


def _diff(connection: Any) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def test_head_matches_the_models(database_url: str) -> None:
    # `database_url` was migrated from empty to head by the session fixture.
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            diff = await connection.run_sync(_diff)
            version = await connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            current = version.scalar_one()
    finally:
        await engine.dispose()
    assert diff == []
    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    assert current == head


def test_there_is_one_head(database_url: str) -> None:
    assert len(ScriptDirectory.from_config(alembic_config(database_url)).get_heads()) == 1
