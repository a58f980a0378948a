"""`direct_reads.rows_in` and `padded_in`: statements run on the driver inside the caller's
transaction or outside any (`DirectReads`), with IN lists compiled once per size class;
`DirectReads.write`, one statement its own transaction. Both engines (PostgreSQL when
HERALD_TEST_DATABASE_URL is set)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Boolean, String, bindparam, func, insert, literal, literal_column, select, text
from sqlalchemy.exc import IntegrityError

from herald.campaigns.models import CampaignRequestId
from herald.config import Settings
from herald.db import Database, PortableJSON, UTCDateTime, create_database
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


async def test_rows_outside_a_transaction_hold_what_a_transaction_reads(database: Database) -> None:
    """`rows_in` on `DirectReads` (the driver, no session): the same named rows, each value as
    SQLAlchemy makes it: a JSON document decoded (on PostgreSQL SQLAlchemy decodes it with codecs
    of its own pool's connections, which the direct pool has not), a date-time aware in UTC."""
    statement = select(
        bindparam("document", type_=PortableJSON).label("document"),
        bindparam("at", type_=UTCDateTime).label("at"),
        bindparam("name", type_=String).label("name"),
    )
    values = {
        "document": {"senders": ["a@example.com"], "port": 25},
        "at": datetime(2026, 11, 27, tzinfo=UTC),
    }
    values["name"] = "hook"
    async with database.reader() as session:
        in_transaction = await rows_in(await session.connection(), statement, values)
    direct = await rows_in(database.direct, statement, values)
    assert direct == in_transaction
    assert direct[0].document == values["document"]
    assert direct[0].at == values["at"]
    assert direct[0].at.tzinfo is not None
    assert direct[0].name == "hook"


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


async def test_a_single_write_is_its_own_transaction_under_its_condition(database: Database) -> None:
    """`DirectReads.write` (PostgreSQL's pool, no BEGIN or COMMIT round trips): the rows written
    when the statement's condition holds, none when it does not, a duplicate key raised as
    SQLAlchemy raises it; SQLite refuses it (its transactions cost no round trips)."""
    table = CampaignRequestId.__table__
    rows = select(
        bindparam("workspace_id", type_=String),
        bindparam("request_id", type_=String),
        literal("c1", String),
        bindparam("at", type_=UTCDateTime),
    ).where(bindparam("go", type_=Boolean))
    statement = insert(table).from_select(["workspace_id", "request_id", "campaign_id", "expires_at"], rows)
    at = datetime(2026, 11, 27, tzinfo=UTC)
    values = {"workspace_id": "direct-write", "request_id": "r1", "at": at}
    if database.engine.dialect.name != "postgresql":
        with pytest.raises(TypeError):
            await database.direct.write(statement, {**values, "go": True})
        return
    assert await database.direct.write(statement, {**values, "go": False}) == 0
    assert await database.direct.write(statement, {**values, "go": True}) == 1
    with pytest.raises(IntegrityError):
        await database.direct.write(statement, {**values, "go": True})
    async with database.reader() as session:
        found = await session.scalars(
            select(CampaignRequestId.request_id).where(CampaignRequestId.workspace_id == "direct-write")
        )
        assert list(found) == ["r1"]  # committed: another connection sees it
