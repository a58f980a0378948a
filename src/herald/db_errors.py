"""Errors that say the database cannot serve now (its connection lost, the server shutting down or
refusing connections), as opposed to errors of the statement itself; and the bounded retry of a
write whose caller cannot give up on it.

One home for both: the API answers such an error 503 "retry" (`herald.http.middleware`); the
delivery engine, which has handed messages over and holds their outcomes in memory only, writes
them again once the database answers (`retry_unavailable`) instead of leaving them unrecorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

log = logging.getLogger("herald.db")

T = TypeVar("T")

# SQLSTATE classes of a database that cannot serve now, whatever the request: 08 connection
# exception, 53 insufficient resources (e.g. 53300 too many connections), 57P operator intervention
# (shutting down, cannot connect now, the backend terminated by an administrator).
_UNAVAILABLE_STATES = ("08", "53", "57P")

_DATABASE_PACKAGES = ("asyncpg", "sqlalchemy", "aiosqlite")


def database_unavailable(exc: BaseException) -> bool:
    """True for an error saying the database cannot serve now (503 and retry), not that the request
    failed: through SQLAlchemy, or from the driver itself (reads run on it, `herald.direct_reads`)."""
    if isinstance(exc, DBAPIError):
        if isinstance(exc.orig, TimeoutError):  # the driver's, wrapped (`herald.direct_reads`)
            return True
        return exc.connection_invalidated or (exc.orig is not None and database_unavailable(exc.orig))
    if isinstance(exc, ConnectionError):  # refused, reset: nothing answers at the address
        return True
    if isinstance(exc, PoolTimeoutError):  # every pooled connection stayed busy (or stuck connecting)
        return True
    if isinstance(exc, TimeoutError) and _raised_in(exc, _DATABASE_PACKAGES):
        return True  # asyncpg's connect timeout: a server that accepts and never answers
    if _connection_lost(exc):
        return True
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return isinstance(state, str) and state.startswith(_UNAVAILABLE_STATES)


def _connection_lost(exc: BaseException) -> bool:
    """asyncpg's own word for a connection that went away under a statement (closed in the middle
    of it, or closed before it), which carries no SQLSTATE."""
    module = type(exc).__module__
    if not module.startswith("asyncpg"):
        return False
    import asyncpg  # PostgreSQL only (an error of its module: it is loaded)

    if isinstance(exc, asyncpg.ConnectionDoesNotExistError):
        return True
    return isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc)


def _raised_in(exc: BaseException, packages: tuple[str, ...]) -> bool:
    """Whether `exc` came out of code of one of `packages` (a frame of its traceback is theirs):
    a `TimeoutError` of the database driver, not of anything else a handler waited for."""
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(module, str) and module.split(".", 1)[0] in packages:
            return True
        tb = tb.tb_next
    return False


# The waits between the tries of `retry_unavailable`: doubled from a tenth of a second, capped at
# five; about 30 s in all before it gives up (a server restarted, a failover, connections killed by
# an operator: each answers again well within that).
RETRY_FIRST = 0.1
RETRY_CAP = 5.0
RETRY_TRIES = 10


async def retry_unavailable(
    write: Callable[[], Awaitable[T]],
    what: str,
    *,
    tries: int = RETRY_TRIES,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """`write()`, tried again after a wait while it fails because the database cannot serve
    (`database_unavailable`), at most `tries` times in all; any other error, or the last one,
    raised. `write` must be safe to run twice: a commit whose answer was lost may have been applied."""
    delay = RETRY_FIRST
    for attempt in range(1, tries + 1):
        try:
            return await write()
        except Exception as exc:
            if attempt >= tries or not database_unavailable(exc):
                raise
            log.warning(
                "the database cannot serve (%s: %s); %s again in %.1fs", type(exc).__name__, exc, what, delay
            )
        await sleep(delay)
        delay = min(delay * 2, RETRY_CAP)
    raise AssertionError("unreachable")
