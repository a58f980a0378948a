"""The watch of a dispatch's windows (`engine.halting.Watch`): a read of the campaign that fails
because the database cannot answer leaves the windows going (their rows were written under a check
of their own); any other error is not swallowed."""

from __future__ import annotations

import pytest

from herald import wake
from herald.delivery.engine.halting import STOPPED, Watch


async def _refused() -> tuple[bool, None]:
    raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")


async def _broken() -> tuple[bool, None]:
    raise ValueError("a defect of the read itself")


async def _stopped() -> tuple[bool, None]:
    return False, None


async def test_a_database_refusing_connections_does_not_end_the_window() -> None:
    # Before, the driver's ConnectionRefusedError (not SQLAlchemy's) came out of the request's
    # check and ended the window: its answered messages unrecorded, their users held until the
    # lease passed, and sent again then.
    watch = Watch(_refused)
    halt = watch.halt(None)
    wake.wake_here()  # a read is due
    assert await halt() is None
    assert not watch.stopped
    await watch.close()


async def test_a_stop_read_halts_the_next_request() -> None:
    watch = Watch(_stopped)
    halt = watch.halt(None)
    wake.wake_here()
    assert await halt() == STOPPED
    await watch.close()


async def test_an_error_of_the_read_itself_is_raised() -> None:
    watch = Watch(_broken)
    halt = watch.halt(None)
    wake.wake_here()
    with pytest.raises(ValueError, match="defect"):
        await halt()
    await watch.close()
