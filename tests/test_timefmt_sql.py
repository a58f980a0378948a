"""The SQL twin of `rfc3339` writes what the Python one writes, for any stored date-time, on the
test run's engine (SQLite, or PostgreSQL when HERALD_TEST_DATABASE_URL is set)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Column, MetaData, Table, insert, select

from herald.config import Settings as HeraldSettings
from herald.db import UTCDateTime, create_database
from herald.timefmt import rfc3339
from herald.timefmt_sql import rfc3339_text

_TABLE = Table("timefmt_sql_probe", MetaData(), Column("at", UTCDateTime()))
_MOMENTS = st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)).map(
    lambda moment: moment.replace(tzinfo=UTC)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moments=st.lists(_MOMENTS, min_size=1, max_size=40))
def test_sql_twin_writes_what_rfc3339_writes(database_url: str, moments: list[datetime]) -> None:
    assert sorted(asyncio.run(_shown(database_url, moments))) == sorted(rfc3339(moment) for moment in moments)


async def _shown(database_url: str, moments: list[datetime]) -> list[str]:
    database = create_database(HeraldSettings(database_url=database_url, redis_url=None))
    try:
        async with database.engine.begin() as connection:
            await connection.run_sync(_TABLE.create, checkfirst=True)
            await connection.execute(_TABLE.delete())
            await connection.execute(insert(_TABLE), [{"at": moment} for moment in moments])
            shown = (await connection.execute(select(rfc3339_text(_TABLE.c.at)))).scalars().all()
            await connection.run_sync(_TABLE.drop)
    finally:
        await database.dispose()
    return list(shown)
