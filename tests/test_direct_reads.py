"""`direct_reads.rows_in` and `padded_in`: statements run on the driver inside the caller's
transaction, with IN lists compiled once per size class. Both engines (PostgreSQL when
HERALD_TEST_DATABASE_URL is set)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import bindparam, func, literal_column, select, text

from herald.config import Settings
from herald.db import Database, create_database
from herald.delivery.models import Connector
from herald.direct_reads import padded_in, padded_values, rows_in


@pytest.fixture
async def database(settings: Settings) -> AsyncIterator[Database]:
    database = create_database(settings)
    yield database
    await database.dispose()


async def test_a_statement_first_in_its_transaction_runs_in_it(database: Database) -> None:
    """On PostgreSQL SQLAlchemy's adapter begins a transaction with its own first statement; a
    statement run first by `rows_in` (a share lock, say) must be in that transaction, not
    autocommitted before it."""
    async with database.writer() as session:
        connection = await session.connection()
        if connection.dialect.name == "postgresql":
            first = (await rows_in(connection, select(literal_column("txid_current()")), {}))[0][0]
            second = (await session.execute(text("SELECT txid_current()"))).scalar()
            assert first == second
        else:
            await connection.exec_driver_sql("CREATE TEMP TABLE seen (n INTEGER)")
            await connection.exec_driver_sql("INSERT INTO seen VALUES (1)")
            assert connection.in_transaction()
        await session.rollback()


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 9])
async def test_a_padded_in_list_finds_each_value_once(database: Database, count: int) -> None:
    names = [f"name-{number}" for number in range(count)]
    statement = select(func.count()).select_from(
        select(literal_column("1").label("one"))
        .where(padded_in(bindparam("probe"), "name", count))
        .subquery()
    )
    async with database.reader() as session:
        connection = await session.connection()
        for probe, expected in [(names[0], 1), (names[-1], 1), ("absent", 0)]:
            values = {"probe": probe, **padded_values("name", names)}
            assert (await rows_in(connection, statement, values))[0][0] == expected


def test_padded_values_fill_the_size_class_with_the_last_value() -> None:
    assert padded_values("v", [1, 2, 3]) == {"v_0": 1, "v_1": 2, "v_2": 3, "v_3": 3}
    assert padded_values("v", ["a"]) == {"v_0": "a"}
    assert len(padded_values("v", list(range(9)))) == 16
    statement = select(Connector.id).where(padded_in(Connector.name, "name", 5))
    assert len(statement.compile().params) == 8
