"""Each module here has a database of its own (`tests.own_database`)."""

from tests.own_database import database_url  # noqa: F401
