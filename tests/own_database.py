"""A database per test module, for the directories whose tests serve processes (their conftest
imports `database_url`): a served process runs workers that scan every workspace, and on the run's
shared database they would work through what every earlier test left behind (a campaign sending to
a receiver long gone), slowing the test and the machine."""

from __future__ import annotations

import pytest

from tests.conftest import Databases


@pytest.fixture(scope="module")
def database_url(databases: Databases) -> str:
    return databases.fresh()
